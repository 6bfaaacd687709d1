//! `relu`: `x` where `x > 0`; NaN stays NaN; otherwise `+0` (so `relu(-0) = +0`).
//!
//! Rule: `x̄ += ḡ * heaviside(x)`: the subgradient at 0 is 0, as in PyTorch.

use super::{want, Contributions, VjpArgs};
use crate::Recordable;

/// `relu(x)`.
pub fn scalar(x: f32) -> f32 {
    if x > 0.0 || x.is_nan() {
        x
    } else {
        0.0
    }
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let d = want(v.wants[0], || {
        let mask = r.heaviside(v.args[0])?;
        r.mul(v.cotangent, &mask)
    })?;
    Ok([d, None, None])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar(2.0), 2.0);
        assert_eq!(super::scalar(-0.0).to_bits(), 0);
        assert!(super::scalar(f32::NAN).is_nan());
    }
}
