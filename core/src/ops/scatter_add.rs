//! `scatter_add(indices, updates)`: `gather`'s adjoint. Output of the target shape (the
//! attribute `AxisTo { axis, shape }`): zeros, then each slice of `updates` added at the
//! position its index selects along the axis (PyTorch's `index_add` with a flat index; the
//! embedding's gradient). Indices follow [`super::gather`]'s rule: an invalid one adds nothing.
//! Duplicate indices accumulate.
//!
//! Rule: `updates̅ += gather(ḡ, indices)` along the axis; nothing for `indices`.

use super::gather::{axis_of, gathered_shape, index_of};
use super::slice::outer_inner;
use super::{nth, target_of, want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule: `updates` has the shape `gather` gives over the target and `indices`; the
/// output is the target.
///
/// # Errors
/// [`OpError::BadTarget`] (from `updates` to the target) otherwise.
#[inline(always)]
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let target = target_of(op, attr)?;
    let (indices, updates) = (nth(args, 0), nth(args, 1));
    if gathered_shape(target, indices, axis_of(attr)) != Some(updates) {
        return Err(OpError::BadTarget {
            op,
            from: updates,
            to: target,
        });
    }
    Ok(target)
}

/// The reference kernel: `out: [outer, n, inner]` around the axis, `indices` flat (`m`),
/// `updates: [outer, m, inner]`.
///
/// # Arithmetic order
/// Every output element starts at `+0.0`; `updates` is walked once in increasing row-major
/// index order and each element with a valid index is added (`acc = acc + u`) to the output it
/// maps to. So duplicate indices accumulate in increasing index position (`j`) order.
pub fn kernel<E: Element>(
    indices: &[E],
    updates: &[E],
    out: &mut [E],
    out_shape: Shape,
    axis: usize,
) {
    for o in out.iter_mut() {
        *o = E::ZERO;
    }
    if axis >= out_shape.rank() {
        return;
    }
    let (outer, inner) = outer_inner(out_shape, axis);
    let n = out_shape.dim(axis).unwrap_or(0);
    let m = indices.len();
    for o in 0..outer {
        for (j, &v) in indices.iter().enumerate() {
            let Some(i) = index_of(v, n) else { continue };
            let from = (o * m + j) * inner;
            let to = (o * n + i) * inner;
            if let (Some(src), Some(dst)) =
                (updates.get(from..from + inner), out.get_mut(to..to + inner))
            {
                for (d, &s) in dst.iter_mut().zip(src) {
                    *d = *d + s;
                }
            }
        }
    }
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.arg(1), k.out, k.out_shape, axis_of(k.attr));
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let axis = axis_of(v.attr);
    let d = want(v.wants[1], || r.gather(v.cotangent, v.args[0], axis))?;
    Ok([None, d, None])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_accumulate_and_invalid_indices_add_nothing() {
        // Target [3, 2]; indices 1, 1, 0, 7 (invalid), -1 (row 2).
        let ids = [1., 1., 0., 7., -1.];
        let u = [1., 2., 10., 20., 100., 200., 5., 5., 0.5, 0.25];
        let t = Shape::matrix(3, 2);
        let attr = Attr::AxisTo(0, t);
        assert_eq!(
            infer(
                Opcode::ScatterAdd,
                attr,
                &[Shape::vector(5), Shape::matrix(5, 2)]
            ),
            Ok(t)
        );
        assert!(infer(
            Opcode::ScatterAdd,
            attr,
            &[Shape::vector(5), Shape::matrix(4, 2)]
        )
        .is_err());
        let mut out = [9.0f32; 6];
        kernel(&ids, &u, &mut out, t, 0);
        assert_eq!(out, [100., 200., 11., 22., 0.5, 0.25]);
    }
}
