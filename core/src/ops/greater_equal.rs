//! `greater_equal`: the mask `1` where `a >= b`, else `0` (NaN compares false). `less_equal` is
//! `greater_equal` with its arguments swapped.
//!
//! Rule: none (piecewise constant).

use crate::Element;

/// `a >= b` as `1.0` or `0.0`.
pub fn scalar<E: Element>(a: E, b: E) -> E {
    if a >= b {
        E::ONE
    } else {
        E::ZERO
    }
}

pub(crate) use super::no_rule as vjp;
