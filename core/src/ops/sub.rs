//! `sub`: `a - b`, elementwise.
//!
//! Rule: `ā += ḡ`, `b̄ += -ḡ`.

use crate::Element;

use super::{want, Contributions, VjpArgs};
use crate::Recordable;

/// `a - b`.
pub fn scalar<E: Element>(a: E, b: E) -> E {
    a - b
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let g = v.cotangent;
    Ok([
        v.wants[0].then(|| g.clone()),
        want(v.wants[1], || r.neg(g))?,
        None,
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(1.5, -0.25), 1.75);
    }
}
