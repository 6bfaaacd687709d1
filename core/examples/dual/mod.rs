//! Forward mode's two readings, outside the crate: computing the pairs and recording the pairs.
//!
//! Shared by `examples/forward_mode.rs` and `tests/tests/cross/forward_mode.rs` (which includes this
//! file by `#[path]`). Nothing here is a crate type: the crate only offers its two seams, the
//! element ([`tapeplan_core::Element`]) and the payload ([`Recordable`]).
//!
//! - [`Dual`] is a number: a value and a tangent. The reference kernels are generic over their
//!   element, so replaying a tape over `Dual` ([`tapeplan_core::RunAs`]) computes the pairs.
//! - [`Pairs`] is a payload over any payload `P`: its values are pairs of `P`'s values, and each
//!   instruction is the same pair arithmetic spoken through `P`'s operations. Over
//!   [`tapeplan_core::Compute`] it computes the pairs; over [`tapeplan_core::Trace`] it records
//!   the tangent computation as ordinary nodes ([`record_pairs`]), which the oracle runs and the
//!   planner plans like any other graph.
//!
//! There is no list of derivative rules for forward mode. The pair arithmetic is the body: what
//! [`Dual`]'s `+ - * /` and its handful of functions do to a tangent, replayed in the order the
//! reference kernel applies them to its element (so the two readings reach the same bits).
//! Every opcode of the table is covered; `input` and `parameter` are leaves and take their pairs
//! from the caller. The order is followed to the last detail where it matters for the bits:
//!
//! - `matmul`: the kernel accumulates each output's tangent as `Σₚ (a'ᵢₚ·bₚⱼ + aᵢₚ·b'ₚⱼ)` from
//!   `+0`, one product rule per step, so the pairs record exactly that: the terms as a
//!   `[m, k, n]` tensor, then `sum_to` over `k` (whose order is increasing `p`). The tempting
//!   `a'·b + a·b'` rounds differently; this costs an `[m, k, n]` temporary.
//! - `max_to`: the kernel keeps the first maximum (the first NaN if any; its starting
//!   `(-inf, 0)` when nothing beats `-inf`), so the pairs select that element's tangent through
//!   its position (an index tensor built by doubling with `concat`).
//! - `sigmoid`, `softplus`: the kernels' compositions over pairs (`1 / (1 + e^(-x))`, a
//!   threshold then `ln_1p(e^x)`), step by step, constants' zero tangents included.
//! - Masks and piecewise-constant ops (`equal`, `greater`, `greater_equal`, `heaviside`, `sign`,
//!   `one_hot`), constants and draws (`fill`, `uniform`) have a zero tangent, except that a NaN
//!   passed through by `heaviside` or `sign` keeps its tangent, as the element does; `sign`'s `-1`
//!   is `-(1, 0) = (-1, -0)`. `detach` has a zero tangent (through `Element::detach`), as its
//!   reverse rule contributes nothing. `pow` with exponent 0 has the tangent `t · 0`, the
//!   reverse rule's convention.

#![allow(dead_code)]

use core::cmp::Ordering;
use core::ops::{Add, Div, Mul, Neg, Sub};

use tapeplan_core::{
    Attr, Element, Node, NodeId, OpError, Opcode, Recordable, Shape, Tape, TapeError, MAX_ARITY,
};

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
// every pair is the `f32` result, bit for bit.
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
        Dual::new(s, self.t / (2.0 * s))
    }
    fn powf(self, p: Dual) -> Dual {
        // A constant exponent (the plan's `pow` has one). For `p = 0` the slope is 0, not
        // `0 · x^-1` (NaN at 0): the reverse rule's convention.
        let y = Element::powf(self.v, p.v);
        if p.v == 0.0 {
            return Dual::new(y, self.t * 0.0);
        }
        Dual::new(y, self.t * p.v * Element::powf(self.v, p.v - 1.0))
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
    fn detach(self) -> Dual {
        // A stop-gradient: the value without its tangent.
        Dual::new(self.v, 0.0)
    }
}

/// A value of the [`Pairs`] reading: a primal and its tangent, both values of the inner payload.
#[derive(Clone, Debug)]
pub struct Pair<V> {
    /// The primal.
    pub v: V,
    /// The tangent.
    pub t: V,
}

