//! `input` and `parameter`: leaves. Their values come from outside the computation (the caller
//! sets inputs; parameters live in the persistent region). They have no kernel and no rule: a
//! leaf's cotangent is the answer, not something to pass on.

use super::{target_of, Kernel, OpError};
use crate::{Attr, Element, Opcode, Shape};

pub(crate) use super::no_rule as vjp;

/// A leaf's shape is its target.
#[inline(always)]
pub(crate) fn infer(op: Opcode, attr: Attr, _args: &[Shape]) -> Result<Shape, OpError> {
    target_of(op, attr)
}

/// A leaf has no kernel.
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    Err(OpError::Leaf { op: k.op })
}
