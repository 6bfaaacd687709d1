//! `Recordable`: the vocabulary a rule body speaks, with one payload per reading.
//!
//! The forward meaning of an instruction ([`crate::Opcode::express`]) and its reverse rule
//! ([`crate::Opcode::vjp`]) are written once, against this trait, never against numbers. Two
//! payloads implement it in this crate (with `alloc`): the compute payload (`Run`'s tensors,
//! whose reverse walk is the oracle) and the record payload ([`crate::Trace`], whose values are
//! handles and whose every operation appends a node to a tape).
//!
//! # Activations, losses and normalization (issue 12)
//! By DESIGN.md's "what earns an instruction" rule most of them are provided methods here,
//! compositions: their bits are those of the formula PyTorch documents (or ONNX's, where the
//! two differ; each method says), a composition reproduces them, and the gradient conventions at
//! the kinks (PyTorch's) follow from which branch a `select` takes or whether a mask is
//! detached: [`Recordable::leaky_relu`], [`Recordable::clamp`], [`Recordable::hardtanh`],
//! [`Recordable::relu6`], [`Recordable::hardsigmoid`], [`Recordable::hardswish`],
//! [`Recordable::silu`], [`Recordable::gelu`], [`Recordable::gelu_tanh`],
//! [`Recordable::softplus_beta`], [`Recordable::softmax`], [`Recordable::log_softmax`],
//! [`Recordable::l1_loss`], [`Recordable::huber_loss`]. Two are instructions: `logsumexp`
//! (a streamed kernel where the composition needs a buffer of the input's size, and a defined
//! `-inf` for a fully masked row) and `bce_with_logits` (its gradient `σ(x) − z` is its own rule,
//! smooth where the stable form's `max` and `|x|` have kinks).

