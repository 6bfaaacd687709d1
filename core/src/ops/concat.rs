//! `concat`: `a` then `b` along one axis (the attribute is the axis); every other extent agrees.
//!
//! Rule: `ā += slice(ḡ, axis, 0, len(a))`, `b̄ += slice(ḡ, axis, len(a), len(b))`.

use super::slice::outer_inner;
use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The attribute's axis.
fn axis_of(attr: Attr) -> usize {
    match attr {
        Attr::Axis(a) => a,
        _ => 0,
    }
}

/// The shape rule.
///
/// # Errors
/// [`OpError::ShapeMismatch`] when ranks or the other extents differ or the axis is out of range.
#[inline(always)]
pub fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (a, b, axis) = (super::nth(args, 0), super::nth(args, 1), axis_of(attr));
    let bad = OpError::ShapeMismatch { op, lhs: a, rhs: b };
    if a.rank() != b.rank() || axis >= a.rank() {
        return Err(bad);
    }
    let mut d = a.dims();
    for (k, slot) in d.iter_mut().enumerate().take(a.rank()) {
        let (x, y) = (a.dim(k).unwrap_or(0), b.dim(k).unwrap_or(0));
        if k == axis {
            *slot = x.checked_add(y).ok_or(bad)?;
        } else if x != y {
            return Err(bad);
        }
    }
    Ok(Shape::new(&d[..a.rank()])?)
}

/// `out[o, :na, i] = a[o, :, i]`, `out[o, na:, i] = b[o, :, i]`.
pub fn kernel<E: Element>(
    a: &[E],
    a_shape: Shape,
    b: &[E],
    b_shape: Shape,
    out: &mut [E],
    axis: usize,
) {
    let (outer, inner) = outer_inner(a_shape, axis);
    let (na, nb) = (
        a_shape.dim(axis).unwrap_or(0),
        b_shape.dim(axis).unwrap_or(0),
    );
    let (ra, rb) = (na * inner, nb * inner);
    for o in 0..outer {
        let dst = o * (ra + rb);
        if let (Some(s), Some(d)) = (a.get(o * ra..(o + 1) * ra), out.get_mut(dst..dst + ra)) {
            d.copy_from_slice(s);
        }
        if let (Some(s), Some(d)) = (
            b.get(o * rb..(o + 1) * rb),
            out.get_mut(dst + ra..dst + ra + rb),
        ) {
            d.copy_from_slice(s);
        }
    }
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let axis = axis_of(k.attr);
    kernel(k.arg(0), k.shape(0), k.arg(1), k.shape(1), k.out, axis);
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let axis = axis_of(v.attr);
    let na = r.shape_of(v.args[0]).dim(axis).unwrap_or(0);
    let nb = r.shape_of(v.args[1]).dim(axis).unwrap_or(0);
    let g = v.cotangent;
    let da = want(v.wants[0], || r.slice(g, axis, 0, na))?;
    let db = want(v.wants[1], || r.slice(g, axis, na, nb))?;
    Ok([da, db, None])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal() {
        let mut out = [0.0f32; 6];
        kernel(
            &[1., 2.],
            Shape::matrix(2, 1),
            &[3., 4., 5., 6.],
            Shape::matrix(2, 2),
            &mut out,
            1,
        );
        assert_eq!(out, [1., 3., 4., 2., 5., 6.]);
        let c = Opcode::Concat;
        assert_eq!(
            infer(
                c,
                Attr::Axis(1),
                &[Shape::matrix(2, 1), Shape::matrix(2, 2)]
            ),
            Ok(Shape::matrix(2, 3))
        );
        assert!(infer(
            c,
            Attr::Axis(1),
            &[Shape::matrix(2, 1), Shape::matrix(3, 2)]
        )
        .is_err());
    }
}
