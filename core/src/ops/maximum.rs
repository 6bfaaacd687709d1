//! `maximum`: the elementwise larger of `a` and `b`. NaN in either gives NaN (as PyTorch's
//! `torch.maximum`). Ties go to `a`: where `a >= b` the result is `a` (so `maximum(-0, +0)` is
//! `-0`).
//!
//! Rule, with the same tie rule: `ā += ḡ · greater_equal(a, b)`, `b̄ += ḡ · greater(b, a)`: on a
//! tie the whole cotangent goes to `a` (PyTorch splits it in halves; ours is the subgradient the
//! forward's tie rule selects, and both readings follow it).

use crate::Element;

use super::{want, Contributions, VjpArgs};
use crate::Recordable;

/// `maximum(a, b)`.
pub fn scalar<E: Element>(a: E, b: E) -> E {
    if a.is_nan() {
        a
    } else if b.is_nan() {
        b
    } else if a >= b {
        a
    } else {
        b
    }
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let (a, b, g) = (v.args[0], v.args[1], v.cotangent);
    let da = want(v.wants[0], || {
        let m = r.greater_equal(a, b)?;
        r.mul(g, &m)
    })?;
    let db = want(v.wants[1], || {
        let m = r.greater(b, a)?;
        r.mul(g, &m)
    })?;
    Ok([da, db, None])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(1.0, 2.0), 2.0);
        assert_eq!(super::scalar::<f32>(-0.0, 0.0).to_bits(), 0x8000_0000);
        assert!(super::scalar::<f32>(f32::NAN, 1.0).is_nan());
    }
}
