//! `equal`: the mask `1` where `a == b` (IEEE equality: `-0 == +0`, NaN equals nothing), else `0`.
//! `max_to`'s rule speaks it.
//!
//! Rule: none (piecewise constant).

use crate::Element;

/// `a == b` as `1.0` or `0.0`.
pub fn scalar<E: Element>(a: E, b: E) -> E {
    if a == b {
        E::ONE
    } else {
        E::ZERO
    }
}

pub(crate) use super::no_rule as vjp;

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(-0.0, 0.0), 1.0);
        assert_eq!(super::scalar::<f32>(f32::NAN, f32::NAN), 0.0);
    }
}