/// The pair payload over any payload `P`: every instruction computes its primal through `P`
/// (the instruction itself) and its tangent through `P`'s operations (the pair arithmetic).
pub struct Pairs<P> {
    /// The payload both halves are spoken through.
    pub inner: P,
}

impl<P: Recordable> Recordable for Pairs<P> {
    type Value = Pair<P::Value>;
    type Error = P::Error;

    fn shape_of(&self, x: &Pair<P::Value>) -> Shape {
        self.inner.shape_of(&x.v)
    }

    fn apply(
        &mut self,
        op: Opcode,
        attr: Attr,
        args: &[&Pair<P::Value>],
    ) -> Result<Pair<P::Value>, P::Error> {
        let primals: Vec<&P::Value> = args.iter().map(|a| &a.v).collect();
        let v = self.inner.apply(op, attr, &primals)?;
        let t = tangent(&mut self.inner, op, attr, args, &v)?;
        Ok(Pair { v, t })
    }
}

fn arity_error(op: Opcode, found: usize) -> OpError {
    OpError::Arity {
        op,
        expected: op.arity(),
        found,
    }
}

fn one<'a, V>(op: Opcode, args: &[&'a V]) -> Result<&'a V, OpError> {
    match args {
        [a] => Ok(a),
        _ => Err(arity_error(op, args.len())),
    }
}

fn two<'a, V>(op: Opcode, args: &[&'a V]) -> Result<(&'a V, &'a V), OpError> {
    match args {
        [a, b] => Ok((a, b)),
        _ => Err(arity_error(op, args.len())),
    }
}

