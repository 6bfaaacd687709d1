//! Math profiles: which functions the transcendental kernels (`exp`, `log`, `tanh`, `sigmoid`,
//! `softplus`, `pow`) compute with. A plan records its profile (header flag bit 0, see
//! `docs/plan-format.md`), and every reader of the plan (the oracle, the planner's constant
//! folding, the host interpreter, the runtime's reference path and catalog) computes under it,
//! so each profile is verified bit for bit.
//!
//! - [`MathProfile::Precise`] (the default): `libm`'s `expf`, `logf`, `log1pf`, `tanhf`, `powf`
//!   (musl's algorithms, faithfully rounded, pure software).
//! - [`MathProfile::Fast`]: `micromath`'s approximations (`F32::exp`, `F32::ln`; relative error
//!   about 1e-3 and less code and time), with `tanh`, `pow` and the special values composed
//!   here in a fixed order (see [`fast`]). `micromath` uses only `+ - * /`, integer and bit
//!   operations (no fused multiply-add, no `std` float function), so it gives the same bits on
//!   every target.
//!
//! `sqrt` is correctly rounded (`libm::sqrtf`, IEEE-754's own operation) in both profiles, and
//! every other kernel (`add`, `matmul`, the reductions, …) is the same in both.
//!
//! Builds choose which profiles they carry with the features `math-precise` and `math-fast`
//! (both by default): a firmware links only the profile it runs ([`MathProfile::in_build`]).

use core::fmt;

/// Which functions the transcendental kernels compute with (see the [module docs](self)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum MathProfile {
    /// `libm` (faithfully rounded): the default.
    #[default]
    Precise = 0,
    /// `micromath`'s approximations (about 1e-3 relative error), composed as [`fast`] states.
    Fast = 1,
}

impl MathProfile {
    /// Both profiles, precise first.
    pub const ALL: [MathProfile; 2] = [MathProfile::Precise, MathProfile::Fast];

    /// The profile's name: `precise` or `fast` (the CLI's `--math` values).
    pub const fn name(self) -> &'static str {
        match self {
            MathProfile::Precise => "precise",
            MathProfile::Fast => "fast",
        }
    }

    /// The profile named `name` (`precise` or `fast`).
    pub fn from_name(name: &str) -> Option<MathProfile> {
        MathProfile::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The profile a plan header's flags word records: bit 0
    /// ([`crate::format::FLAG_MATH_FAST`]). Other bits are the caller's to reject.
    pub const fn from_flags(flags: u32) -> MathProfile {
        if flags & crate::format::FLAG_MATH_FAST != 0 {
            MathProfile::Fast
        } else {
            MathProfile::Precise
        }
    }

    /// The header flag bits that record this profile.
    pub const fn flags(self) -> u32 {
        match self {
            MathProfile::Precise => 0,
            MathProfile::Fast => crate::format::FLAG_MATH_FAST,
        }
    }

    /// True when this build carries the profile's kernels (features `math-precise`,
    /// `math-fast`); a kernel asked to run under another profile answers
    /// [`crate::OpError::MathProfile`].
    pub const fn in_build(self) -> bool {
        match self {
            MathProfile::Precise => cfg!(feature = "math-precise"),
            MathProfile::Fast => cfg!(feature = "math-fast"),
        }
    }
}

impl fmt::Display for MathProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The `fast` profile's `f32` functions: `micromath`'s approximations behind guards that give
/// the special values IEEE-754 (and `libm`) give, and keep `micromath` inside the inputs it
/// handles (it would otherwise overflow an integer or build a NaN). Each function states its
/// arithmetic order: that order is the definition of the `fast` bits.
#[cfg(feature = "math-fast")]
pub mod fast {
    use core::f32::consts::{LN_2, LOG2_E};
    use micromath::F32;

    /// Below this magnitude `tanh(x)` is `x` itself (`x³/3` is under half an ulp of `x`).
    pub const TANH_LINEAR_BELOW: f32 = 1.0 / 4096.0;

    fn abs(x: f32) -> f32 {
        f32::from_bits(x.to_bits() & 0x7fff_ffff)
    }

    /// `e^x`: NaN for NaN; `+inf` when `x · log2(e) ≥ 128` (the result overflows); `+0` when
    /// `x · log2(e) < −125` (results below `2^−125` flush to zero); otherwise
    /// `micromath::F32::exp(x)`: `x · log2(e)` split into a whole part `n` and a fraction `f`,
    /// `e^(f · ln 2)` by a four-term Horner series, then `2^n` put into the exponent bits.
    pub fn exp(x: f32) -> f32 {
        if x.is_nan() {
            return x;
        }
        let t = x * LOG2_E;
        if t >= 128.0 {
            return f32::INFINITY;
        }
        if t < -125.0 {
            return 0.0;
        }
        F32(x).exp().0
    }

