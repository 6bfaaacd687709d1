//! `broadcast`: NumPy broadcasting of `x` to a target shape (trailing alignment; each extent of
//! `x` equals the target's or is 1). Exact: a copy.
//!
//! Rule: `x̄ += sum_to(ḡ, shape(x))`: summation is broadcasting's adjoint.

use super::{target_of, want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule.
///
/// # Errors
/// [`OpError::BadTarget`] when `x` does not broadcast to `target`.
#[inline(always)]
pub fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (x, target) = (super::nth(args, 0), target_of(op, attr)?);
    if !x.broadcasts_to(&target) {
        return Err(OpError::BadTarget {
            op,
            from: x,
            to: target,
        });
    }
    Ok(target)
}

/// `out[i] = x[source(i)]` over the target's row-major indices.
pub fn kernel<E: Element>(x: &[E], x_shape: Shape, out: &mut [E], out_shape: Shape) {
    for (i, o) in out.iter_mut().enumerate() {
        if let Some(&v) = x.get(x_shape.broadcast_source_index(&out_shape, i)) {
            *o = v;
        }
    }
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.shape(0), k.out, k.out_shape);
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let s = r.shape_of(v.args[0]);
    Ok([want(v.wants[0], || r.sum_to(v.cotangent, s))?, None, None])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        let mut out = [0.0f32; 6];
        let xs = crate::Shape::vector(3);
        super::kernel(&[1., 2., 3.], xs, &mut out, crate::Shape::matrix(2, 3));
        assert_eq!(out, [1., 2., 3., 1., 2., 3.]);
    }
}
