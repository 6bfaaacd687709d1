//! `fill`: every element equal to the attribute. A leaf: constants, seeds and learning rates.

use super::{target_of, Kernel, OpError};
use crate::{Attr, Element, Opcode, Shape};

pub(crate) use super::no_rule as vjp;

/// The shape rule: the attribute's shape.
#[inline(always)]
pub(crate) fn infer(op: Opcode, attr: Attr, _args: &[Shape]) -> Result<Shape, OpError> {
    target_of(op, attr)
}

/// Through [`kernel`] with the attribute's value.
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.attr.scalar(), k.out);
    Ok(())
}

/// Writes `value` to every element of `out`.
pub fn kernel<E: Element>(value: f32, out: &mut [E]) {
    let v = E::from_f32(value);
    for o in out.iter_mut() {
        *o = v;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fills_exact_bits() {
        let mut out = [0.0f32; 3];
        super::kernel(-0.0, &mut out);
        assert!(out.iter().all(|v| v.to_bits() == 0x8000_0000));
    }
}
