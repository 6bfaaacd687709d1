//! `reshape`: the same elements in the same row-major order under another shape (a copy).
//!
//! Rule: `x̄ += reshape(ḡ, shape(x))`.

use super::{target_of, want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule: element counts must match.
///
/// # Errors
/// [`OpError::BadTarget`] when they do not.
#[inline(always)]
pub fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (x, target) = (super::nth(args, 0), target_of(op, attr)?);
    if x.elems() != target.elems() {
        return Err(OpError::BadTarget {
            op,
            from: x,
            to: target,
        });
    }
    Ok(target)
}

/// Copies `x` to `out`.
pub fn kernel<E: Element>(x: &[E], out: &mut [E]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v;
    }
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.out);
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let s = r.shape_of(v.args[0]);
    Ok([want(v.wants[0], || r.reshape(v.cotangent, s))?, None, None])
}
