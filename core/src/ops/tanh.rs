//! `tanh`. Under the `precise` math profile `libm::tanhf(x)` (musl's algorithm, pure software,
//! identical on every target); under `fast` [`crate::math::fast::tanh`]: `x` for tiny `|x|`,
//! else `±(1 − 2 / (exp(2|x|) + 1))` over micromath's `exp` (micromath has no `tanh`).
//!
//! Rule: `x̄ += ḡ * (1 - y * y)` with `y` the node's output, evaluated as
//! `mul(ḡ, sub(fill(1), mul(y, y)))`.

use crate::Element;

use super::{unary_rule, Contributions, VjpArgs};
use crate::Recordable;

/// `tanh(x)` (`precise`).
pub fn scalar<E: Element>(x: E) -> E {
    x.tanh()
}

/// `tanh(x)` (`fast`).
pub fn scalar_fast<E: Element>(x: E) -> E {
    x.tanh_fast()
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    unary_rule(r, v, |r, _x, y| {
        let shape = r.shape_of(y);
        let one = r.fill(1.0, shape)?;
        let yy = r.mul(y, y)?;
        r.sub(&one, &yy)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(0.0), 0.0);
        assert!((super::scalar::<f32>(0.5) - 0.462_117_16).abs() < 1e-7);
        assert_eq!(super::scalar::<f32>(f32::INFINITY), 1.0);
    }
}
