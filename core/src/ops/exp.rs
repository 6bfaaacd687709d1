//! `exp`: `libm::expf(x)`.
//!
//! Rule: `x̄ += ḡ * y` with `y` the node's output.

use super::{want, Contributions, VjpArgs};
use crate::Recordable;

/// `e^x`.
pub fn scalar(x: f32) -> f32 {
    libm::expf(x)
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    Ok([want(v.wants[0], || r.mul(v.cotangent, v.out))?, None, None])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar(0.0), 1.0);
        assert_eq!(super::scalar(f32::NEG_INFINITY), 0.0);
    }
}
