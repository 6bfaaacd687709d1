//! `Recordable`: the vocabulary a rule body speaks, with one payload per reading.
//!
//! The forward meaning of an instruction ([`crate::Opcode::express`]) and its reverse rule
//! ([`crate::Opcode::vjp`]) are written once, against this trait, never against numbers. Two
//! payloads implement it in this crate (with `alloc`): the compute payload (`Run`'s tensors,
//! whose reverse walk is the oracle) and the record payload ([`crate::Trace`], whose values are
//! handles and whose every operation appends a node to a tape).

use crate::ops::OpError;
use crate::{Attr, PoolWindow};
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
