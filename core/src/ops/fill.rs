//! `fill`: every element equal to the attribute. A leaf: constants, seeds and learning rates.

use crate::Element;

/// Writes `value` to every element of `out`.
pub fn kernel<E: Element>(value: f32, out: &mut [E]) {
    let v = E::from_f32(value);
    for o in out.iter_mut() {
        *o = v;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn fills_exact_bits() {
        let mut out = [0.0f32; 3];
        super::kernel(-0.0, &mut out);
        assert!(out.iter().all(|v| v.to_bits() == 0x8000_0000));
    }
}
