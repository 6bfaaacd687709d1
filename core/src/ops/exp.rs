//! `exp`: `libm::expf(x)`.
//!
//! Rule: `x̄ += ḡ * y` with `y` the node's output.

use crate::Element;

use super::{want, Contributions, VjpArgs};
use crate::Recordable;

/// `e^x`.
pub fn scalar<E: Element>(x: E) -> E {
    x.exp()
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
        assert_eq!(super::scalar::<f32>(0.0), 1.0);
        assert_eq!(super::scalar::<f32>(f32::NEG_INFINITY), 0.0);
    }
}
