//! `detach`: the identity forward, a reverse rule that contributes nothing. The forward edge
//! stays visible in the tape; only the reverse contribution is cut (a stop-gradient).

use crate::Element;

use super::{Contributions, VjpArgs};
use crate::Recordable;

/// `x` (through [`Element::detach`]: the identity for `f32` and `f64`; a number that carries a
/// derivative drops it).
pub fn scalar<E: Element>(x: E) -> E {
    x.detach()
}

pub(crate) fn vjp<R: Recordable>(
    _r: &mut R,
    _v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    Ok([None, None, None])
}
