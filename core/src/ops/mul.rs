//! `mul`: `a * b`, elementwise.
//!
//! Rule (product rule): `ā += ḡ * b`, `b̄ += ḡ * a`, the cotangent first. `x * x` names its
//! argument twice and so owes two contributions.

use crate::Element;

use super::{want, Contributions, VjpArgs};
use crate::Recordable;

/// `a * b`.
pub fn scalar<E: Element>(a: E, b: E) -> E {
    a * b
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let g = v.cotangent;
    let (a, b) = (v.args[0], v.args[1]);
    Ok([
        want(v.wants[0], || r.mul(g, b))?,
        want(v.wants[1], || r.mul(g, a))?,
        None,
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(1.5, -0.25), -0.375);
    }
}