/// The tangent of `op` over the pairs `args`, whose primal result is `y`: the pair arithmetic,
/// in the order the reference kernel applies it to [`Dual`].
fn tangent<P: Recordable>(
    r: &mut P,
    op: Opcode,
    attr: Attr,
    args: &[&Pair<P::Value>],
    y: &P::Value,
) -> Result<P::Value, P::Error> {
    let s = r.shape_of(y);
    match op {
        Opcode::Input | Opcode::Parameter => Err(OpError::Leaf { op }.into()),
        // Constants, draws and masks: the element makes them with `from_f32`, `ONE`, `ZERO`,
        // whose tangent is +0; the stop-gradient drops its tangent.
        Opcode::Fill
        | Opcode::Uniform
        | Opcode::OneHot
        | Opcode::Equal
        | Opcode::Greater
        | Opcode::GreaterEqual
        | Opcode::Detach => r.fill(0.0, s),
        Opcode::Add => {
            let (a, b) = two(op, args)?;
            r.add(&a.t, &b.t)
        }
        Opcode::Sub => {
            let (a, b) = two(op, args)?;
            r.sub(&a.t, &b.t)
        }
        Opcode::Mul => {
            // a'·b + a·b'
            let (a, b) = two(op, args)?;
            let l = r.mul(&a.t, &b.v)?;
            let rt = r.mul(&a.v, &b.t)?;
            r.add(&l, &rt)
        }
        Opcode::Div => {
            // (a' - q·b') / b with q = a / b, the primal.
            let (a, b) = two(op, args)?;
            let qb = r.mul(y, &b.t)?;
            let d = r.sub(&a.t, &qb)?;
            r.div(&d, &b.v)
        }
        Opcode::Neg => r.neg(&one(op, args)?.t),
        Opcode::Tanh => {
            // t·(1 - y·y)
            let a = one(op, args)?;
            let yy = r.mul(y, y)?;
            let one = r.fill(1.0, s)?;
            let slope = r.sub(&one, &yy)?;
            r.mul(&a.t, &slope)
        }
        Opcode::Relu => {
            // The whole pair where x > 0 or x is NaN (heaviside is 1 or NaN there), else ZERO.
            let a = one(op, args)?;
            let h = r.heaviside(&a.v)?;
            let zero = r.fill(0.0, s)?;
            r.select(&h, &a.t, &zero)
        }
        Opcode::Heaviside => {
            // ONE or ZERO (tangent +0), but a NaN is passed through whole.
            let a = one(op, args)?;
            let zero = r.fill(0.0, s)?;
            let number = r.equal(&a.v, &a.v)?;
            r.select(&number, &zero, &a.t)
        }
        Opcode::Sign => {
            // ONE (+0), -ONE = (-1, -0), ZERO (+0), a NaN passed through whole.
            let a = one(op, args)?;
            let zero = r.fill(0.0, s)?;
            let minus_zero = r.fill(-0.0, s)?;
            let number = r.equal(&a.v, &a.v)?;
            let rest = r.select(&number, &zero, &a.t)?;
            let negative = r.greater(&zero, &a.v)?;
            r.select(&negative, &minus_zero, &rest)
        }
        Opcode::Exp => r.mul(&one(op, args)?.t, y),
        Opcode::Log => {
            let a = one(op, args)?;
            r.div(&a.t, &a.v)
        }
        Opcode::Sqrt => {
            // t / (2·y)
            let a = one(op, args)?;
            let two = r.fill(2.0, s)?;
            let twice = r.mul(&two, y)?;
            r.div(&a.t, &twice)
        }
        Opcode::Sigmoid => {
            // ONE / (ONE + (-x).exp()) over pairs, ONE's tangent 0 included:
            // n = (-v, -t); e = (E, -t·E); d = (1 + E, 0 + -t·E); (0 - y·d') / d.
            let a = one(op, args)?;
            let nv = r.neg(&a.v)?;
            let e = r.exp(&nv)?;
            let nt = r.neg(&a.t)?;
            let et = r.mul(&nt, &e)?;
            let zero = r.fill(0.0, s)?;
            let dt = r.add(&zero, &et)?;
            let one = r.fill(1.0, s)?;
            let dv = r.add(&one, &e)?;
            let ydt = r.mul(y, &dt)?;
            let num = r.sub(&zero, &ydt)?;
            r.div(&num, &dv)
        }
        Opcode::Softplus => {
            // x itself above the threshold, else ln_1p(e^x): (E, t·E) then t·E / (1 + E).
            let a = one(op, args)?;
            let e = r.exp(&a.v)?;
            let et = r.mul(&a.t, &e)?;
            let one = r.fill(1.0, s)?;
            let d = r.add(&one, &e)?;
            let lt = r.div(&et, &d)?;
            let th = r.fill(tapeplan_core::ops::softplus::THRESHOLD, s)?;
            let above = r.greater(&a.v, &th)?;
            r.select(&above, &a.t, &lt)
        }
        Opcode::Abs => {
            // t·s with s = 1, -1 or 0 by the value (0 for NaN).
            let a = one(op, args)?;
            let zero = r.fill(0.0, s)?;
            let pos = r.greater(&a.v, &zero)?;
            let neg = r.greater(&zero, &a.v)?;
            let sg = r.sub(&pos, &neg)?;
            r.mul(&a.t, &sg)
        }
        Opcode::Pow => {
            // (t·p)·x^(p-1); t·0 for p = 0.
            let a = one(op, args)?;
            let p = f32::from_bits(attr.bits);
            if p == 0.0 {
                let zero = r.fill(0.0, s)?;
                return r.mul(&a.t, &zero);
            }
            let k = r.fill(p, s)?;
            let tp = r.mul(&a.t, &k)?;
            let lower = r.pow_const(&a.v, p - 1.0)?;
            r.mul(&tp, &lower)
        }
        Opcode::Maximum | Opcode::Minimum => {
            // The whole pair the scalar picks: a if a is NaN, b if b is NaN, a on `a >= b`
            // (maximum) or `a <= b` (minimum), else b.
            let (a, b) = two(op, args)?;
            let pick_a = if op == Opcode::Maximum {
                r.greater_equal(&a.v, &b.v)?
            } else {
                r.greater_equal(&b.v, &a.v)?
            };
            let a_number = r.equal(&a.v, &a.v)?;
            let otherwise = r.select(&a_number, &b.t, &a.t)?;
            r.select(&pick_a, &a.t, &otherwise)
        }
        Opcode::Select => match args {
            [c, a, b] => r.select(&c.v, &a.t, &b.t),
            _ => Err(arity_error(op, args.len()).into()),
        },
        // Linear in their arguments: the instruction itself, applied to the tangents.
        Opcode::Transpose
        | Opcode::Reshape
        | Opcode::Broadcast
        | Opcode::SumTo
        | Opcode::Slice
        | Opcode::Pad => {
            let a = one(op, args)?;
            r.apply(op, attr, &[&a.t])
        }
        Opcode::Concat => {
            let (a, b) = two(op, args)?;
            r.apply(op, attr, &[&a.t, &b.t])
        }
        Opcode::MatMul => {
            let (a, b) = two(op, args)?;
            matmul_tangent(r, a, b)
        }
        Opcode::MaxTo => max_to_tangent(r, one(op, args)?, y),
    }
}

