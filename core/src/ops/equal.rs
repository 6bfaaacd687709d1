//! `equal`: the mask `1` where `a == b` (IEEE equality: `-0 == +0`, NaN equals nothing), else `0`.
//! `max_to`'s rule speaks it.
//!
//! Rule: none (piecewise constant).

use crate::Element;

use super::{Contributions, VjpArgs};
use crate::Recordable;

/// `a == b` as `1.0` or `0.0`.
pub fn scalar<E: Element>(a: E, b: E) -> E {
    if a == b {
        E::ONE
    } else {
        E::ZERO
    }
}

pub(crate) fn vjp<R: Recordable>(
    _r: &mut R,
    _v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    Ok([None, None, None])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(-0.0, 0.0), 1.0);
        assert_eq!(super::scalar::<f32>(f32::NAN, f32::NAN), 0.0);
    }
}
