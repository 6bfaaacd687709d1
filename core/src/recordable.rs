//! `Recordable`: the vocabulary a rule body speaks, with one payload per reading.
//!
//! The forward meaning of an instruction ([`crate::Opcode::express`]) and its reverse rule
//! ([`crate::Opcode::vjp`]) are written once, against this trait, never against numbers. Two
//! payloads implement it in this crate (with `alloc`): the compute payload (`Run`'s tensors,
//! whose reverse walk is the oracle) and the record payload ([`crate::Trace`], whose values are
//! handles and whose every operation appends a node to a tape).

use crate::ops::OpError;
use crate::Attr;
use crate::{Opcode, Shape};

/// A payload the vocabulary can be spoken over.
pub trait Recordable {
    /// A value of this reading: a tensor when computing, a node handle when recording.
    type Value: Clone;
    /// What can go wrong; every shape error of an operation converts into it.
    type Error: From<OpError>;

    /// The shape of a value.
    fn shape_of(&self, value: &Self::Value) -> Shape;

    /// Applies one instruction to `args`. This is the only primitive; every method below
    /// is a spelling of it.
    ///
    /// # Errors
    /// Shape errors of the instruction (see [`crate::ops::infer`]) and the payload's own.
    fn apply(
        &mut self,
        op: Opcode,
        attr: Attr,
        args: &[&Self::Value],
    ) -> Result<Self::Value, Self::Error>;

