//! `affine_scan(c, b)`: the exclusive affine recurrence along each group (groups and walk as in
//! [`super::cumprod_exclusive`], attribute `Scan { axes, reverse }`): the group's first is `0`;
//! each other is `z = b[p] + c[p] * z[p]`, `p` its predecessor in the walk. The second-order
//! piece of `prod_to`'s family: [`super::cumprod_exclusive`]'s rule speaks it.
//!
//! Rule (with `α = affine_scan(c, z̄, opposite direction)`, the adjoint of the recurrence,
//! which runs the other way): `b̄ += α`, `c̄ += α * z` (`z` this node's output). So its rule
//! speaks itself and `mul`: the family closes.

use super::scan::{check_axes, scan_of, walk};
use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule: `c` and `b` of one shape, the output's; the mask names axes below its rank.
///
/// # Errors
/// [`OpError::ShapeMismatch`] for two shapes; [`OpError::BadTarget`] for the mask.
#[inline(always)]
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let x = super::same_shapes(op, args)?;
    if !check_axes(scan_of(attr).0, x) {
        return Err(OpError::BadTarget { op, from: x, to: x });
    }
    Ok(x)
}

/// The reference kernel.
///
/// # Arithmetic order
/// Elements in increasing flat index (decreasing with `reverse`): the group's first is `+0`;
/// each other is `b[p] + c[p] * z[p]` (a rounded product, then a rounded sum; never fused).
pub fn kernel<E: Element>(c: &[E], b: &[E], shape: Shape, out: &mut [E], axes: u8, reverse: bool) {
    let n = out.len().min(c.len()).min(b.len());
    walk(n, shape, axes, reverse, out, E::ZERO, |p, z| {
        Some(*b.get(p)? + *c.get(p)? * z)
    });
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let (axes, reverse) = scan_of(k.attr);
    kernel(k.arg(0), k.arg(1), k.shape(0), k.out, axes, reverse);
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let (axes, reverse) = scan_of(v.attr);
    if !v.wants[0] && !v.wants[1] {
        return Ok([None, None, None]);
    }
    let alpha = r.affine_scan(v.args[0], v.cotangent, axes, !reverse)?;
    let dc = want(v.wants[0], || r.mul(&alpha, v.out))?;
    Ok([dc, v.wants[1].then_some(alpha), None])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal() {
        // Forward: z0 = 0, z1 = b0 + c0 z0 = 1, z2 = b1 + c1 z1 = 2 + 3 = 5, z3 = 4 + 5 * 5.
        let (c, b) = ([2., 3., 5., 7.], [1., 2., 4., 8.]);
        let mut out = [9.0f32; 4];
        kernel(&c, &b, Shape::vector(4), &mut out, 1, false);
        assert_eq!(out, [0., 1., 5., 29.]);
        // Reverse: z3 = 0, z2 = b3 + c3 z3 = 8, z1 = 4 + 5 * 8 = 44, z0 = 2 + 3 * 44.
        kernel(&c, &b, Shape::vector(4), &mut out, 1, true);
        assert_eq!(out, [134., 44., 8., 0.]);
    }
}