/// `matmul`'s tangent in the kernel's order: each output accumulates, from `+0` and over
/// increasing `p`, the product rule `a'ᵢₚ·bₚⱼ + aᵢₚ·b'ₚⱼ` of one step. The terms form an
/// `[m, k, n]` tensor; `sum_to` down to `[m, 1, n]` adds them in increasing `p`.
fn matmul_tangent<P: Recordable>(
    r: &mut P,
    a: &Pair<P::Value>,
    b: &Pair<P::Value>,
) -> Result<P::Value, P::Error> {
    let [m, k, _, _] = r.shape_of(&a.v).dims();
    let n = r.shape_of(&b.v).dim(1).unwrap_or(0);
    let cube = Shape::new(&[m, k, n]).map_err(OpError::Shape)?;
    let rows = Shape::new(&[m, k, 1]).map_err(OpError::Shape)?;
    let cols = Shape::new(&[1, k, n]).map_err(OpError::Shape)?;
    let sums = Shape::new(&[m, 1, n]).map_err(OpError::Shape)?;
    let mut spread = |x: &P::Value, via: Shape| -> Result<P::Value, P::Error> {
        let x3 = r.reshape(x, via)?;
        r.broadcast(&x3, cube)
    };
    let (av, at) = (spread(&a.v, rows)?, spread(&a.t, rows)?);
    let (bv, bt) = (spread(&b.v, cols)?, spread(&b.t, cols)?);
    let l = r.mul(&at, &bv)?;
    let rt = r.mul(&av, &bt)?;
    let terms = r.add(&l, &rt)?;
    let summed = r.sum_to(&terms, sums)?;
    r.reshape(&summed, Shape::matrix(m, n))
}

/// `max_to`'s tangent: the tangent of the element the kernel keeps, which is the first NaN of
/// its group if there is one, else the first element equal to the maximum, and the kernel's
/// starting pair `(-inf, 0)` when nothing beats `-inf`. "First" is found through positions.
fn max_to_tangent<P: Recordable>(
    r: &mut P,
    x: &Pair<P::Value>,
    y: &P::Value,
) -> Result<P::Value, P::Error> {
    let xs = r.shape_of(&x.v);
    let out = r.shape_of(y);
    let n = xs.elems();
    // The row-major position of every element: [0], then [0, 1], [0, 1, 2, 3], ... (exact in
    // f32 below 2^24), cut to n.
    let mut idx = r.fill(0.0, Shape::vector(1))?;
    let mut len = 1usize;
    while len < n {
        let offset = r.fill(len as f32, Shape::vector(len))?;
        let upper = r.add(&idx, &offset)?;
        idx = r.concat(&idx, &upper, 0)?;
        len *= 2;
    }
    if len != n {
        idx = r.slice(&idx, 0, 0, n)?;
    }
    let idx = r.reshape(&idx, xs)?;
    // Candidates: where the group's maximum is a number, the elements equal to it; where it is
    // NaN, the NaNs.
    let by = r.broadcast(y, xs)?;
    let hit = r.equal(&x.v, &by)?;
    let x_number = r.equal(&x.v, &x.v)?;
    let ones = r.fill(1.0, xs)?;
    let x_nan = r.sub(&ones, &x_number)?;
    let y_number = r.equal(&by, &by)?;
    let candidate = r.select(&y_number, &hit, &x_nan)?;
    // The first candidate: the largest of minus the positions.
    let neg_inf = r.fill(f32::NEG_INFINITY, xs)?;
    let minus_idx = r.neg(&idx)?;
    let key = r.select(&candidate, &minus_idx, &neg_inf)?;
    let first = r.max_to(&key, out)?;
    let first_b = r.broadcast(&first, xs)?;
    let chosen = r.equal(&key, &first_b)?;
    // Its tangent, alone among -infs, is what a max over the group keeps (NaN and -inf too).
    let only = r.select(&chosen, &x.t, &neg_inf)?;
    let picked = r.max_to(&only, out)?;
    // Nothing beat -inf: the kernel kept its starting pair.
    let out_neg_inf = r.fill(f32::NEG_INFINITY, out)?;
    let stuck = r.equal(y, &out_neg_inf)?;
    let zero = r.fill(0.0, out)?;
    r.select(&stuck, &zero, &picked)
}