    /// A tensor of `shape` with every element equal to `value`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn fill(&mut self, value: f32, shape: Shape) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Fill, Attr::fill(value, shape), &[])
    }
    /// `a + b` (same shapes).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn add(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Add, Attr::NONE, &[a, b])
    }
    /// `a - b` (same shapes).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn sub(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Sub, Attr::NONE, &[a, b])
    }
    /// `a * b` (same shapes).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn mul(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Mul, Attr::NONE, &[a, b])
    }
    /// `a / b` (same shapes).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn div(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Div, Attr::NONE, &[a, b])
    }
    /// `-x`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn neg(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Neg, Attr::NONE, &[x])
    }
    /// `tanh(x)`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn tanh(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Tanh, Attr::NONE, &[x])
    }
    /// `relu(x)`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn relu(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Relu, Attr::NONE, &[x])
    }
    /// `heaviside(x)`: 1 where `x > 0`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn heaviside(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Heaviside, Attr::NONE, &[x])
    }
    /// `exp(x)`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn exp(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Exp, Attr::NONE, &[x])
    }
    /// `ln(x)`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn log(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Log, Attr::NONE, &[x])
    }
    /// `x` with no reverse contribution.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn detach(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Detach, Attr::NONE, &[x])
    }
    /// The mask `a == b`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn equal(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Equal, Attr::NONE, &[a, b])
    }
    /// `a · b` for `a: [m, k]`, `b: [k, n]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn matmul(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::MatMul, Attr::NONE, &[a, b])
    }
    /// `xᵀ` for `x: [m, n]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn transpose(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Transpose, Attr::NONE, &[x])
    }
    /// `x` viewed as `shape` (same element count).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn reshape(&mut self, x: &Self::Value, shape: Shape) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Reshape, Attr::target(shape), &[x])
    }
    /// `x` broadcast to `shape`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn broadcast(&mut self, x: &Self::Value, shape: Shape) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Broadcast, Attr::target(shape), &[x])
    }
    /// `x` summed down to `shape`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn sum_to(&mut self, x: &Self::Value, shape: Shape) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::SumTo, Attr::target(shape), &[x])
    }
    /// The maximum of `x` down to `shape`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn max_to(&mut self, x: &Self::Value, shape: Shape) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::MaxTo, Attr::target(shape), &[x])
    }
    /// Labels `[batch]` to one-hot rows `[batch, classes]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn one_hot(
        &mut self,
        labels: &Self::Value,
        classes: usize,
    ) -> Result<Self::Value, Self::Error> {
        let batch = self.shape_of(labels).dim(0).unwrap_or(0);
        let shape = Shape::new(&[batch, classes]).map_err(OpError::Shape)?;
        self.apply(Opcode::OneHot, Attr::target(shape), &[labels])
    }
    /// `√x`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn sqrt(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Sqrt, Attr::NONE, &[x])
    }
    /// The error function `erf(x)` (see [`crate::ops::erf`]).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn erf(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Erf, Attr::NONE, &[x])
    }
    /// The logistic sigmoid.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn sigmoid(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Sigmoid, Attr::NONE, &[x])
    }
    /// `log(1 + e^x)`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn softplus(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Softplus, Attr::NONE, &[x])
    }
    /// `|x|`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn abs(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Abs, Attr::NONE, &[x])
    }
    /// The sign of `x`: 1, -1 or 0.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn sign(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Sign, Attr::NONE, &[x])
    }
    /// `x^p` for a constant `p`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn pow_const(&mut self, x: &Self::Value, p: f32) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Pow, Attr::Pow(p), &[x])
    }
    /// The elementwise maximum (ties: `a`).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn maximum(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Maximum, Attr::NONE, &[a, b])
    }
    /// The elementwise minimum (ties: `a`).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn minimum(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Minimum, Attr::NONE, &[a, b])
    }
    /// The mask `a > b`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn greater(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Greater, Attr::NONE, &[a, b])
    }
    /// The mask `a >= b`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn greater_equal(
        &mut self,
        a: &Self::Value,
        b: &Self::Value,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::GreaterEqual, Attr::NONE, &[a, b])
    }
    /// The mask `a < b`, spoken as `greater(b, a)`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn less(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.greater(b, a)
    }
    /// The mask `a <= b`, spoken as `greater_equal(b, a)`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn less_equal(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.greater_equal(b, a)
    }
    /// `where(cond, a, b)`: `a` where `cond != 0`, else `b`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn select(
        &mut self,
        cond: &Self::Value,
        a: &Self::Value,
        b: &Self::Value,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Select, Attr::NONE, &[cond, a, b])
    }
    /// The window `[start, start + len)` of `x` along `axis`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn slice(
        &mut self,
        x: &Self::Value,
        axis: usize,
        start: usize,
        len: usize,
    ) -> Result<Self::Value, Self::Error> {
        let attr = Attr::Window { axis, start, len };
        self.apply(Opcode::Slice, attr, &[x])
    }
    /// `x` placed at `start` along `axis` in zeros of shape `target`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn pad(
        &mut self,
        x: &Self::Value,
        axis: usize,
        start: usize,
        target: Shape,
    ) -> Result<Self::Value, Self::Error> {
        let len = target.dim(axis).unwrap_or(0);
        let y = self.apply(Opcode::Pad, Attr::Window { axis, start, len }, &[x])?;
        let found = self.shape_of(&y);
        if found != target {
            return Err(OpError::BadTarget {
                op: Opcode::Pad,
                from: found,
                to: target,
            }
            .into());
        }
        Ok(y)
    }
    /// `a` then `b` along `axis`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn concat(
        &mut self,
        a: &Self::Value,
        b: &Self::Value,
        axis: usize,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Concat, Attr::Axis(axis), &[a, b])
    }
    /// The mean of `x` down to `shape` (a composition: `sum_to`, then a division by the number of
    /// elements summed into each output, as PyTorch's `mean` divides).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn mean_to(&mut self, x: &Self::Value, shape: Shape) -> Result<Self::Value, Self::Error> {
        let n = self.shape_of(x).elems() / shape.elems().max(1);
        let s = self.sum_to(x, shape)?;
        let k = self.fill(n as f32, shape)?;
        self.div(&s, &k)
    }
    /// Uniform `[0, 1)` draws of `shape` from the stream `(key, counter)` (two scalars).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn uniform(
        &mut self,
        key: &Self::Value,
        counter: &Self::Value,
        shape: Shape,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Uniform, Attr::target(shape), &[key, counter])
    }
    /// Inverted dropout (Srivastava et al., JMLR 2014; PyTorch's `nn.Dropout` in training
    /// mode): each element kept with probability `1 - p` and scaled by `1 / (1 - p)`, dropped
    /// otherwise, drawing from the stream `(key, counter)`: `x * (greater_equal(u, p) * 1/(1-p))`.
    /// The mask is a node of the graph, so the reverse pass multiplies by the same mask.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn dropout(
        &mut self,
        x: &Self::Value,
        p: f32,
        key: &Self::Value,
        counter: &Self::Value,
    ) -> Result<Self::Value, Self::Error> {
        let s = self.shape_of(x);
        let u = self.uniform(key, counter, s)?;
        let threshold = self.fill(p, s)?;
        let keep = self.greater_equal(&u, &threshold)?;
        let mask = self.scale(&keep, 1.0 / (1.0 - p))?;
        self.mul(x, &mask)
    }
    /// The sum of every element, a scalar.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn sum_all(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.sum_to(x, Shape::SCALAR)
    }
    /// `x * c` for a constant `c` (a fill of `x`'s shape, then a product).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn scale(&mut self, x: &Self::Value, c: f32) -> Result<Self::Value, Self::Error> {
        let s = self.shape_of(x);
        let k = self.fill(c, s)?;
        self.mul(x, &k)
    }
    /// `log(Σ exp(x))` down to `shape` (which broadcasts back to `x`'s shape: the reduced axes
    /// are those it keeps at extent 1), PyTorch's `torch.logsumexp(x, dims, keepdim=True)`; a
    /// fully masked row (all `-inf`) gives `-inf`. See [`crate::ops::logsumexp`].
    ///
    /// # Shapes
    /// `x: [..]` to `shape`, e.g. `[batch, classes] -> [batch, 1]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn logsumexp_to(&mut self, x: &Self::Value, shape: Shape) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::LogSumExp, Attr::target(shape), &[x])
    }
    /// `log_softmax(x)` over `axis` (PyTorch's `F.log_softmax(x, dim=axis)`), a composition:
    /// `x − broadcast(logsumexp_to(x, shape with axis at 1))`. Its gradient is
    /// `ḡ − softmax · Σ ḡ` through `logsumexp`'s rule. A fully masked row gives
    /// `-inf − (-inf) = NaN`, as PyTorch's does.
    ///
    /// # Shapes
    /// `x: [.., n, ..]` (`n` at `axis`) to the same shape.
    ///
    /// # Errors
    /// As [`Recordable::apply`]; an `axis` past the rank is a shape error.
    fn log_softmax(&mut self, x: &Self::Value, axis: usize) -> Result<Self::Value, Self::Error> {
        let s = self.shape_of(x);
        let lse = self.logsumexp_to(x, keep_axis_at_one(s, axis)?)?;
        let lse = self.broadcast(&lse, s)?;
        self.sub(x, &lse)
    }
    /// `softmax(x)` over `axis` (PyTorch's `F.softmax(x, dim=axis)`), a composition:
    /// `e / broadcast(sum_to(e))` with `e = exp(x − detach(broadcast(max_to(x))))` (the
    /// max shift contributes no gradient: softmax is shift-invariant). The quotient form rounds
    /// each output about 1.5 ulp from its value where `exp(log_softmax)` would carry the
    /// rounding of the log-sum-exp (an ulp of a number as large as the logits). A fully masked
    /// row gives NaN, as PyTorch's does.
    ///
    /// # Shapes
    /// `x: [.., n, ..]` (`n` at `axis`) to the same shape.
    ///
    /// # Errors
    /// As [`Recordable::apply`]; an `axis` past the rank is a shape error.
    fn softmax(&mut self, x: &Self::Value, axis: usize) -> Result<Self::Value, Self::Error> {
        let s = self.shape_of(x);
        let row = keep_axis_at_one(s, axis)?;
        let m = self.max_to(x, row)?;
        let m = self.detach(&m)?;
        let m = self.broadcast(&m, s)?;
        let shifted = self.sub(x, &m)?;
        let e = self.exp(&shifted)?;
        let total = self.sum_to(&e, row)?;
        let total = self.broadcast(&total, s)?;
        self.div(&e, &total)
    }
    /// Binary cross-entropy of logits `x` against targets `z` (PyTorch's
    /// `F.binary_cross_entropy_with_logits`, no `weight` or `pos_weight`): the elementwise
    /// instruction [`crate::ops::bce_with_logits`] (gradient `σ(x) − z`, smooth at 0), then
    /// `reduction`.
    ///
    /// # Shapes
    /// `x`, `z`: one shape; the result a scalar (`Mean`, `Sum`) or that shape (`None`).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn binary_cross_entropy_with_logits(
        &mut self,
        x: &Self::Value,
        z: &Self::Value,
        reduction: Reduction,
    ) -> Result<Self::Value, Self::Error> {
        let l = self.apply(Opcode::BceWithLogits, Attr::NONE, &[x, z])?;
        self.reduce(&l, reduction)
    }
    /// The L1 loss `|pred − target|`, then `reduction` (PyTorch's `F.l1_loss`). A composition:
    /// its gradient at `pred = target` is `abs`'s, `sign(0) = 0`, as PyTorch's.
    ///
    /// # Shapes
    /// `pred`, `target`: one shape; the result a scalar (`Mean`, `Sum`) or that shape (`None`).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn l1_loss(
        &mut self,
        pred: &Self::Value,
        target: &Self::Value,
        reduction: Reduction,
    ) -> Result<Self::Value, Self::Error> {
        let d = self.sub(pred, target)?;
        let a = self.abs(&d)?;
        self.reduce(&a, reduction)
    }
    /// The Huber loss (PyTorch's `F.huber_loss`): with `a = |pred − target|`,
    /// `(0.5·a)·a` where `a < delta`, else `delta·(a − 0.5·delta)`, then `reduction`. A
    /// composition (`select` over the two branches): at `a = delta` the linear branch is taken,
    /// whose slope `delta·sign(d)` equals the quadratic's there, so the gradient is continuous
    /// (PyTorch's convention gives the same value); at `pred = target` it is `0`.
    ///
    /// # Shapes
    /// `pred`, `target`: one shape; the result a scalar (`Mean`, `Sum`) or that shape (`None`).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn huber_loss(
        &mut self,
        pred: &Self::Value,
        target: &Self::Value,
        delta: f32,
        reduction: Reduction,
    ) -> Result<Self::Value, Self::Error> {
        let s = self.shape_of(pred);
        let d = self.sub(pred, target)?;
        let a = self.abs(&d)?;
        let half_a = self.scale(&a, 0.5)?;
        let quadratic = self.mul(&half_a, &a)?;
        let half_delta = self.fill(0.5 * delta, s)?;
        let shifted = self.sub(&a, &half_delta)?;
        let linear = self.scale(&shifted, delta)?;
        let delta_t = self.fill(delta, s)?;
        let inside = self.less(&a, &delta_t)?;
        let l = self.select(&inside, &quadratic, &linear)?;
        self.reduce(&l, reduction)
    }
    /// `x` reduced as PyTorch's losses reduce: unchanged (`None`), summed to a scalar (`Sum`),
    /// or averaged (`Mean`: [`Recordable::mean_to`], the sum divided by the element count).
    ///
    /// # Shapes
    /// `x: [..]` to `[]` (`Mean`, `Sum`) or `x`'s shape (`None`).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn reduce(
        &mut self,
        x: &Self::Value,
        reduction: Reduction,
    ) -> Result<Self::Value, Self::Error> {
        match reduction {
            Reduction::None => Ok(x.clone()),
            Reduction::Sum => self.sum_all(x),
            Reduction::Mean => self.mean_to(x, Shape::SCALAR),
        }
    }
}

/// `shape` with its extent at `axis` set to 1 (the target of a reduction over `axis`, kept).
///
/// # Errors
/// [`OpError::BadTarget`] (naming `logsumexp`, the reduction) for an `axis` past the rank.
pub fn keep_axis_at_one(shape: Shape, axis: usize) -> Result<Shape, OpError> {
    let rank = shape.rank();
    if axis >= rank {
        return Err(OpError::BadTarget {
            op: Opcode::LogSumExp,
            from: shape,
            to: shape,
        });
    }
    let mut dims = shape.dims();
    if let Some(d) = dims.get_mut(axis) {
        *d = 1;
    }
    Shape::new(&dims[..rank]).map_err(OpError::Shape)
}

/// How a loss reduces its elementwise values, as PyTorch's `reduction` argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Reduction {
    /// `'none'`: the elementwise losses.
    None,
    /// `'mean'` (PyTorch's default): the sum divided by the element count.
    #[default]
    Mean,
    /// `'sum'`.
    Sum,
}
