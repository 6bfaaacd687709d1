//! `one_hot`: integer class labels stored as `f32`, `[batch]`, to rows `[batch, classes]`.
//!
//! A label that is not one of `0.0, 1.0, …, classes - 1` (a fraction, a negative, NaN, out of
//! range) gives a row of zeros: bad data cannot index outside the buffer.
//!
//! Rule: none (labels are not differentiable).

use super::{target_of, Kernel, OpError};
use crate::{Attr, Element, Opcode, Shape};

/// The shape rule: `[batch] -> [batch, classes]`, at most 2^24 classes.
///
/// # Errors
/// [`OpError::BadTarget`] when the target is not `[batch, _]`.
#[inline(always)]
pub fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (x, target) = (super::nth(args, 0), target_of(op, attr)?);
    // Class indices are compared as f32: every index up to 2^24 is exact.
    if x.rank() != 1
        || target.rank() != 2
        || target.dim(0) != x.dim(0)
        || target.dim(1).unwrap_or(0) > 1 << 24
    {
        return Err(OpError::BadTarget {
            op,
            from: x,
            to: target,
        });
    }
    Ok(target)
}

/// `out[r, c] = 1.0` where `labels[r] == c`, else `0.0`.
pub fn kernel<E: Element>(labels: &[E], out: &mut [E], classes: usize) {
    if classes == 0 {
        return;
    }
    for (row, &l) in out.chunks_exact_mut(classes).zip(labels) {
        for (c, o) in row.iter_mut().enumerate() {
            *o = if l == E::from_f32(c as f32) {
                E::ONE
            } else {
                E::ZERO
            };
        }
    }
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.out, k.out_shape.dim(1).unwrap_or(0));
    Ok(())
}

pub(crate) use super::no_rule as vjp;

#[cfg(test)]
mod tests {
    #[test]
    fn literal_and_bad_labels() {
        let mut out = [9.0f32; 12];
        super::kernel(&[2.0, 0.0, 7.0, f32::NAN], &mut out, 3);
        assert_eq!(out, [0., 0., 1., 1., 0., 0., 0., 0., 0., 0., 0., 0.]);
    }
}
