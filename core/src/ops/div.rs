//! `div`: `a / b`, elementwise, IEEE division (correctly rounded on every target).
//!
//! Rule: `ā += ḡ / b`, `b̄ += -((ḡ / b) * y)` where `y = a / b` is the node's output.

use crate::Element;

use super::{want, Contributions, VjpArgs};
use crate::Recordable;

/// `a / b`.
pub fn scalar<E: Element>(a: E, b: E) -> E {
    a / b
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let g = v.cotangent;
    let b = v.args[1];
    let g_over_b = r.div(g, b)?;
    let db = want(v.wants[1], || {
        let t = r.mul(&g_over_b, v.out)?;
        r.neg(&t)
    })?;
    Ok([v.wants[0].then_some(g_over_b), db, None])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(1.0, 4.0), 0.25);
        assert!(super::scalar::<f32>(1.0, 0.0).is_infinite());
    }
}
