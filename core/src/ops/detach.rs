//! `detach`: the identity forward, a reverse rule that contributes nothing. The forward edge
//! stays visible in the tape; only the reverse contribution is cut (a stop-gradient).

use crate::Element;

/// `x` (through [`Element::detach`]: the identity for `f32` and `f64`; a number that carries a
/// derivative drops it).
pub fn scalar<E: Element>(x: E) -> E {
    x.detach()
}

pub(crate) use super::no_rule as vjp;
