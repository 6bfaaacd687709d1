//! `argmax`: the index of the maximum along one axis (the attribute `Axis`), as `f32` (ONNX's
//! `ArgMax` with `keepdims = 1`, `select_last_index = 0`; PyTorch's `argmax(dim, keepdim=True)`).
//! The output is `x`'s shape with the axis's extent 1; ONNX's `keepdims = 0` is a `reshape`
//! after.
//!
//! Ties: the lowest index (`-0` and `+0` tie). NaN: a NaN counts as the maximum, and the first
//! NaN wins (numpy's and PyTorch's `argmax`; the same convention as `max_to`, whose value it
//! indexes). Indices are exact in `f32` up to 2^24.
//!
//! An instruction: no composition of the others yields an index (a `max_to` and `equal` mask
//! marks every tied maximum, and turning the first mark into its position needs a scan the
//! vocabulary does not have).
//!
//! Rule: none (the indices are piecewise constant in `x`).

use super::slice::outer_inner;
use super::{nth, Kernel, OpError};
use crate::{Attr, Element, Opcode, Shape};

/// The attribute's axis.
fn axis_of(attr: Attr) -> usize {
    match attr {
        Attr::Axis(a) => a,
        _ => 0,
    }
}

/// The shape rule: `x`'s shape with extent 1 along the axis.
///
/// # Errors
/// [`OpError::BadTarget`] for an axis not below the rank, or an extent along it of 0 (no
/// index to give).
#[inline(always)]
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (x, axis) = (nth(args, 0), axis_of(attr));
    if axis >= x.rank() || x.dim(axis) == Some(0) {
        return Err(OpError::BadTarget { op, from: x, to: x });
    }
    let mut d = x.dims();
    d[axis] = 1;
    Ok(Shape::new(&d[..x.rank()])?)
}

/// The reference kernel: `x: [outer, n, inner]` around the axis, `out: [outer, 1, inner]`.
/// For each output, the candidates are visited in increasing index along the axis; the first is
/// the best so far, and a later one takes over when it is NaN or greater, unless the best is
/// NaN. The output is the best's index as an element.
pub fn kernel<E: Element>(x: &[E], x_shape: Shape, out: &mut [E], axis: usize) {
    if axis >= x_shape.rank() {
        return;
    }
    let (outer, inner) = outer_inner(x_shape, axis);
    let n = x_shape.dim(axis).unwrap_or(0);
    for o in 0..outer {
        for i in 0..inner {
            let mut best: Option<(usize, E)> = None;
            for j in 0..n {
                let Some(&v) = x.get((o * n + j) * inner + i) else {
                    continue;
                };
                match best {
                    Some((_, b)) if b.is_nan() || !(v.is_nan() || v > b) => {}
                    _ => best = Some((j, v)),
                }
            }
            if let (Some((j, _)), Some(slot)) = (best, out.get_mut(o * inner + i)) {
                *slot = E::from_f32(j as f32);
            }
        }
    }
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.shape(0), k.out, axis_of(k.attr));
    Ok(())
}

pub(crate) use super::no_rule as vjp;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_index_on_ties_first_nan_wins() {
        // [2, 4] along axis 1: a tie (3 at 0 and 2), then a NaN at 1 and 3.
        let x = [3., 0., 3., 1., 1., f32::NAN, 9., f32::NAN];
        let s = Shape::matrix(2, 4);
        assert_eq!(
            infer(Opcode::ArgMax, Attr::Axis(1), &[s]),
            Ok(Shape::matrix(2, 1))
        );
        let mut out = [9.0f32; 2];
        kernel(&x, s, &mut out, 1);
        assert_eq!(out, [0., 1.]);
        // Along axis 0: columns (3, 1), (0, NaN), (3, 9), (1, NaN).
        let mut out = [9.0f32; 4];
        kernel(&x, s, &mut out, 0);
        assert_eq!(out, [0., 1., 1., 1.]);
        // -0 and +0 tie: the lowest index.
        let mut out = [9.0f32];
        kernel(&[-1., 0.0, -0.0], Shape::vector(3), &mut out, 0);
        assert_eq!(out, [1.]);
        assert!(infer(Opcode::ArgMax, Attr::Axis(2), &[s]).is_err());
        assert!(infer(Opcode::ArgMax, Attr::Axis(0), &[Shape::matrix(0, 2)]).is_err());
    }
}