use crate::ops::OpError;
use crate::{Attr, ConvAttr, PoolWindow};
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
    /// `a · b` for `a: [m, k]`, `b: [k, n]`; batched, one product per batch index.
    ///
    /// # Shapes
    /// `[m, k] x [k, n] -> [m, n]`; `[b, m, k] x [b, k, n] -> [b, m, n]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn matmul(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::MatMul, Attr::NONE, &[a, b])
    }
    /// `xᵀ` for `x: [m, n]`; the last two axes of `x: [b, m, n]`.
    ///
    /// # Shapes
    /// `[m, n] -> [n, m]`; `[b, m, n] -> [b, n, m]`.
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
    /// A convolution (see [`crate::ops::conv`]): `x` correlated with `w` under `attr`, plus
    /// `bias` per output channel if given (spoken as `add(y, broadcast(reshape(bias, [C_out, 1,
    /// …]), shape(y)))`: the module doc says why). The attribute's `extent` is set here, to the
    /// output's spatial extent.
    ///
    /// # Shapes
    /// `x: [N, C_in, L]`, `w: [C_out, C_in / groups, K]`, `bias: [C_out]` → `[N, C_out, L_out]`
    /// (1-D); `x: [N, C_in, H, W]`, `w: [C_out, C_in / groups, K_h, K_w]` → `[N, C_out, H_out,
    /// W_out]` (2-D); `out = (in + pad_begin + pad_end − dilation · (K − 1) − 1) / stride + 1`.
    ///
    /// # Errors
    /// As [`Recordable::apply`]; [`OpError::Conv`] when the attribute does not fit the shapes.
    fn conv(
        &mut self,
        x: &Self::Value,
        w: &Self::Value,
        bias: Option<&Self::Value>,
        attr: ConvAttr,
    ) -> Result<Self::Value, Self::Error> {
        let (xs, ws) = (self.shape_of(x), self.shape_of(w));
        let e = crate::ops::conv::output_extent(&attr, xs, ws)?;
        let a = attr.with_extent(&e[..attr.spatial_rank()]);
        let y = self.apply(Opcode::Conv, Attr::Conv(a), &[x, w])?;
        let Some(b) = bias else {
            return Ok(y);
        };
        let ys = self.shape_of(&y);
        let c = ys.dim(1).unwrap_or(0);
        let per_channel = if a.spatial_rank() == 1 {
            Shape::new(&[c, 1])
        } else {
            Shape::new(&[c, 1, 1])
        }
        .map_err(OpError::Shape)?;
        let b = self.reshape(b, per_channel)?;
        let b = self.broadcast(&b, ys)?;
        self.add(&y, &b)
    }
    /// The transposed convolution `conv_transpose(g, w)` (see [`crate::ops::conv_transpose`]):
    /// `conv`'s input gradient, `x`-shaped, `extent` the spatial extent of `x` (one value per
    /// spatial axis).
    ///
    /// # Shapes
    /// `g: [N, C_out, L_out]`, `w: [C_out, C_in / groups, K]` → `[N, C_in, extent[0]]` (2-D
    /// likewise, `[N, C_in, extent[0], extent[1]]`).
    ///
    /// # Errors
    /// As [`Recordable::apply`]; [`OpError::Conv`] when `conv` of such an `x` by `w` would not
    /// give `g`'s shape.
    fn conv_transpose(
        &mut self,
        g: &Self::Value,
        w: &Self::Value,
        attr: ConvAttr,
        extent: &[usize],
    ) -> Result<Self::Value, Self::Error> {
        let a = attr.with_extent(extent);
        self.apply(Opcode::ConvTranspose, Attr::Conv(a), &[g, w])
    }
    /// The weight gradient `conv_weight_grad(x, g)` (see [`crate::ops::conv_weight_grad`]):
    /// the correlation of `x` with `g`, `w`-shaped, `kernel` the kernel's spatial extent (one
    /// value per spatial axis).
    ///
    /// # Shapes
    /// `x: [N, C_in, L]`, `g: [N, C_out, L_out]` → `[C_out, C_in / groups, kernel[0]]` (2-D
    /// likewise).
    ///
    /// # Errors
    /// As [`Recordable::apply`]; [`OpError::Conv`] when `conv` of `x` by such a weight would
    /// not give `g`'s shape.
    fn conv_weight_grad(
        &mut self,
        x: &Self::Value,
        g: &Self::Value,
        attr: ConvAttr,
        kernel: &[usize],
    ) -> Result<Self::Value, Self::Error> {
        let a = attr.with_extent(kernel);
        self.apply(Opcode::ConvWeightGrad, Attr::Conv(a), &[x, g])
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
    /// Max pooling (see [`crate::ops::max_pool`]): the maximum of each window.
    ///
    /// # Shapes
    /// `x: [N, C, L]` or `[N, C, H, W]` → `[N, C, L_out]` or `[N, C, H_out, W_out]`, each
    /// extent `(len + pad_begin + pad_end - ((kernel - 1) * dilation + 1)) / stride + 1`.
    ///
    /// # Errors
    /// As [`Recordable::apply`] ([`OpError::BadPool`] for a window that does not fit).
    fn max_pool(
        &mut self,
        x: &Self::Value,
        window: PoolWindow,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::MaxPool, Attr::Pool(window), &[x])
    }
    /// Max pooling's adjoint: each window's `g` added at the window's first maximum of `x`.
    ///
    /// # Shapes
    /// `x: [N, C, (H,) W]`, `g`: `max_pool(x)`'s shape → `x`'s shape.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn max_pool_scatter(
        &mut self,
        x: &Self::Value,
        g: &Self::Value,
        window: PoolWindow,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::MaxPoolScatter, Attr::Pool(window), &[x, g])
    }
    /// `h` read at each window's first maximum of `x`.
    ///
    /// # Shapes
    /// `x, h: [N, C, (H,) W]` → `max_pool(x)`'s shape.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn max_pool_gather(
        &mut self,
        x: &Self::Value,
        h: &Self::Value,
        window: PoolWindow,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::MaxPoolGather, Attr::Pool(window), &[x, h])
    }
    /// Average pooling (see [`crate::ops::avg_pool`]; `count_include_pad` is the window's).
    ///
    /// # Shapes
    /// As [`Recordable::max_pool`].
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn avg_pool(
        &mut self,
        x: &Self::Value,
        window: PoolWindow,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::AvgPool, Attr::Pool(window), &[x])
    }
    /// Average pooling's adjoint, from the pooled shape back to `shape`.
    ///
    /// # Shapes
    /// `g`: `avg_pool` of a tensor of `shape` → `shape`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn avg_pool_backward(
        &mut self,
        g: &Self::Value,
        window: PoolWindow,
        shape: Shape,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::AvgPoolBackward, Attr::PoolTo(window, shape), &[g])
    }
    /// ONNX's `Gather` along `axis`: `data`'s slices at `indices` (integers stored as `f32`;
    /// negative ones count from the end; an invalid index gives zeros). See
    /// [`crate::ops::gather`].
    ///
    /// # Shapes
    /// `data: [d0, …, d(r-1)]`, `indices: [i…]` → `[d0, …, d(axis-1), i…, d(axis+1), …]`
    /// (rank at most 4).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn gather(
        &mut self,
        data: &Self::Value,
        indices: &Self::Value,
        axis: usize,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Gather, Attr::Axis(axis), &[data, indices])
    }
    /// The embedding lookup (PyTorch's `F.embedding`): `gather(table, ids, 0)`.
    ///
    /// # Shapes
    /// `table: [V, D]`, `ids: [B]` or `[B, T]` → `[B, D]` or `[B, T, D]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn embedding(
        &mut self,
        table: &Self::Value,
        ids: &Self::Value,
    ) -> Result<Self::Value, Self::Error> {
        self.gather(table, ids, 0)
    }
    /// `gather`'s adjoint: zeros of `shape`, `updates` added at `indices` along `axis`
    /// (duplicates accumulate in increasing position order; invalid indices add nothing).
    ///
    /// # Shapes
    /// `indices: [i…]`, `updates`: `gather`'s output over `shape` and `indices` → `shape`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn scatter_add(
        &mut self,
        indices: &Self::Value,
        updates: &Self::Value,
        axis: usize,
        shape: Shape,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(
            Opcode::ScatterAdd,
            Attr::AxisTo(axis, shape),
            &[indices, updates],
        )
    }
    /// The index (as `f32`) of the maximum along `axis`, kept as extent 1 (ties: the lowest
    /// index; NaN counts as the maximum). See [`crate::ops::argmax`].
    ///
    /// # Shapes
    /// `x: [.., n, ..]` → `[.., 1, ..]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn argmax(&mut self, x: &Self::Value, axis: usize) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::ArgMax, Attr::Axis(axis), &[x])
    }
    /// The product of `x` down to `shape` (see [`crate::ops::prod_to`]).
    ///
    /// # Shapes
    /// As [`Recordable::sum_to`].
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn prod_to(&mut self, x: &Self::Value, shape: Shape) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::ProdTo, Attr::target(shape), &[x])
    }
    /// The product over `axes` (ONNX's `ReduceProd`): [`Recordable::prod_to`] the keep-dims
    /// shape.
    ///
    /// # Shapes
    /// As [`Recordable::sum_axes`].
    ///
    /// # Errors
    /// As [`Recordable::sum_axes`].
    fn prod_axes(
        &mut self,
        x: &Self::Value,
        axes: &[usize],
        keepdims: bool,
    ) -> Result<Self::Value, Self::Error> {
        reduce_axes(self, x, axes, keepdims, Self::prod_to)
    }
    /// For each element, the product of the elements before it in its group (after it, with
    /// `reverse`); `1` for the first. A group: the elements that agree on every axis outside
    /// the mask `axes` (bit `k` for axis `k`), in flat-index order. See
    /// [`crate::ops::cumprod_exclusive`].
    ///
    /// # Shapes
    /// `x` → `x`'s shape.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn cumprod_exclusive(
        &mut self,
        x: &Self::Value,
        axes: u8,
        reverse: bool,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::CumprodExclusive, Attr::Scan { axes, reverse }, &[x])
    }
    /// The exclusive affine recurrence `z = b[p] + c[p] * z[p]` along each group (groups as
    /// [`Recordable::cumprod_exclusive`]'s), from `0`. See [`crate::ops::affine_scan`].
    ///
    /// # Shapes
    /// `c`, `b` of one shape → that shape.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn affine_scan(
        &mut self,
        c: &Self::Value,
        b: &Self::Value,
        axes: u8,
        reverse: bool,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::AffineScan, Attr::Scan { axes, reverse }, &[c, b])
    }
    /// The sum over the axes `axes` (any set, in any order, each once), as ONNX's `ReduceSum`:
    /// `sum_to` the keep-dims shape, then (`keepdims = false`) a `reshape` that drops those
    /// axes.
    ///
    /// # Shapes
    /// `x: [d0, d1, d2]`, `axes = [0, 2]` → `[1, d1, 1]` (`keepdims`) or `[d1]`.
    ///
    /// # Errors
    /// [`OpError::BadTarget`] for an axis not below the rank or given twice; as
    /// [`Recordable::apply`].
    fn sum_axes(
        &mut self,
        x: &Self::Value,
        axes: &[usize],
        keepdims: bool,
    ) -> Result<Self::Value, Self::Error> {
        reduce_axes(self, x, axes, keepdims, Self::sum_to)
    }
    /// The mean over `axes` (ONNX's `ReduceMean`): [`Recordable::mean_to`] the keep-dims shape.
    ///
    /// # Shapes
    /// As [`Recordable::sum_axes`].
    ///
    /// # Errors
    /// As [`Recordable::sum_axes`].
    fn mean_axes(
        &mut self,
        x: &Self::Value,
        axes: &[usize],
        keepdims: bool,
    ) -> Result<Self::Value, Self::Error> {
        reduce_axes(self, x, axes, keepdims, Self::mean_to)
    }
    /// The maximum over `axes` (ONNX's `ReduceMax`): [`Recordable::max_to`] the keep-dims
    /// shape (ties share the gradient evenly, see [`crate::ops::max_to`]).
    ///
    /// # Shapes
    /// As [`Recordable::sum_axes`].
    ///
    /// # Errors
    /// As [`Recordable::sum_axes`].
    fn max_axes(
        &mut self,
        x: &Self::Value,
        axes: &[usize],
        keepdims: bool,
    ) -> Result<Self::Value, Self::Error> {
        reduce_axes(self, x, axes, keepdims, Self::max_to)
    }
    /// Global average pooling (ONNX's `GlobalAveragePool`, PyTorch's
    /// `adaptive_avg_pool2d(x, 1)`): the mean over every spatial axis, a composition
    /// ([`Recordable::mean_to`]: `sum_to`, then one division by the spatial element count).
    ///
    /// # Shapes
    /// `x: [N, C, d…]` (rank 3 or 4) → `[N, C, 1…]` (the same rank).
    ///
    /// # Errors
    /// As [`Recordable::apply`]; [`OpError::BadPool`] for a rank other than 3 or 4.
    fn global_avg_pool(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        let s = self.shape_of(x);
        let d = s.dims();
        let target = match s.rank() {
            3 => Shape::new(&[d[0], d[1], 1]),
            4 => Shape::new(&[d[0], d[1], 1, 1]),
            _ => {
                return Err(OpError::BadPool {
                    op: Opcode::AvgPool,
                    shape: s,
                }
                .into())
            }
        }
        .map_err(OpError::Shape)?;
        self.mean_to(x, target)
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
    /// The matrix product `aᵀ · b` reading `a` transposed, bit for bit
    /// `matmul(transpose(a), b)` (see [`crate::ops::matmul_tn`]).
    ///
    /// # Shapes
    /// `a: [k, m]`, `b: [k, n]` to `[m, n]`; batched `[b, k, m]`, `[b, k, n]` to `[b, m, n]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn matmul_tn(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::MatMulTn, Attr::NONE, &[a, b])
    }
    /// The matrix product `a · bᵀ` reading `b` transposed, bit for bit
    /// `matmul(a, transpose(b))` (see [`crate::ops::matmul_nt`]).
    ///
    /// # Shapes
    /// `a: [m, k]`, `b: [n, k]` to `[m, n]`; batched `[b, m, k]`, `[b, n, k]` to `[b, m, n]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn matmul_nt(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::MatMulNt, Attr::NONE, &[a, b])
    }
    /// Plain SGD's step fused with its weight gradient: `w − lr · (aᵀ · b)` in one instruction,
    /// bit for bit `sub(w, scale(matmul(transpose(a), b), lr))` (see [`crate::ops::sgd_matmul`]).
    ///
    /// # Shapes
    /// `w: [m, n]`, `a: [k, m]`, `b: [k, n]` to `[m, n]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn sgd_matmul(
        &mut self,
        w: &Self::Value,
        a: &Self::Value,
        b: &Self::Value,
        lr: f32,
    ) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::SgdMatMul, Attr::Lr(lr), &[w, a, b])
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
    /// Softmax cross-entropy of `logits: [batch, classes]` against integer class indices
    /// `labels: [batch]` (stored as `f32`), PyTorch's `F.cross_entropy` without weights or
    /// label smoothing: `−log_softmax(logits)[label]` per row, then `reduction`. A composition
    /// over [`Recordable::log_softmax`] (so over the `logsumexp` instruction).
    ///
    /// **A fully masked row** (every logit `-inf`, e.g. a padded sequence position) carries no
    /// information: its loss is `0` and its gradient `0`, as PyTorch's `ignore_index` rows
    /// (where the plain formula gives `-inf − (-inf)`, NaN, in the value and in every gradient
    /// through the batch's reduction). The composition: `masked = (max_to(logits) == -inf)` per
    /// row; the masked rows' logits are replaced by zeros before `log_softmax`
    /// (`select(masked, 0, logits)`: nothing infinite reaches its rule, so its gradient there is
    /// finite) and their loss by `0` after it (`select(masked, 0, loss)`: the cotangent that
    /// flows back into the row is `0`). `select` copies, so a row with a finite logit has the
    /// same value and gradient bits as the plain formula; a partially masked row is an ordinary
    /// row (its `-inf` classes have probability 0; a `-inf` label logit costs `+inf`, as
    /// PyTorch's).
    ///
    /// `Mean` divides by **every** row, masked ones included (`batch`, a plan-time constant):
    /// the loss stays the mean over the batch the plan was made for, never `0/0` (NaN) when every
    /// row is masked, and its bits are the plain formula's whenever no row is masked. PyTorch's
    /// `ignore_index` mean divides by the unmasked rows instead (its value is NaN when there are
    /// none); a caller who wants that takes `Sum` and divides by its own count.
    ///
    /// The MLP's own loss (`tapeplan_planner::model::softmax_cross_entropy`) keeps its
    /// max-shifted form, so the plans recorded with it keep their bytes.
    ///
    /// # Shapes
    /// `logits: [batch, classes]`, `labels: [batch]`; the result `[]` (`Mean`, `Sum`) or
    /// `[batch, 1]` (`None`).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn cross_entropy(
        &mut self,
        logits: &Self::Value,
        labels: &Self::Value,
        reduction: Reduction,
    ) -> Result<Self::Value, Self::Error> {
        let s = self.shape_of(logits);
        let rows = keep_axis_at_one(s, 1)?;
        let row_max = self.max_to(logits, rows)?;
        let minus_inf = self.fill(f32::NEG_INFINITY, rows)?;
        let masked = self.equal(&row_max, &minus_inf)?;
        let masked_logits = self.broadcast(&masked, s)?;
        let zeros = self.fill(0.0, s)?;
        let live = self.select(&masked_logits, &zeros, logits)?;
        let logp = self.log_softmax(&live, 1)?;
        let onehot = self.one_hot(labels, s.dim(1).unwrap_or(0))?;
        let picked = self.mul(&onehot, &logp)?;
        let per_row = self.sum_to(&picked, rows)?;
        let loss = self.neg(&per_row)?;
        let zero_rows = self.fill(0.0, rows)?;
        let loss = self.select(&masked, &zero_rows, &loss)?;
        self.reduce(&loss, reduction)
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
    /// A constant of `x`'s shape.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn fill_like(&mut self, x: &Self::Value, value: f32) -> Result<Self::Value, Self::Error> {
        let s = self.shape_of(x);
        self.fill(value, s)
    }
    /// Leaky ReLU (PyTorch's `F.leaky_relu`, ONNX `LeakyRelu`'s `alpha`): `x` where `x > 0`,
    /// else `x · negative_slope`. A composition (`select` over `greater(x, 0)`); the slope at
    /// `x = 0` is `negative_slope`, as PyTorch's (`x > 0 ? ḡ : ḡ · slope`). NaN stays NaN.
    ///
    /// # Shapes
    /// Any shape, kept.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn leaky_relu(
        &mut self,
        x: &Self::Value,
        negative_slope: f32,
    ) -> Result<Self::Value, Self::Error> {
        let zero = self.fill_like(x, 0.0)?;
        let positive = self.greater(x, &zero)?;
        let scaled = self.scale(x, negative_slope)?;
        self.select(&positive, x, &scaled)
    }
    /// `min(max(x, min_val), max_val)` with PyTorch's `torch.clamp` gradient (ONNX `Clip`):
    /// `1` where `min_val ≤ x ≤ max_val`, the bounds included (`maximum` and `minimum` give a
    /// tie to their first argument), else `0`. NaN stays NaN.
    ///
    /// # Shapes
    /// Any shape, kept.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn clamp(
        &mut self,
        x: &Self::Value,
        min_val: f32,
        max_val: f32,
    ) -> Result<Self::Value, Self::Error> {
        let lo = self.fill_like(x, min_val)?;
        let hi = self.fill_like(x, max_val)?;
        let above = self.maximum(x, &lo)?;
        self.minimum(&above, &hi)
    }
    /// Hardtanh (PyTorch's `F.hardtanh`): the values of [`Recordable::clamp`], with
    /// PyTorch's hardtanh gradient: `1` strictly inside `(min_val, max_val)`, `0` at the bounds
    /// and outside (`x ≤ min_val || x ≥ max_val ? 0 : ḡ`). A composition:
    /// `select(min_val < x < max_val, x, detach(clamp(x)))`.
    ///
    /// # Shapes
    /// Any shape, kept.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn hardtanh(
        &mut self,
        x: &Self::Value,
        min_val: f32,
        max_val: f32,
    ) -> Result<Self::Value, Self::Error> {
        let lo = self.fill_like(x, min_val)?;
        let hi = self.fill_like(x, max_val)?;
        let above = self.greater(x, &lo)?;
        let below = self.less(x, &hi)?;
        let inside = self.mul(&above, &below)?;
        let clamped = self.clamp(x, min_val, max_val)?;
        let clamped = self.detach(&clamped)?;
        self.select(&inside, x, &clamped)
    }
    /// ReLU6 (PyTorch's `F.relu6`): [`Recordable::hardtanh`] over `[0, 6]` (gradient `0` at
    /// `0` and at `6`, as PyTorch's).
    ///
    /// # Shapes
    /// Any shape, kept.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn relu6(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.hardtanh(x, 0.0, 6.0)
    }
    /// Hard sigmoid in ONNX's form (`HardSigmoid`: `max(0, min(1, alpha·x + beta))`, ONNX's
    /// defaults `alpha = 0.2`, `beta = 0.5`; PyTorch's `F.hardsigmoid` is `alpha = 1/6`,
    /// `beta = 1/2`, which it computes as `relu6(x + 3) / 6`: within an ulp or two of this
    /// form, not bit for bit). `alpha · x` then `+ beta`, then [`Recordable::hardtanh`] over
    /// `[0, 1]`: gradient `alpha` strictly inside, `0` at the kinks, as PyTorch's.
    ///
    /// # Shapes
    /// Any shape, kept.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn hardsigmoid(
        &mut self,
        x: &Self::Value,
        alpha: f32,
        beta: f32,
    ) -> Result<Self::Value, Self::Error> {
        let ax = self.scale(x, alpha)?;
        let b = self.fill_like(x, beta)?;
        let t = self.add(&ax, &b)?;
        self.hardtanh(&t, 0.0, 1.0)
    }
    /// Hard swish (ONNX `HardSwish`, PyTorch's `F.hardswish`): `x · clamp(x/6 + 1/2, 0, 1)`
    /// with `1/6` as an `f32` (`alpha · x + beta`, ONNX's form). The inner clamp is
    /// [`Recordable::clamp`] (bounds included), so the gradient at the kinks is PyTorch's:
    /// `x/3 + 1/2` on `[−3, 3]` (`−1/2` at `−3`, `3/2` at `3`), `0` below, `1` above.
    ///
    /// # Shapes
    /// Any shape, kept.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn hardswish(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        let ax = self.scale(x, 1.0 / 6.0)?;
        let b = self.fill_like(x, 0.5)?;
        let t = self.add(&ax, &b)?;
        let gate = self.clamp(&t, 0.0, 1.0)?;
        self.mul(x, &gate)
    }
    /// SiLU / swish (PyTorch's `F.silu`): `x · sigmoid(x)`, a composition.
    ///
    /// # Shapes
    /// Any shape, kept.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn silu(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        let s = self.sigmoid(x)?;
        self.mul(x, &s)
    }
    /// GELU, the exact (erf) form (PyTorch's `F.gelu(x)`, ONNX `Gelu` with
    /// `approximate="none"`): `(x · 0.5) · (1 + erf(x · (1/√2)))`, PyTorch's order of
    /// operations, a composition over the `erf` instruction.
    ///
    /// # Shapes
    /// Any shape, kept.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn gelu(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        let half_x = self.scale(x, 0.5)?;
        let u = self.scale(x, core::f32::consts::FRAC_1_SQRT_2)?;
        let e = self.erf(&u)?;
        let one = self.fill_like(x, 1.0)?;
        let w = self.add(&one, &e)?;
        self.mul(&half_x, &w)
    }
    /// GELU, the tanh approximation (PyTorch's `F.gelu(x, approximate='tanh')`, ONNX `Gelu`
    /// with `approximate="tanh"`): `(0.5 · x) · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))` with
    /// `x³ = (x · x) · x`, PyTorch's order of operations, a composition.
    ///
    /// # Shapes
    /// Any shape, kept.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn gelu_tanh(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        const SQRT_2_OVER_PI: f32 = 0.797_884_6;
        let xx = self.mul(x, x)?;
        let cube = self.mul(&xx, x)?;
        let k = self.scale(&cube, 0.044_715)?;
        let inner = self.add(x, &k)?;
        let inner = self.scale(&inner, SQRT_2_OVER_PI)?;
        let t = self.tanh(&inner)?;
        let one = self.fill_like(x, 1.0)?;
        let w = self.add(&one, &t)?;
        let half_x = self.scale(x, 0.5)?;
        self.mul(&half_x, &w)
    }
    /// Softplus with PyTorch's `beta` and `threshold` (`F.softplus(x, beta, threshold)`):
    /// `x` itself where `x · beta > threshold`, else `log1p(exp(x · beta)) / beta`, PyTorch's
    /// formula and order. A composition, `select(greater(βx, threshold), x, softplus(βx) / β)`,
    /// that rounds no more than PyTorch's formula: above the threshold the answer is `x`, not
    /// `(βx)/β`; below it the `softplus` instruction (`β = 1`, its own threshold 20) is
    /// `log1p(exp(βx))` up to 20, and between 20 and a larger `threshold` both are `βx` to the
    /// last bit in `f32` (`log1p(e^t) − t = log1p(e^−t) < e^−20`, far below half an ulp of `t`;
    /// the cross test `log1p_of_exp_is_the_identity_above_20_in_f32` checks it) until `exp` overflows
    /// (`βx` above 88.7, where PyTorch's gives `inf` and this gives `x`). So no new instruction
    /// and no attribute: the plans of `softplus` (0x1E) are unchanged. The gradient is
    /// `1` above the threshold and `sigmoid(βx)` (as `((ḡ/β)·σ(βx))·β`) below it.
    ///
    /// # Shapes
    /// Any shape, kept.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn softplus_beta(
        &mut self,
        x: &Self::Value,
        beta: f32,
        threshold: f32,
    ) -> Result<Self::Value, Self::Error> {
        let bx = self.scale(x, beta)?;
        let limit = self.fill_like(x, threshold)?;
        let linear = self.greater(&bx, &limit)?;
        let sp = self.softplus(&bx)?;
        let b = self.fill_like(x, beta)?;
        let smooth = self.div(&sp, &b)?;
        self.select(&linear, x, &smooth)
    }
    /// Batch normalization in training mode (Ioffe & Szegedy, 2015; PyTorch's
    /// `F.batch_norm(training=True)`, ONNX `BatchNormalization` with `training_mode=1`) over the
    /// channel axis 1: statistics per channel over the batch and spatial axes, `x` normalized
    /// with the batch statistics (biased variance), then the affine `weight`, `bias`; and the
    /// new running statistics (see [`RunningStats`] for PyTorch's and ONNX's conventions).
    ///
    /// A composition, not an instruction: its bits are the formula's, spoken with `sum_to`,
    /// `div`, `sub`, `mul`, `sqrt` and `broadcast`, and its gradient is the exact derivative
    /// through the batch statistics (PyTorch's backward is the same derivative simplified by
    /// hand: the same math, another rounding); an instruction would have three outputs, which
    /// the vocabulary's instructions do not have, and the elementwise tail fuses.
    ///
    /// # Arithmetic order
    /// `n` values per channel; `μ = sum_to(x) / n`; `d = x − μ`; `s = sum_to(d · d)`;
    /// `σ² = s / n`; `y = (d / sqrt(σ² + eps)) · weight + bias` (ONNX's formula: the quotient,
    /// where PyTorch's kernel multiplies by `1 / sqrt`). PyTorch's running variance uses the
    /// unbiased `s / (n − 1)`; ONNX's the biased `σ²`.
    ///
    /// # Shapes
    /// `x: [N, C]`, `[N, C, L]` or `[N, C, H, W]`; `weight`, `bias`, `running_mean`,
    /// `running_var: [C]`; `y` of `x`'s shape, the new running statistics `[C]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`]; [`OpError::BadTarget`] (naming `sum_to`) for `x` of rank
    /// below 2 or fewer than 2 values per channel (PyTorch refuses it too: no unbiased variance).
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_train(
        &mut self,
        x: &Self::Value,
        weight: Option<&Self::Value>,
        bias: Option<&Self::Value>,
        running_mean: &Self::Value,
        running_var: &Self::Value,
        stats: RunningStats,
        eps: f32,
    ) -> Result<BatchNormTrain<Self::Value>, Self::Error> {
        let s = self.shape_of(x);
        let stat = channel_stat_shape(s)?;
        let n = s.elems() / stat.elems().max(1);
        if n < 2 {
            return Err(OpError::BadTarget {
                op: Opcode::SumTo,
                from: s,
                to: stat,
            }
            .into());
        }
        let [mean, d, squares, var] = self.moments(x, stat)?;
        let y = self.normalize_affine(&d, &var, weight, bias, eps, stat, Some(stat))?;
        let c = self.shape_of(running_mean);
        let mean_c = self.reshape(&mean, c)?;
        let var_c = self.reshape(&var, c)?;
        let (running_mean, running_var) = match stats {
            RunningStats::PyTorch { momentum } => {
                let squares_c = self.reshape(&squares, c)?;
                let n_minus_1 = self.fill((n - 1) as f32, c)?;
                let unbiased = self.div(&squares_c, &n_minus_1)?;
                let rm = self.lerp_stat(running_mean, &mean_c, 1.0 - momentum, momentum)?;
                let rv = self.lerp_stat(running_var, &unbiased, 1.0 - momentum, momentum)?;
                (rm, rv)
            }
            RunningStats::Onnx { momentum } => {
                let rm = self.lerp_stat(running_mean, &mean_c, momentum, 1.0 - momentum)?;
                let rv = self.lerp_stat(running_var, &var_c, momentum, 1.0 - momentum)?;
                (rm, rv)
            }
        };
        Ok(BatchNormTrain {
            y,
            running_mean,
            running_var,
        })
    }
    /// Batch normalization in evaluation mode (PyTorch's `F.batch_norm(training=False)`, ONNX
    /// `BatchNormalization` with `training_mode=0`): `((x − running_mean) /
    /// sqrt(running_var + eps)) · weight + bias`, per channel (axis 1), the order of
    /// [`Recordable::batch_norm_train`]. A composition.
    ///
    /// # Shapes
    /// `x: [N, C, ..]`; `weight`, `bias`, `running_mean`, `running_var: [C]`; `y` of `x`'s shape.
    ///
    /// # Errors
    /// As [`Recordable::apply`]; [`OpError::BadTarget`] for `x` of rank below 2.
    fn batch_norm_eval(
        &mut self,
        x: &Self::Value,
        weight: Option<&Self::Value>,
        bias: Option<&Self::Value>,
        running_mean: &Self::Value,
        running_var: &Self::Value,
        eps: f32,
    ) -> Result<Self::Value, Self::Error> {
        let s = self.shape_of(x);
        let stat = channel_stat_shape(s)?;
        let mean = self.reshape(running_mean, stat)?;
        let mean_b = self.broadcast(&mean, s)?;
        let d = self.sub(x, &mean_b)?;
        let var = self.reshape(running_var, stat)?;
        self.normalize_affine(&d, &var, weight, bias, eps, stat, Some(stat))
    }
    /// Layer normalization (Ba et al., 2016; PyTorch's `F.layer_norm`, ONNX
    /// `LayerNormalization` with `axis = rank − normalized_dims`) over the last
    /// `normalized_dims` axes, with the biased variance and `eps` inside the square root:
    /// `μ = mean(x)`, `d = x − μ`, `σ² = mean(d · d)`, `y = (d / sqrt(σ² + eps)) · weight + bias`
    /// (means as `sum_to` then a division by the count). A composition, for the reasons of
    /// [`Recordable::batch_norm_train`].
    ///
    /// # Shapes
    /// `x: [.., D1, .., Dk]` (`k = normalized_dims`, 1 to the rank); `weight`, `bias`:
    /// `[D1, .., Dk]`; `y` of `x`'s shape.
    ///
    /// # Errors
    /// As [`Recordable::apply`]; [`OpError::BadTarget`] (naming `sum_to`) for
    /// `normalized_dims` of 0 or past the rank.
    fn layer_norm(
        &mut self,
        x: &Self::Value,
        normalized_dims: usize,
        weight: Option<&Self::Value>,
        bias: Option<&Self::Value>,
        eps: f32,
    ) -> Result<Self::Value, Self::Error> {
        let s = self.shape_of(x);
        let rank = s.rank();
        if normalized_dims == 0 || normalized_dims > rank {
            return Err(OpError::BadTarget {
                op: Opcode::SumTo,
                from: s,
                to: s,
            }
            .into());
        }
        let mut dims = s.dims();
        for d in dims.iter_mut().take(rank).skip(rank - normalized_dims) {
            *d = 1;
        }
        let stat = Shape::new(&dims[..rank]).map_err(OpError::Shape)?;
        let [_, d, _, var] = self.moments(x, stat)?;
        self.normalize_affine(&d, &var, weight, bias, eps, stat, None)
    }
    /// `(d / broadcast(sqrt(var + eps))) · weight + bias`, `weight` and `bias` (optional)
    /// reshaped to `params_as` when given (batch norm: `[C]` to `[1, C, 1, ..]`) and broadcast
    /// to `d`'s shape (layer norm's trailing dims broadcast as they are). The shared tail of the
    /// normalizations.
    ///
    /// # Shapes
    /// `d: [..]`, `var` of shape `stat` (broadcasts to `d`'s shape).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    #[allow(clippy::too_many_arguments)]
    fn normalize_affine(
        &mut self,
        d: &Self::Value,
        var: &Self::Value,
        weight: Option<&Self::Value>,
        bias: Option<&Self::Value>,
        eps: f32,
        stat: Shape,
        params_as: Option<Shape>,
    ) -> Result<Self::Value, Self::Error> {
        let s = self.shape_of(d);
        let e = self.fill(eps, stat)?;
        let shifted = self.add(var, &e)?;
        let root = self.sqrt(&shifted)?;
        let root = self.broadcast(&root, s)?;
        let mut y = self.div(d, &root)?;
        let to_x = |r: &mut Self, p: &Self::Value| -> Result<Self::Value, Self::Error> {
            let p = match params_as {
                Some(shape) => r.reshape(p, shape)?,
                None => p.clone(),
            };
            r.broadcast(&p, s)
        };
        if let Some(w) = weight {
            let w = to_x(self, w)?;
            y = self.mul(&y, &w)?;
        }
        if let Some(b) = bias {
            let b = to_x(self, b)?;
            y = self.add(&y, &b)?;
        }
        Ok(y)
    }
    /// The moments of `x` down to `stat` (`n` elements of `x` per element of `stat`):
    /// `[μ, d, s, σ²]` with `μ = sum_to(x) / n`, `d = x − broadcast(μ)`, `s = sum_to(d · d)`,
    /// `σ² = s / n` (biased). Two passes, as the normalizations define them.
    ///
    /// # Shapes
    /// `x: [..]`, `stat` broadcasting to it; `d` of `x`'s shape, the others of `stat`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn moments(&mut self, x: &Self::Value, stat: Shape) -> Result<[Self::Value; 4], Self::Error> {
        let s = self.shape_of(x);
        let n = s.elems() / stat.elems().max(1);
        let sum = self.sum_to(x, stat)?;
        let count = self.fill(n as f32, stat)?;
        let mean = self.div(&sum, &count)?;
        let mean_b = self.broadcast(&mean, s)?;
        let d = self.sub(x, &mean_b)?;
        let dd = self.mul(&d, &d)?;
        let squares = self.sum_to(&dd, stat)?;
        let var = self.div(&squares, &count)?;
        Ok([mean, d, squares, var])
    }
    /// `old · keep + new · take` (a running statistic's update).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn lerp_stat(
        &mut self,
        old: &Self::Value,
        new: &Self::Value,
        keep: f32,
        take: f32,
    ) -> Result<Self::Value, Self::Error> {
        let a = self.scale(old, keep)?;
        let b = self.scale(new, take)?;
        self.add(&a, &b)
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

/// The running statistics' update of batch normalization in training mode, in PyTorch's or
/// ONNX's convention. The two differ in what `momentum` weighs and in the variance:
/// - PyTorch (`nn.BatchNorm*`, default `momentum = 0.1`): `running = (1 − momentum) · running +
///   momentum · stat`, the running variance from the unbiased batch variance `s / (n − 1)`;
/// - ONNX (`BatchNormalization`, default `momentum = 0.9`): `running = running · momentum +
///   stat · (1 − momentum)` (momentum is the weight of the old value), the running variance from
///   the population (biased) variance `s / n`.
///
/// PyTorch's `momentum = None` (a cumulative average) is not provided.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RunningStats {
    /// PyTorch's convention.
    PyTorch {
        /// The weight of the new batch statistic.
        momentum: f32,
    },
    /// ONNX's convention.
    Onnx {
        /// The weight of the old running value.
        momentum: f32,
    },
}

