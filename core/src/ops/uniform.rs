//! `uniform`: counter-based random numbers, uniform in `[0, 1)`, of the target shape, from a
//! `key` and a `counter` (two scalar arguments, read as their `f32` bit patterns). Every element
//! is a pure function of `(key, counter, index)`, so every target draws the same numbers, a
//! reverse pass that reads the node replays the forward's draw, and advancing the counter (a
//! persistent value the train step updates) gives fresh numbers each step.
//!
//! The generator: `z = (key_bits << 32 | counter_bits) + (index + 1) · 0x9E3779B97F4A7C15`
//! (wrapping), then SplitMix64's output function (Steele, Lea & Flood, OOPSLA 2014) as the
//! bijective mixer, and the top 24 bits of the result over 2^24 (exact in `f32`). This is a
//! counter-based generator in the sense of Salmon et al. (SC 2011), with SplitMix64's mixer in
//! place of Philox's rounds; its statistical quality is SplitMix64's.
//!
//! Rule: none (the draw does not depend differentiably on its arguments).

use super::{target_of, Kernel, OpError};
use crate::{Attr, Element, Opcode, Shape};

/// The shape rule: two scalars (key and counter) to the target shape.
///
/// # Errors
/// [`OpError::ShapeMismatch`] when an argument is not one element.
#[inline(always)]
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    for a in args {
        if a.elems() != 1 {
            return Err(OpError::ShapeMismatch {
                op,
                lhs: super::nth(args, 0),
                rhs: super::nth(args, 1),
            });
        }
    }
    target_of(op, attr)
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.arg(1), k.out);
    Ok(())
}

/// The `index`-th number of stream `(key_bits, counter_bits)`.
pub fn draw(key_bits: u32, counter_bits: u32, index: u64) -> f32 {
    let base = (u64::from(key_bits) << 32) | u64::from(counter_bits);
    let mut z = base.wrapping_add(index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 40) as f32 * (1.0 / (1u32 << 24) as f32)
}

/// Fills `out` with draws `0, 1, …` of the stream named by `key[0]` and `counter[0]`.
pub fn kernel<E: Element>(key: &[E], counter: &[E], out: &mut [E]) {
    let k = key.first().map_or(0, |v| v.to_f32().to_bits());
    let c = counter.first().map_or(0, |v| v.to_f32().to_bits());
    for (i, o) in out.iter_mut().enumerate() {
        *o = E::from_f32(draw(k, c, i as u64));
    }
}

pub(crate) use super::no_rule as vjp;

#[cfg(test)]
mod tests {
    #[test]
    fn draws_are_in_range_and_depend_on_every_input() {
        let a = super::draw(1, 0, 0);
        assert!((0.0..1.0).contains(&a));
        assert_ne!(a, super::draw(2, 0, 0));
        assert_ne!(a, super::draw(1, 1, 0));
        assert_ne!(a, super::draw(1, 0, 1));
        let mut out = [0.0f32; 10_000];
        super::kernel(&[1.0], &[0.0], &mut out);
        let mean = out.iter().map(|&v| v as f64).sum::<f64>() / out.len() as f64;
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    }
}
