//! `minimum`: the elementwise smaller of `a` and `b`. NaN in either gives NaN. Ties go to `a`:
//! where `a <= b` the result is `a`.
//!
//! Rule, with the same tie rule: `ā += ḡ · greater_equal(b, a)`, `b̄ += ḡ · greater(a, b)`.

use crate::Element;

use super::{want, Contributions, VjpArgs};
use crate::Recordable;

/// `minimum(a, b)`.
pub fn scalar<E: Element>(a: E, b: E) -> E {
    if a.is_nan() {
        a
    } else if b.is_nan() {
        b
    } else if a <= b {
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
        let m = r.greater_equal(b, a)?;
        r.mul(g, &m)
    })?;
    let db = want(v.wants[1], || {
        let m = r.greater(a, b)?;
        r.mul(g, &m)
    })?;
    Ok([da, db, None])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(1.0, 2.0), 1.0);
        assert_eq!(super::scalar::<f32>(0.0, -0.0).to_bits(), 0);
    }
}
