//! `erf`: the error function `erf(x) = 2/√π ∫₀ˣ e^(−t²) dt`, `libm::erff(x)` (musl's algorithm,
//! pure software, identical on every target) under both math profiles: micromath has no `erf`, so
//! `fast` does not approximate it. It earns an instruction because no composition of the others
//! reproduces it (ONNX's `Erf`; the exact form of GELU, `x · (1 + erf(x / √2)) / 2`, is spoken
//! with it).
//!
//! Rule: `x̄ += ḡ · (2/√π) · e^(−x²)`, evaluated as
//! `mul(ḡ, mul(fill(2/√π), exp(neg(mul(x, x)))))`, `2/√π` rounded to `f32`
//! ([`TWO_OVER_SQRT_PI`]). It speaks `fill`, `mul`, `neg` and `exp`, each with a rule of its own.

use crate::Element;

use super::{unary_rule, Contributions, VjpArgs};
use crate::Recordable;

/// `2/√π` rounded to the nearest `f32` (`core::f32::consts::FRAC_2_SQRT_PI`), the slope of `erf`
/// at 0.
pub const TWO_OVER_SQRT_PI: f32 = core::f32::consts::FRAC_2_SQRT_PI;

/// `erf(x)`: odd, `±1` at `±∞`, NaN for NaN, `-0` for `-0`.
pub fn scalar<E: Element>(x: E) -> E {
    x.erf()
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    unary_rule(r, v, |r, x, _y| {
        let shape = r.shape_of(x);
        let c = r.fill(TWO_OVER_SQRT_PI, shape)?;
        let xx = r.mul(x, x)?;
        let minus = r.neg(&xx)?;
        let gauss = r.exp(&minus)?;
        r.mul(&c, &gauss)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        // erf(0.5) = 0.520499877813046…, erf(1) = 0.842700792949715…
        assert!((super::scalar::<f32>(0.5) - 0.520_499_9).abs() < 1e-7);
        assert!((super::scalar::<f32>(1.0) - 0.842_700_8).abs() < 1e-7);
        assert_eq!(super::scalar::<f32>(-1.0), -super::scalar::<f32>(1.0));
        assert_eq!(super::scalar::<f32>(-0.0).to_bits(), 0x8000_0000);
        assert_eq!(super::scalar::<f32>(f32::INFINITY), 1.0);
        assert_eq!(super::scalar::<f32>(f32::NEG_INFINITY), -1.0);
        assert!(super::scalar::<f32>(f32::NAN).is_nan());
    }
}
