//! The element seam: reference kernels are generic over the number they compute with.
//!
//! `f32` is the element of plans and runtimes (its kernels are the definition of the bits);
//! `f64` interprets an `f32` tape in double precision to measure the rounding error of the
//! `f32` results; a dual number (value, tangent) — see `tests/src/dual.rs` — turns the
//! same kernels into forward-mode differentiation, because ordinary arithmetic on pairs already
//! is the chain rule. A new number, not a new walk.
//!
//! Transcendentals come from `libm` for both floats (pure software, identical on every target).
//! The `*_fast` methods are the `fast` math profile's ([`crate::MathProfile`]): for `f32`,
//! [`crate::math::fast`] (micromath's approximations); every other element has no fast
//! profile of its own and computes them precisely (`f64` is the error-analysis reference, a
//! dual number's tangent needs the exact derivative), which the provided methods do.

use core::fmt::Debug;
use core::ops::{Add, Div, Mul, Neg, Sub};

/// A number the reference kernels can compute with.
pub trait Element:
    Copy
    + PartialEq
    + PartialOrd
    + Debug
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
{
    /// `+0`.
    const ZERO: Self;
    /// `1`.
    const ONE: Self;
    /// `-inf`.
    const NEG_INFINITY: Self;
    /// The element nearest an `f32` (exact for `f32` and `f64`).
    fn from_f32(v: f32) -> Self;
    /// The value as an `f32` (rounded; the primal part of a dual number).
    fn to_f32(self) -> f32;
    /// The value as an `f64` (exact for `f32` and `f64`).
    fn to_f64(self) -> f64;
    /// True for NaN.
    fn is_nan(self) -> bool;
    /// `e^x`.
    fn exp(self) -> Self;
    /// `ln x`.
    fn ln(self) -> Self;
    /// `ln(1 + x)`.
    fn ln_1p(self) -> Self;
    /// `tanh x`.
    fn tanh(self) -> Self;
    /// `√x`, correctly rounded.
    fn sqrt(self) -> Self;
    /// `erf x`, the error function.
    fn erf(self) -> Self;
    /// `x^p`.
    fn powf(self, p: Self) -> Self;
    /// `|x|` (clears the sign, NaN included).
    fn abs(self) -> Self;
    /// `self · b + c` rounded once: IEEE-754's `fusedMultiplyAdd` (`libm`'s `fmaf`/`fma` for
    /// the floats, exact in software on every target). The `fma` arithmetic profile's step
    /// ([`crate::ArithProfile`]).
    fn fused_mul_add(self, b: Self, c: Self) -> Self;
    /// The value with its derivative cut (`detach`'s forward): the identity for a plain number;
    /// a number that carries a derivative (a dual number) drops it, so forward mode through a
    /// stop-gradient agrees with its reverse rule, which contributes nothing.
    fn detach(self) -> Self {
        self
    }
    /// `e^x` under the `fast` profile (by default the precise [`Element::exp`]).
    fn exp_fast(self) -> Self {
        self.exp()
    }
    /// `ln x` under the `fast` profile (by default the precise [`Element::ln`]).
    fn ln_fast(self) -> Self {
        self.ln()
    }
    /// `tanh x` under the `fast` profile (by default the precise [`Element::tanh`]).
    fn tanh_fast(self) -> Self {
        self.tanh()
    }
    /// `x^p` under the `fast` profile (by default the precise [`Element::powf`]).
    fn powf_fast(self, p: Self) -> Self {
        self.powf(p)
    }
}

impl Element for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    const NEG_INFINITY: f32 = f32::NEG_INFINITY;
    fn from_f32(v: f32) -> f32 {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    fn exp(self) -> f32 {
        libm::expf(self)
    }
    fn ln(self) -> f32 {
        libm::logf(self)
    }
    fn ln_1p(self) -> f32 {
        libm::log1pf(self)
    }
    fn tanh(self) -> f32 {
        libm::tanhf(self)
    }
    fn sqrt(self) -> f32 {
        libm::sqrtf(self)
    }
    fn erf(self) -> f32 {
        libm::erff(self)
    }
    fn powf(self, p: f32) -> f32 {
        libm::powf(self, p)
    }
    fn abs(self) -> f32 {
        f32::from_bits(self.to_bits() & 0x7fff_ffff)
    }
    fn fused_mul_add(self, b: f32, c: f32) -> f32 {
        libm::fmaf(self, b, c)
    }
    #[cfg(feature = "math-fast")]
    fn exp_fast(self) -> f32 {
        crate::math::fast::exp(self)
    }
    #[cfg(feature = "math-fast")]
    fn ln_fast(self) -> f32 {
        crate::math::fast::ln(self)
    }
    #[cfg(feature = "math-fast")]
    fn tanh_fast(self) -> f32 {
        crate::math::fast::tanh(self)
    }
    #[cfg(feature = "math-fast")]
    fn powf_fast(self, p: f32) -> f32 {
        crate::math::fast::powf(self, p)
    }
}

impl Element for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    const NEG_INFINITY: f64 = f64::NEG_INFINITY;
    fn from_f32(v: f32) -> f64 {
        f64::from(v)
    }
    fn to_f32(self) -> f32 {
        self as f32
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    fn exp(self) -> f64 {
        libm::exp(self)
    }
    fn ln(self) -> f64 {
        libm::log(self)
    }
    fn ln_1p(self) -> f64 {
        libm::log1p(self)
    }
    fn tanh(self) -> f64 {
        libm::tanh(self)
    }
    fn sqrt(self) -> f64 {
        libm::sqrt(self)
    }
    fn erf(self) -> f64 {
        libm::erf(self)
    }
    fn powf(self, p: f64) -> f64 {
        libm::pow(self, p)
    }
    fn abs(self) -> f64 {
        f64::from_bits(self.to_bits() & 0x7fff_ffff_ffff_ffff)
    }
    fn fused_mul_add(self, b: f64, c: f64) -> f64 {
        libm::fma(self, b, c)
    }
}
