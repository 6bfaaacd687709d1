//! Forward mode as a payload: a dual number `(value, tangent)` replayed over the same spec.
//!
//! There is no second list of derivative rules. The reference kernels are generic over their
//! element (`tapeplan_core::Element`); give them pairs and ordinary arithmetic on pairs already
//! is the chain rule: `(a, a')·(b, b') = (ab, a'b + ab')`. The few transcendental functions a
//! number type must provide carry their derivative with them (that is what makes a number a dual
//! number), and nothing in the crate knows this type exists.
//!
//! The directional derivative `∇f · v` then falls out of one forward run, and is checked against
//! reverse mode (`Run::backward`, the oracle): for a scalar input the two reach the same bits;
//! for a vector input reverse mode forms `Σ gᵢ vᵢ` in a different order than the pairs
//! accumulate it, so they agree within a relative 1e-5 (stated and asserted below).
//!
//! Run with `cargo run -p tapeplan-core --example forward_mode`.

use core::cmp::Ordering;
use core::ops::{Add, Div, Mul, Neg, Sub};

use tapeplan_core::{Element, Recordable, Run, RunAs, Shape, Tape, TapeError, Tensor, TensorOf};

/// A dual number: a value and how it moves when the input moves along the seed direction.
#[derive(Clone, Copy, Debug)]
struct Dual {
    v: f32,
    t: f32,
}

impl Dual {
    fn new(v: f32, t: f32) -> Dual {
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
        let e = libm::expf(self.v);
        Dual::new(e, self.t * e)
    }
    fn ln(self) -> Dual {
        Dual::new(libm::logf(self.v), self.t / self.v)
    }
    fn ln_1p(self) -> Dual {
        Dual::new(libm::log1pf(self.v), self.t / (1.0 + self.v))
    }
    fn tanh(self) -> Dual {
        let y = libm::tanhf(self.v);
        Dual::new(y, self.t * (1.0 - y * y))
    }
    fn sqrt(self) -> Dual {
        let s = libm::sqrtf(self.v);
        Dual::new(s, self.t / (2.0 * s))
    }
    fn powf(self, p: Dual) -> Dual {
        // A constant exponent (the plan's `pow` has one).
        let y = libm::powf(self.v, p.v);
        Dual::new(y, self.t * p.v * libm::powf(self.v, p.v - 1.0))
    }
    fn abs(self) -> Dual {
        let s = if self.v > 0.0 {
            1.0
        } else if self.v < 0.0 {
            -1.0
        } else {
            0.0
        };
        Dual::new(self.v.abs(), self.t * s)
    }
}

fn directional(
    tape: &Tape,
    x: tapeplan_core::NodeId,
    f: tapeplan_core::NodeId,
    at: &[f32],
    v: &[f32],
) -> Result<(f32, f32), TapeError> {
    let shape = tape.shape(x)?;
    // Forward mode: one run over pairs (x, v).
    let mut run: RunAs<Dual> = RunAs::new(tape);
    let pairs = at.iter().zip(v).map(|(&a, &b)| Dual::new(a, b)).collect();
    run.set(x, TensorOf::new(shape, pairs)?)?;
    run.forward_until(f)?;
    let fwd = run.value(f).expect("computed").data[0];
    // Reverse mode: the oracle, then grad · v.
    let mut rev = Run::new(tape);
    rev.set(x, Tensor::new(shape, at.to_vec())?)?;
    let g = rev.backward(f, Tensor::scalar(1.0), &[x])?;
    let dot = g
        .get(x)
        .expect("reached")
        .data
        .iter()
        .zip(v)
        .map(|(a, b)| a * b)
        .fold(0.0, |s, p| s + p);
    // The value part is the f32 forward, bit for bit.
    rev.forward_until(f)?;
    assert_eq!(
        fwd.v.to_bits(),
        rev.value(f).expect("computed").data[0].to_bits()
    );
    Ok((fwd.t, dot))
}

fn main() -> Result<(), TapeError> {
    // 1. A scalar input: f = tanh(x)·x³ at x = 0.75, direction 1.
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::SCALAR);
    let f = {
        let mut t = tape.trace();
        let xx = t.mul(&x, &x)?;
        let xxx = t.mul(&xx, &x)?;
        let th = t.tanh(&x)?;
        t.mul(&th, &xxx)?
    };
    let (fwd, rev) = directional(&tape, x, f, &[0.75], &[1.0])?;
    println!("scalar  f = tanh(x)·x³ at 0.75: forward tangent {fwd:e}, reverse gradient {rev:e}");
    assert_eq!(fwd.to_bits(), rev.to_bits(), "scalar case: same bits");
    println!("        same bits");

    // 2. A small network: f = sum(softplus(W·x)) · mean-free, x a vector, direction v.
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::matrix(1, 4));
    let f = {
        let mut t = tape.trace();
        let w = t.fill(0.5, Shape::matrix(4, 3))?;
        let h = t.matmul(&x, &w)?;
        let a = t.tanh(&h)?;
        let s = t.softplus(&a)?;
        let e = t.exp(&s)?;
        let l = t.log(&e)?;
        let r = t.sqrt(&l)?;
        t.sum_all(&r)?
    };
    let at = [0.3, -0.7, 1.1, 0.2];
    let v = [1.0, 0.5, -0.25, 2.0];
    let (fwd, rev) = directional(&tape, x, f, &at, &v)?;
    let rel = ((fwd - rev) / rev).abs();
    println!("vector  ∇f·v: forward {fwd:e}, reverse {rev:e}, relative difference {rel:e}");
    assert!(rel <= 1e-5, "vector case: within 1e-5 relative");
    println!("        within the stated 1e-5 (reverse sums gᵢvᵢ in another order)");
    Ok(())
}
