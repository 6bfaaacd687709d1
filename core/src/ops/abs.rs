//! `abs`: `|x|` (clears the sign bit).
//!
//! Rule (as PyTorch): `x̄ += ḡ · sign(x)`, so the subgradient at 0 is 0.

use crate::Element;

use super::{unary_rule, Contributions, VjpArgs};
use crate::Recordable;

/// `|x|`.
pub fn scalar<E: Element>(x: E) -> E {
    x.abs()
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    unary_rule(r, v, |r, x, _y| r.sign(x))
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(-2.5), 2.5);
        assert_eq!(super::scalar::<f32>(-0.0).to_bits(), 0);
    }
}
