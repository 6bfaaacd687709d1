//! `sqrt`: `libm::sqrtf(x)`, correctly rounded (IEEE-754 requires it; identical on every target),
//! under both math profiles: `fast` does not approximate it.
//!
//! Rule: `x̄ += ḡ · (0.5 / y)` with `y` the node's output, as `mul(ḡ, div(fill(0.5), y))`
//! (PyTorch's `ḡ / (2y)`, spoken as a product so that it preserves zeros: `mul` makes `0 · inf`
//! a zero, so a zero cotangent at `x = 0` contributes `0`, not `0 / 0 = NaN`, while a nonzero
//! cotangent still meets `d√x/dx = +inf` at `x = 0`; see [`super::mul`]). Two roundings (the
//! quotient, then the product) where PyTorch's form has one.

use crate::Element;

use super::{unary_rule, Contributions, VjpArgs};
use crate::Recordable;

/// `√x` (NaN for `x < 0`, `-0` for `-0`).
pub fn scalar<E: Element>(x: E) -> E {
    x.sqrt()
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    unary_rule(r, v, |r, _x, y| {
        let half = r.fill(0.5, r.shape_of(y))?;
        r.div(&half, y)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn literal() {
        assert_eq!(super::scalar::<f32>(2.25), 1.5);
        assert_eq!(super::scalar::<f32>(-0.0).to_bits(), 0x8000_0000);
        assert!(super::scalar::<f32>(-1.0).is_nan());
    }

    #[cfg(feature = "alloc")]
    #[test]
    fn slope_at_zero_is_infinite_and_a_zero_cotangent_contributes_zero() {
        use crate::{Recordable, Run, Shape, Tape, Tensor};
        use alloc::vec;
        // d√x/dx at x = 0 is +inf; 0 · √x at x = 0 sends a zero cotangent to √, which
        // contributes 0 (IEEE's 0 / 0 would be NaN).
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::vector(2));
        let (f, g) = {
            let mut t = tape.trace();
            let y = t.sqrt(&x).unwrap();
            let f = t.sum_all(&y).unwrap();
            let z = t.fill(0.0, Shape::vector(2)).unwrap();
            let zy = t.mul(&z, &y).unwrap();
            (f, t.sum_all(&zy).unwrap())
        };
        let mut run = Run::new(&tape);
        run.set(x, Tensor::new(Shape::vector(2), vec![0.0, 4.0]).unwrap())
            .unwrap();
        let adj = run.backward(f, Tensor::scalar(1.0), &[x]).unwrap();
        assert_eq!(adj.get(x).unwrap().data, [f32::INFINITY, 0.25]);
        let adj = run.backward(g, Tensor::scalar(1.0), &[x]).unwrap();
        assert_eq!(adj.get(x).unwrap().data, [0.0, 0.0]);
    }
}
