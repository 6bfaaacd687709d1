//! `softplus`: `log(1 + e^x)`, as PyTorch's `nn.Softplus(beta=1, threshold=20)`: `x` itself above
//! the threshold 20, else, under the `precise` math profile, `libm::log1pf(libm::expf(x))`;
//! under `fast`, `ln(1 + exp(x))` with [`crate::math::fast::exp`] and [`crate::math::fast::ln`]
//! (micromath has no `log1p`: the sum rounds, so below about −16.6 the result is exactly `0`).
//!
//! Rule: `x̄ += ḡ · sigmoid(x)`.

use crate::Element;

use super::{unary_rule, Contributions, VjpArgs};
use crate::Recordable;

/// PyTorch's linear threshold.
pub const THRESHOLD: f32 = 20.0;

/// `softplus(x)`.
pub fn scalar<E: Element>(x: E) -> E {
    if x > E::from_f32(THRESHOLD) {
        x
    } else {
        x.exp().ln_1p()
    }
}

/// `softplus(x)` (`fast`).
pub fn scalar_fast<E: Element>(x: E) -> E {
    if x > E::from_f32(THRESHOLD) {
        x
    } else {
        (E::ONE + x.exp_fast()).ln_fast()
    }
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    unary_rule(r, v, |r, x, _y| r.sigmoid(x))
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert!((super::scalar::<f32>(0.0) - core::f32::consts::LN_2).abs() < 1e-7);
        assert_eq!(super::scalar::<f32>(30.0), 30.0);
        assert_eq!(super::scalar::<f32>(-200.0), 0.0);
    }
}