    /// `ln x`: NaN for NaN and `x < 0`; `−inf` for `±0`; `+inf` for `+inf`; for `x ≥ 1`
    /// `micromath::F32::ln(x)` (the exponent times `ln 2` plus a degree-4 polynomial of the
    /// mantissa in `[1, 2)`); for `0 < x < 1`, `−micromath::F32::ln(1 / x)` with a rounded
    /// division: micromath itself takes `x < 1` through a bit-trick reciprocal whose error
    /// reaches 0.118 in the logarithm (at `x = 0.75`), which this avoids. Below `2^−64`, `x`
    /// is first scaled by `2^64` (exact) and `64 · ln 2` subtracted, so `1 / x` stays finite.
    pub fn ln(x: f32) -> f32 {
        if x.is_nan() {
            return x;
        }
        if x < 0.0 {
            return f32::NAN;
        }
        if x == 0.0 {
            return f32::NEG_INFINITY;
        }
        if x == f32::INFINITY {
            return x;
        }
        if x >= 1.0 {
            return F32(x).ln().0;
        }
        if x < TWO_POW_MINUS_64 {
            return -F32(1.0 / (x * TWO_POW_64)).ln().0 - 64.0 * LN_2;
        }
        -F32(1.0 / x).ln().0
    }

    const TWO_POW_64: f32 = 18_446_744_073_709_551_616.0;
    const TWO_POW_MINUS_64: f32 = 1.0 / TWO_POW_64;

    /// `tanh x` from [`exp`] (micromath has none): `x` itself for NaN, `±0` and
    /// `|x| <` [`TANH_LINEAR_BELOW`]; otherwise, with `a = |x|`,
    /// `t = 1 − 2 / (exp(a + a) + 1)` (each operation rounded in that order) carrying the sign
    /// of `x`. `exp` overflowing to `+inf` gives exactly `±1`.
    pub fn tanh(x: f32) -> f32 {
        let a = abs(x);
        if a.is_nan() || a < TANH_LINEAR_BELOW {
            return x;
        }
        let e = exp(a + a);
        let t = 1.0 - 2.0 / (e + 1.0);
        f32::from_bits(t.to_bits() | (x.to_bits() & 0x8000_0000))
    }

    /// True when `p` is an integer (every `|p| ≥ 2^23` is).
    fn is_integer(p: f32) -> bool {
        abs(p) >= 8_388_608.0 || ((p as i32) as f32) == p
    }

    /// True when `p` is an odd integer (none with `|p| ≥ 2^24` is).
    fn is_odd_integer(p: f32) -> bool {
        abs(p) < 16_777_216.0 && ((p as i32) as f32) == p && (p as i32) & 1 == 1
    }

    /// `x^p` as `micromath::F32::powf` composes it, over the guarded [`exp`] and [`ln`]:
    /// `1` when `p = ±0` (even for a NaN `x`); NaN when `x` or `p` is NaN; NaN when `x < 0` and
    /// `p` is not an integer; otherwise `m = exp(p · ln|x|)`, negated when `x` is negative
    /// (`−0` included) and `p` an odd integer.
    pub fn powf(x: f32, p: f32) -> f32 {
        if p == 0.0 {
            return 1.0;
        }
        if x.is_nan() || p.is_nan() {
            return f32::NAN;
        }
        if x < 0.0 && !is_integer(p) {
            return f32::NAN;
        }
        let m = exp(p * ln(abs(x)));
        if x.is_sign_negative() && is_odd_integer(p) {
            -m
        } else {
            m
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn special_values() {
            assert!(exp(f32::NAN).is_nan());
            assert_eq!(exp(f32::INFINITY), f32::INFINITY);
            assert_eq!(exp(f32::NEG_INFINITY), 0.0);
            assert_eq!(exp(89.0), f32::INFINITY);
            assert_eq!(exp(88.75), f32::INFINITY);
            assert!(exp(88.7).is_finite());
            assert_eq!(exp(-87.0), 0.0);
            assert_eq!(exp(0.0), 1.0);
            assert_eq!(exp(-0.0), 1.0);
            assert!(ln(-1.0).is_nan());
            assert!(ln(-0.0) == f32::NEG_INFINITY && ln(0.0) == f32::NEG_INFINITY);
            assert_eq!(ln(f32::INFINITY), f32::INFINITY);
            assert_eq!(ln(1.0), 0.0);
            assert!((ln(1e-40) - libm::logf(1e-40)).abs() < 1e-3);
            assert!((ln(0.75) - libm::logf(0.75)).abs() < 1e-4);
            assert_eq!(tanh(-0.0).to_bits(), 0x8000_0000);
            assert_eq!(tanh(f32::INFINITY), 1.0);
            assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
            assert_eq!(tanh(100.0), 1.0);
            assert_eq!(tanh(1e-5), 1e-5);
            assert_eq!(powf(f32::NAN, 0.0), 1.0);
            assert!(powf(-8.0, 1.0 / 3.0).is_nan());
            assert!(powf(-2.0, 3.0) < 0.0 && powf(-2.0, 2.0) > 0.0);
            assert_eq!(powf(0.0, 2.0), 0.0);
            assert_eq!(powf(0.0, -1.0), f32::INFINITY);
            assert_eq!(powf(-0.0, 3.0).to_bits(), 0x8000_0000);
        }

        #[test]
        fn close_to_libm() {
            let mut x = -20.0f32;
            while x < 20.0 {
                let (e, l) = (exp(x), libm::expf(x));
                assert!(((e - l) / l).abs() < 5e-3, "exp({x}): {e} vs {l}");
                let (t, lt) = (tanh(x), libm::tanhf(x));
                assert!((t - lt).abs() < 5e-3, "tanh({x}): {t} vs {lt}");
                let y = abs(x) * 0.1 + 1e-3;
                let (g, lg) = (ln(y), libm::logf(y));
                assert!((g - lg).abs() < 1e-4, "ln({y}): {g} vs {lg}");
                x += 0.37;
            }
        }
    }
}
