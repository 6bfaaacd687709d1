//! `add`: `a + b`, elementwise, IEEE-754 binary32 round-to-nearest-even.
//!
//! Rule: both arguments receive the cotangent unchanged.

use crate::Element;

use super::{Contributions, VjpArgs};
use crate::Recordable;

/// `a + b`.
pub fn scalar<E: Element>(a: E, b: E) -> E {
    a + b
}

pub(crate) fn vjp<R: Recordable>(
    _r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let g = v.cotangent;
    Ok([
        v.wants[0].then(|| g.clone()),
        v.wants[1].then(|| g.clone()),
        None,
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(1.5, -0.25), 1.25);
        assert_eq!(super::scalar::<f32>(-0.0, -0.0).to_bits(), 0x8000_0000);
    }
}
