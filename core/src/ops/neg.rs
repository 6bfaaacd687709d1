//! `neg`: `-x`, a sign-bit flip (exact; NaN payloads keep their bits but the sign).
//!
//! Rule: `x̄ += -ḡ`.

use crate::Element;

use super::{want, Contributions, VjpArgs};
use crate::Recordable;

/// `-x`.
pub fn scalar<E: Element>(x: E) -> E {
    -x
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    Ok([want(v.wants[0], || r.neg(v.cotangent))?, None, None])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(0.0).to_bits(), 0x8000_0000);
    }
}
