//! `cumprod_exclusive`: for each element, the product of the elements before it in its group
//! (after it, with `reverse`), `1` for the first (last); groups as in [`super::prod_to`], given
//! by the attribute `Scan { axes, reverse }` (the masked axes vary within a group). `prod_to`'s
//! rule speaks it: the product of every other element is `before * after`, with no division.
//!
//! Rule: `x̄ += y * affine_scan(x, ȳ, opposite direction)` (`y` this node's output): with
//! `p̄` the cotangent, `x̄_j = Σ_{i after j} p̄_i Π_{k before i, k ≠ j} x_k = y_j · R_j`, where
//! `R_j = p̄_{next} + x_{next} · R_{next}` walks the group the other way
//! ([`super::affine_scan`]).

use super::scan::{check_axes, scan_of, walk};
use super::{nth, want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule: `x`'s shape; the mask names axes below its rank.
///
/// # Errors
/// [`OpError::BadTarget`] otherwise.
#[inline(always)]
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let x = nth(args, 0);
    if !check_axes(scan_of(attr).0, x) {
        return Err(OpError::BadTarget { op, from: x, to: x });
    }
    Ok(x)
}

/// The reference kernel.
///
/// # Arithmetic order
/// Elements in increasing flat index (decreasing with `reverse`): the group's first is `1`;
/// each other is `y[p] * x[p]` (one rounded product), `p` its predecessor in the walk.
pub fn kernel<E: Element>(x: &[E], shape: Shape, out: &mut [E], axes: u8, reverse: bool) {
    let n = out.len().min(x.len());
    walk(n, shape, axes, reverse, out, E::ONE, |p, y| {
        x.get(p).map(|&xp| y * xp)
    });
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let (axes, reverse) = scan_of(k.attr);
    kernel(k.arg(0), k.shape(0), k.out, axes, reverse);
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let (axes, reverse) = scan_of(v.attr);
    let d = want(v.wants[0], || {
        let rest = r.affine_scan(v.args[0], v.cotangent, axes, !reverse)?;
        r.mul(v.out, &rest)
    })?;
    Ok([d, None, None])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_both_directions_and_a_zero() {
        let x = [2., 0., 3., 4.];
        let s = Shape::vector(4);
        let mut out = [9.0f32; 4];
        kernel(&x, s, &mut out, 1, false);
        assert_eq!(out, [1., 2., 0., 0.]);
        kernel(&x, s, &mut out, 1, true);
        assert_eq!(out, [0., 12., 4., 1.]);
        // Per column of [2, 2] (axis 0).
        kernel(&[2., 3., 5., 7.], Shape::matrix(2, 2), &mut out, 1, false);
        assert_eq!(out, [1., 1., 2., 3.]);
    }
}
