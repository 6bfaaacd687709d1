//! `greater`: the mask `1` where `a > b`, else `0` (NaN compares false). `less` is `greater`
//! with its arguments swapped.
//!
//! Rule: none (piecewise constant).

use crate::Element;

use super::{Contributions, VjpArgs};
use crate::Recordable;

/// `a > b` as `1.0` or `0.0`.
pub fn scalar<E: Element>(a: E, b: E) -> E {
    if a > b {
        E::ONE
    } else {
        E::ZERO
    }
}

pub(crate) fn vjp<R: Recordable>(
    _r: &mut R,
    _v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    Ok([None, None, None])
}
