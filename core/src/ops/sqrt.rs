//! `sqrt`: `libm::sqrtf(x)`, correctly rounded (IEEE-754 requires it; identical on every target),
//! under both math profiles: `fast` does not approximate it.
//!
//! Rule (as PyTorch): `x̄ += ḡ / (2 · y)` with `y` the node's output, as `div(ḡ, mul(fill(2), y))`.

use crate::Element;

use super::{want, Contributions, VjpArgs};
use crate::Recordable;

/// `√x` (NaN for `x < 0`, `-0` for `-0`).
pub fn scalar<E: Element>(x: E) -> E {
    x.sqrt()
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let d = want(v.wants[0], || {
        let s = r.shape_of(v.out);
        let two = r.fill(2.0, s)?;
        let twice = r.mul(&two, v.out)?;
        r.div(v.cotangent, &twice)
    })?;
    Ok([d, None, None])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(2.25), 1.5);
        assert_eq!(super::scalar::<f32>(-0.0).to_bits(), 0x8000_0000);
        assert!(super::scalar::<f32>(-1.0).is_nan());
    }
}
