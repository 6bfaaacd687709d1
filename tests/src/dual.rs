//! The dual number: forward mode's computing reading, through the element seam.
//!
//! [`Dual`] is a number: a value and a tangent. The reference kernels are generic over their
//! element ([`tapeplan_core::Element`]), so running a tape over `Dual`
//! ([`tapeplan_core::RunAs`]) computes every node's value and its tangent along the direction
//! the leaves carry. There is no list of derivative rules here: `+ - * /` on pairs already are
//! the sum, product and quotient rules, and the handful of element functions (`exp`, `ln`,
//! `ln_1p`, `tanh`, `sqrt`, `powf`, `abs`) carry their slope. Composite kernels (`sigmoid`,
//! `softplus`, `matmul`'s accumulation, the masks) get their tangent from that arithmetic alone.
//!
//! It is not a crate type (seed 001: the opening is the seam, not a new type in the crate); it
//! lives here, beside the tests and the example that compare it with the recorded reading,
//! [`tapeplan_core::Tape::jvp`] (forward mode derived from the reverse rules).

use core::cmp::Ordering;
use core::ops::{Add, Div, Mul, Neg, Sub};

use tapeplan_core::Element;

/// A dual number: a value and how it moves when the inputs move along the seed direction.
#[derive(Clone, Copy, Debug)]
pub struct Dual {
    /// The value.
    pub v: f32,
    /// The tangent.
    pub t: f32,
}

impl Dual {
    /// A pair.
    pub fn new(v: f32, t: f32) -> Dual {
        Dual { v, t }
    }
}

// Comparisons look at the value only: a mask or a max chooses by value, as in `f32`.
impl PartialEq for Dual {
    fn eq(&self, o: &Dual) -> bool {
        self.v == o.v
    }
}
impl PartialOrd for Dual {
    fn partial_cmp(&self, o: &Dual) -> Option<Ordering> {
        self.v.partial_cmp(&o.v)
    }
}
impl Add for Dual {
    type Output = Dual;
    fn add(self, o: Dual) -> Dual {
        Dual::new(self.v + o.v, self.t + o.t)
    }
}
impl Sub for Dual {
    type Output = Dual;
    fn sub(self, o: Dual) -> Dual {
        Dual::new(self.v - o.v, self.t - o.t)
    }
}
impl Mul for Dual {
    type Output = Dual;
    // The product rule is just how pairs multiply.
    fn mul(self, o: Dual) -> Dual {
        Dual::new(self.v * o.v, self.t * o.v + self.v * o.t)
    }
}
impl Div for Dual {
    type Output = Dual;
    fn div(self, o: Dual) -> Dual {
        let q = self.v / o.v;
        Dual::new(q, (self.t - q * o.t) / o.v)
    }
}
impl Neg for Dual {
    type Output = Dual;
    fn neg(self) -> Dual {
        Dual::new(-self.v, -self.t)
    }
}

// The primal functions are `f32`'s own (`libm` through the element seam), so the value half of
// every pair is the `f32` result, bit for bit. Each tangent is `t · slope`, the slope formed as
// the reverse rule forms it (so the two readings round alike where the kernel is one function).
impl Element for Dual {
    const ZERO: Dual = Dual { v: 0.0, t: 0.0 };
    const ONE: Dual = Dual { v: 1.0, t: 0.0 };
    const NEG_INFINITY: Dual = Dual {
        v: f32::NEG_INFINITY,
        t: 0.0,
    };
    fn from_f32(v: f32) -> Dual {
        Dual::new(v, 0.0)
    }
    fn to_f32(self) -> f32 {
        self.v
    }
    fn to_f64(self) -> f64 {
        f64::from(self.v)
    }
    fn is_nan(self) -> bool {
        self.v.is_nan()
    }
    fn exp(self) -> Dual {
        let e = Element::exp(self.v);
        Dual::new(e, self.t * e)
    }
    fn ln(self) -> Dual {
        Dual::new(Element::ln(self.v), self.t / self.v)
    }
    fn ln_1p(self) -> Dual {
        Dual::new(Element::ln_1p(self.v), self.t / (1.0 + self.v))
    }
    fn tanh(self) -> Dual {
        let y = Element::tanh(self.v);
        Dual::new(y, self.t * (1.0 - y * y))
    }
    fn sqrt(self) -> Dual {
        let s = Element::sqrt(self.v);
        // The slope as `sqrt`'s rule forms it: `0.5 / y`.
        Dual::new(s, self.t * (0.5 / s))
    }
    fn erf(self) -> Dual {
        // The slope as `erf`'s rule forms it: `(2/√π) · e^(−x²)`.
        let gauss = Element::exp(-(self.v * self.v));
        Dual::new(
            Element::erf(self.v),
            self.t * (tapeplan_core::ops::erf::TWO_OVER_SQRT_PI * gauss),
        )
    }
    fn powf(self, p: Dual) -> Dual {
        // A constant exponent (the plan's `pow` has one). For `p = 0` the slope is 0, not
        // `0 · x^-1` (NaN at 0): the reverse rule's convention.
        let y = Element::powf(self.v, p.v);
        if p.v == 0.0 {
            return Dual::new(y, self.t * 0.0);
        }
        Dual::new(y, self.t * (p.v * Element::powf(self.v, p.v - 1.0)))
    }
    fn fused_mul_add(self, b: Dual, c: Dual) -> Dual {
        // The value rounded once (`fmaf`); the tangent is the product rule plus `c`'s.
        Dual::new(
            Element::fused_mul_add(self.v, b.v, c.v),
            self.t * b.v + self.v * b.t + c.t,
        )
    }
    fn abs(self) -> Dual {
        // The slope is `sign(x)`: 1, -1, 0 at ±0, NaN at NaN.
        let s = if self.v > 0.0 {
            1.0
        } else if self.v < 0.0 {
            -1.0
        } else if self.v.is_nan() {
            self.v
        } else {
            0.0
        };
        Dual::new(self.v.abs(), self.t * s)
    }
    fn detach(self) -> Dual {
        // A stop-gradient: the value without its tangent.
        Dual::new(self.v, 0.0)
    }
}

/// Pairs of `values` and `tangents`, element by element.
pub fn pairs(values: &[f32], tangents: &[f32]) -> Vec<Dual> {
    values
        .iter()
        .zip(tangents)
        .map(|(&v, &t)| Dual::new(v, t))
        .collect()
}

/// The tangent half of some pairs.
pub fn tangents(pairs: &[Dual]) -> Vec<f32> {
    pairs.iter().map(|d| d.t).collect()
}