/// Replays `tape`'s nodes `0..=last` over the payload `r`, in tape order: each leaf's value
/// comes from `leaf(r, index, node)`, every other node is `node.op.express(r, attr, args)`.
/// Answers every node's value, indexed like the tape.
///
/// # Errors
/// A bad `last`, and whatever the payload or `leaf` answers.
pub fn replay<R>(
    tape: &Tape,
    last: NodeId,
    r: &mut R,
    mut leaf: impl FnMut(&mut R, usize, &Node) -> Result<R::Value, R::Error>,
) -> Result<Vec<R::Value>, R::Error>
where
    R: Recordable,
    R::Error: From<TapeError>,
{
    let last = tape.check(last)?;
    let mut values: Vec<R::Value> = Vec::with_capacity(last + 1);
    for (i, node) in tape.nodes().iter().enumerate().take(last + 1) {
        let v = if matches!(node.op, Opcode::Input | Opcode::Parameter) {
            leaf(r, i, node)?
        } else {
            let mut args: Vec<&R::Value> = Vec::with_capacity(MAX_ARITY);
            for &a in node.arg_indices() {
                let a = a as usize;
                args.push(values.get(a).ok_or(TapeError::UnknownNode { index: a })?);
            }
            node.op.express(r, node.attr, &args)?
        };
        values.push(v);
    }
    Ok(values)
}

/// Recorded forward mode: a tape replayed over [`Pairs`] of [`tapeplan_core::Trace`].
pub struct RecordedPairs {
    /// The new tape: the leaves, then the primal and tangent computation as ordinary nodes.
    pub tape: Tape,
    /// The pair of every replayed node of the source tape, indexed like it.
    pub pairs: Vec<Pair<NodeId>>,
    /// The index in the new tape where the leaves end and the replay begins.
    pub replay_start: usize,
}

impl RecordedPairs {
    /// The pair of a node of the source tape.
    pub fn pair(&self, source: NodeId) -> Option<&Pair<NodeId>> {
        self.pairs.get(source.index())
    }
}

/// Records forward mode onto a new tape: every leaf of `source` up to `last` becomes a leaf of
/// the same kind, name and shape; a leaf for which `seeded(node)` holds gets a tangent input
/// named `d{name}` (the direction), the others a zero tangent (a `fill`); then every node is
/// replayed over pairs.
///
/// # Errors
/// A bad `last`, or a shape error while recording.
pub fn record_pairs(
    source: &Tape,
    last: NodeId,
    seeded: impl Fn(&Node) -> bool,
) -> Result<RecordedPairs, TapeError> {
    let last_i = source.check(last)?;
    let mut tape = Tape::new();
    let mut leaves: Vec<Option<(NodeId, Option<NodeId>)>> = vec![None; last_i + 1];
    for (slot, node) in leaves.iter_mut().zip(source.nodes()) {
        let name = node.name.as_deref().unwrap_or("");
        let v = match node.op {
            Opcode::Input => tape.input(name, node.shape),
            Opcode::Parameter => tape.parameter(name, node.shape),
            _ => continue,
        };
        let t = seeded(node).then(|| tape.input(&format!("d{name}"), node.shape));
        *slot = Some((v, t));
    }
    let replay_start = tape.len();
    let pairs = {
        let mut payload = Pairs {
            inner: tape.trace(),
        };
        replay(source, last, &mut payload, |p, i, node| {
            let (v, t) = leaves
                .get(i)
                .copied()
                .flatten()
                .ok_or(TapeError::MissingValue { index: i })?;
            let t = match t {
                Some(t) => t,
                None => p.inner.fill(0.0, node.shape)?,
            };
            Ok(Pair { v, t })
        })?
    };
    Ok(RecordedPairs {
        tape,
        pairs,
        replay_start,
    })
}