/// What [`Recordable::batch_norm_train`] answers: the normalized output and the new running
/// statistics, to be written back to the persistent region by the caller.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchNormTrain<V> {
    /// The normalized, affine output, of `x`'s shape.
    pub y: V,
    /// The new running mean, `[C]`.
    pub running_mean: V,
    /// The new running variance, `[C]`.
    pub running_var: V,
}

/// `[1, C, 1, ..]` of `x`'s rank: the shape of per-channel statistics (channels on axis 1).
///
/// # Errors
/// [`OpError::BadTarget`] (naming `sum_to`) for `x` of rank below 2.
fn channel_stat_shape(x: Shape) -> Result<Shape, OpError> {
    let rank = x.rank();
    let bad = OpError::BadTarget {
        op: Opcode::SumTo,
        from: x,
        to: x,
    };
    if rank < 2 {
        return Err(bad);
    }
    let mut dims = [1usize; crate::MAX_RANK];
    dims[1] = x.dim(1).ok_or(bad)?;
    Shape::new(&dims[..rank]).map_err(OpError::Shape)
}

/// The shapes of reducing `s` over `axes`: the keep-dims shape (extent 1 along each axis) and
/// the shape without those axes (ONNX's `keepdims = 0`).
///
/// # Errors
/// [`OpError::BadTarget`] for an axis not below the rank or given twice.
pub fn reduced_shapes(s: Shape, axes: &[usize]) -> Result<(Shape, Shape), OpError> {
    let bad = OpError::BadTarget {
        op: Opcode::SumTo,
        from: s,
        to: s,
    };
    let mut reduced = [false; crate::MAX_RANK];
    for &a in axes {
        match reduced.get_mut(a) {
            Some(r) if a < s.rank() && !*r => *r = true,
            _ => return Err(bad),
        }
    }
    let d = s.dims();
    let mut kept = d;
    let mut dropped = [0usize; crate::MAX_RANK];
    let mut n = 0;
    for k in 0..s.rank() {
        if reduced[k] {
            kept[k] = 1;
        } else {
            dropped[n] = d[k];
            n += 1;
        }
    }
    Ok((Shape::new(&kept[..s.rank()])?, Shape::new(&dropped[..n])?))
}

/// `reduce` to the keep-dims shape of `axes`, then (unless `keepdims`) a reshape that drops
/// them: the body of [`Recordable::sum_axes`] and its siblings.
fn reduce_axes<R: Recordable + ?Sized>(
    r: &mut R,
    x: &R::Value,
    axes: &[usize],
    keepdims: bool,
    reduce: impl FnOnce(&mut R, &R::Value, Shape) -> Result<R::Value, R::Error>,
) -> Result<R::Value, R::Error> {
    let (kept, dropped) = reduced_shapes(r.shape_of(x), axes)?;
    let y = reduce(r, x, kept)?;
    if keepdims {
        Ok(y)
    } else {
        r.reshape(&y, dropped)
    }
}
