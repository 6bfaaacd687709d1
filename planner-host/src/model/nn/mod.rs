//! The layer API: PyTorch-style layers stacked in a [`Sequential`], which is a [`Model`].
//!
//! ```
//! use tapeplan_planner::model::nn::{Conv1d, Flatten, Linear, ReLU, Sequential};
//! use tapeplan_planner::model::Model;
//!
//! // Greydanus's MNIST-1D CNN: [1, 40] → 25 × [19] → 25 × [10] → 25 × [5] → 10 logits.
//! let cnn = Sequential::new(&[1, 40])
//!     .push(Conv1d::new(1, 25, 5).stride(2).padding(1))
//!     .push(ReLU)
//!     .push(Conv1d::new(25, 25, 3).stride(2).padding(1))
//!     .push(ReLU)
//!     .push(Conv1d::new(25, 25, 3).stride(2).padding(1))
//!     .push(ReLU)
//!     .push(Flatten)
//!     .push(Linear::new(125, 10))
//!     .seed(7);
//! assert_eq!(cnn.output_shape().unwrap(), vec![10]);
//! let names: Vec<String> = cnn.parameters().unwrap().into_iter().map(|p| p.name).collect();
//! assert_eq!(names[0], "0.weight");
//! assert_eq!(names[7], "7.bias");
//! ```
//!
//! Every layer knows its output shape from its input shape (PyTorch's documented formulas), its
//! persistent tensors (named as PyTorch's `state_dict` names them, in PyTorch's layouts, with
//! PyTorch's default initialization drawn from a seeded [`SplitMix64`]) and how to record its
//! forward computation on a tape in [`Mode::Train`] or [`Mode::Eval`]. Shapes here are
//! **without** the batch dimension, as PyTorch's layer arguments are (`Conv1d` takes `[C, L]`
//! per sample); the model's input `x` is `[batch, …input_shape]`.
//!
//! Initialization draws one stream, seeded by [`Sequential::seed`], in parameter order then
//! row-major order, so a model and a seed fix every initial value.
//!
//! A `state_dict` key longer than the plan format's 24 bytes (`features.10.block.0.weight`)
//! takes its shortened plan name ([`crate::model::names::plan_name`]); [`Sequential::names`]
//! maps the keys to the plan names.

mod activation;
mod conv;
mod dropout;
mod embedding;
mod linear;
mod norm;
mod pool;
mod reshape;

#[cfg(test)]
mod tests;

use std::fmt;

use tapeplan_core::{NodeId, Recordable, Shape, Tape, Trace};

use crate::model::graph::{
    Forward, ForwardCx, InputSpec, Mode, Model, ModelError, ParamKind, ParamSpec, RngLeaves,
};
use crate::protocol::{SplitMix64, INPUT_X};

pub use activation::{
    Hardsigmoid, Hardswish, Hardtanh, LeakyReLU, LogSoftmax, ReLU, ReLU6, SiLU, Sigmoid, Softmax,
    Softplus, Tanh, GELU,
};
pub use conv::{Conv1d, Conv2d};
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use linear::Linear;
pub use norm::{BatchNorm1d, BatchNorm2d, LayerNorm};
pub use pool::{
    AdaptiveAvgPool1d, AdaptiveAvgPool2d, AvgPool1d, AvgPool2d, GlobalAvgPool, MaxPool1d, MaxPool2d,
};
pub use reshape::{Flatten, Identity};

/// The plan format's longest name, in bytes.
pub const MAX_NAME_BYTES: usize = crate::model::names::NAME_BYTES;

/// How many dropout streams a model may have: a dropout layer draws from the generator's stream
/// `counter · DROPOUT_STREAMS + k` (`k` its index among the model's dropout layers), as the
/// `--layers` MLP's dropout does, so every layer and every step gets its own mask.
pub const DROPOUT_STREAMS: usize = 16;

/// A persistent tensor of one layer, named locally (`weight`, `bias`, `running_mean`); the
/// [`Sequential`] prefixes the layer's name (`0.weight`, `features.3.bias`).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerParam {
    /// The local name, as PyTorch's module names its attribute.
    pub name: String,
    /// The shape, in PyTorch's layout.
    pub shape: Vec<usize>,
    /// Parameter or buffer.
    pub kind: ParamKind,
    /// The initial value, row-major.
    pub init: Vec<f32>,
}

/// What one layer's recording is given besides its input and its persistent leaves.
#[derive(Clone, Copy, Debug)]
pub struct LayerCx {
    /// Training or inference.
    pub mode: Mode,
    /// The generator (present in [`Mode::Train`] when the model draws).
    pub rng: Option<RngLeaves>,
    /// The first dropout stream of this layer (see [`DROPOUT_STREAMS`]).
    pub stream: usize,
}

/// One layer's recorded forward.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerOutput {
    /// The output.
    pub y: NodeId,
    /// New values of the layer's buffers (index into its [`Layer::parameters`], value).
    pub buffer_updates: Vec<(usize, NodeId)>,
}

impl LayerOutput {
    /// An output with no buffer update.
    pub fn of(y: NodeId) -> LayerOutput {
        LayerOutput {
            y,
            buffer_updates: Vec::new(),
        }
    }
}

/// A layer: a shape rule, persistent tensors and a recorded forward.
pub trait Layer: fmt::Debug {
    /// PyTorch's class name (`Linear`, `Conv1d`), for error messages.
    fn kind(&self) -> &'static str;

    /// The output shape of one sample of shape `input` (no batch dimension).
    ///
    /// # Errors
    /// A message saying what does not fit (the [`Sequential`] adds the layer's name).
    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String>;

    /// The persistent tensors for an input of shape `input` (no batch), their initial values
    /// drawn from `rng` in order.
    ///
    /// # Errors
    /// As [`Layer::output_shape`].
    fn parameters(&self, input: &[usize], rng: &mut SplitMix64) -> Result<Vec<LayerParam>, String>;

    /// How many dropout streams the layer draws from in [`Mode::Train`].
    fn dropout_streams(&self) -> usize {
        0
    }

    /// Records the forward of `x: [batch, …input]` over the layer's persistent leaves
    /// (`params`, in [`Layer::parameters`] order).
    ///
    /// # Errors
    /// [`ModelError`] when a shape rule refuses an instruction.
    fn forward(
        &self,
        t: &mut Trace<'_>,
        x: NodeId,
        params: &[NodeId],
        cx: &LayerCx,
    ) -> Result<LayerOutput, ModelError>;
}

/// A sequence of named layers, each fed the previous one's output (PyTorch's `nn.Sequential`).
///
/// Layers pushed with [`Sequential::push`] are named by their position (`0`, `1`, …), as
/// `nn.Sequential(…)` names them; [`Sequential::push_named`] gives a name (`fc`, `features`),
/// as an `OrderedDict` does. A Sequential is itself a layer: nested ones prefix their
/// parameters (`features.0.weight`).
#[derive(Debug, Default)]
pub struct Sequential {
    input_shape: Option<Vec<usize>>,
    layers: Vec<(String, Box<dyn Layer>)>,
    seed: u64,
}

impl Sequential {
    /// An empty model whose samples have shape `input_shape` (no batch dimension: `[1, 40]` for
    /// a one-channel signal of 40 samples, `[64]` for 64 features).
    pub fn new(input_shape: &[usize]) -> Sequential {
        Sequential {
            input_shape: Some(input_shape.to_vec()),
            layers: Vec::new(),
            seed: 0,
        }
    }

    /// An empty block to nest in another Sequential (its input shape is what the outer one
    /// feeds it).
    pub fn block() -> Sequential {
        Sequential::default()
    }

    /// Appends a layer named by its position.
    pub fn push(self, layer: impl Layer + 'static) -> Sequential {
        let name = self.layers.len().to_string();
        self.push_named(&name, layer)
    }

    /// Appends a layer under `name` (a `state_dict` key prefix, e.g. `fc`).
    pub fn push_named(mut self, name: &str, layer: impl Layer + 'static) -> Sequential {
        self.layers.push((name.to_string(), Box::new(layer)));
        self
    }

    /// The seed of the initialization stream (default 0).
    pub fn seed(mut self, seed: u64) -> Sequential {
        self.seed = seed;
        self
    }

    /// The persistent tensors as the layers name them (full `state_dict` keys), each with its
    /// [`LayerParam`] renamed to its plan name ([`crate::model::names::plan_name`]).
    ///
    /// # Errors
    /// [`ModelError::Invalid`] for an invalid model or two tensors of one key.
    fn named_parameters(&self) -> Result<Vec<(String, LayerParam)>, ModelError> {
        let input = self.top_input()?;
        let mut rng = SplitMix64::new(self.seed);
        let params = Layer::parameters(self, input, &mut rng).map_err(ModelError::Invalid)?;
        let mut seen = std::collections::BTreeSet::new();
        params
            .into_iter()
            .map(|mut p| {
                if !seen.insert(p.name.clone()) {
                    return Err(ModelError::Invalid(format!(
                        "two parameters are named {:?}: give the layers distinct names",
                        p.name
                    )));
                }
                let full = std::mem::take(&mut p.name);
                p.name = crate::model::names::plan_name(&full);
                Ok((full, p))
            })
            .collect()
    }

    /// The mapping of `state_dict` keys to plan names, in [`Model::parameters`] order; they
    /// differ only for keys over the plan format's 24 bytes, which take
    /// [`crate::model::names::plan_name`] (`features.10.block.0.weight` becomes
    /// `features.10.blo~` and 8 hex digits).
    ///
    /// # Errors
    /// As [`Model::parameters`].
    pub fn names(&self) -> Result<Vec<(String, String)>, ModelError> {
        Ok(self
            .named_parameters()?
            .into_iter()
            .map(|(full, p)| (full, p.name))
            .collect())
    }

    /// The layers' names, in order.
    pub fn layer_names(&self) -> Vec<&str> {
        self.layers.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The output shape of one sample (no batch dimension).
    ///
    /// # Errors
    /// [`ModelError::Invalid`] naming the first layer whose input does not fit, or a model
    /// without an input shape ([`Sequential::block`]).
    pub fn output_shape(&self) -> Result<Vec<usize>, ModelError> {
        let input = self.top_input()?;
        Layer::output_shape(self, input).map_err(ModelError::Invalid)
    }

    fn top_input(&self) -> Result<&[usize], ModelError> {
        self.input_shape.as_deref().ok_or_else(|| {
            ModelError::Invalid(
                "a Sequential used as a model needs its input shape: Sequential::new(&[..])".into(),
            )
        })
    }

    /// The input shape of every layer and the final output shape, checked.
    fn shapes(&self, input: &[usize]) -> Result<Vec<Vec<usize>>, String> {
        if let Some(declared) = &self.input_shape {
            if declared.as_slice() != input {
                return Err(format!(
                    "the block declares input shape {declared:?} but is fed {input:?}"
                ));
            }
        }
        let mut shapes = vec![input.to_vec()];
        let mut s = input.to_vec();
        for (name, layer) in &self.layers {
            s = layer.output_shape(&s).map_err(|e| {
                format!(
                    "layer {name} ({}), input shape {s:?} (without the batch): {e}",
                    layer.kind()
                )
            })?;
            shapes.push(s.clone());
        }
        Ok(shapes)
    }
}

/// Joins a prefix and a local name with a `.` (`features` + `0.weight`).
fn qualified(prefix: &str, name: &str) -> String {
    format!("{prefix}.{name}")
}

impl Layer for Sequential {
    fn kind(&self) -> &'static str {
        "Sequential"
    }

    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        let shapes = self.shapes(input)?;
        Ok(shapes.last().cloned().unwrap_or_default())
    }

    fn parameters(&self, input: &[usize], rng: &mut SplitMix64) -> Result<Vec<LayerParam>, String> {
        let shapes = self.shapes(input)?;
        let mut out = Vec::new();
        for ((name, layer), s) in self.layers.iter().zip(&shapes) {
            for p in layer.parameters(s, rng)? {
                out.push(LayerParam {
                    name: qualified(name, &p.name),
                    ..p
                });
            }
        }
        Ok(out)
    }

    fn dropout_streams(&self) -> usize {
        self.layers.iter().map(|(_, l)| l.dropout_streams()).sum()
    }

    fn forward(
        &self,
        t: &mut Trace<'_>,
        x: NodeId,
        params: &[NodeId],
        cx: &LayerCx,
    ) -> Result<LayerOutput, ModelError> {
        let input = shape_dims(t, x);
        let shapes = self
            .shapes(input.get(1..).unwrap_or(&[]))
            .map_err(ModelError::Invalid)?;
        let mut scratch = SplitMix64::new(0);
        let mut y = x;
        let mut updates = Vec::new();
        let mut offset = 0;
        let mut stream = cx.stream;
        for ((_, layer), s) in self.layers.iter().zip(&shapes) {
            let n = layer
                .parameters(s, &mut scratch)
                .map_err(ModelError::Invalid)?
                .len();
            let mine = params.get(offset..offset + n).ok_or_else(|| {
                ModelError::Invalid(format!(
                    "{} persistent leaves given, the model has more",
                    params.len()
                ))
            })?;
            let lcx = LayerCx { stream, ..*cx };
            let out = layer.forward(t, y, mine, &lcx)?;
            updates.extend(out.buffer_updates.iter().map(|&(i, v)| (offset + i, v)));
            y = out.y;
            offset += n;
            stream += layer.dropout_streams();
        }
        Ok(LayerOutput {
            y,
            buffer_updates: updates,
        })
    }
}

impl Model for Sequential {
    fn parameters(&self) -> Result<Vec<ParamSpec>, ModelError> {
        let mut plan_names = std::collections::BTreeSet::new();
        self.named_parameters()?
            .into_iter()
            .map(|(full, p)| {
                // A `state_dict` key past the plan format's 24 bytes takes its shortened plan
                // name (see `Sequential::names`); two keys may not take one name.
                if !plan_names.insert(p.name.clone()) {
                    return Err(ModelError::Invalid(format!(
                        "the parameter {full:?} takes the plan name {:?} that another already \
                         has (names over {MAX_NAME_BYTES} bytes are shortened): give the layers \
                         other names",
                        p.name
                    )));
                }
                let shape = Shape::new(&p.shape)
                    .map_err(|e| ModelError::Invalid(format!("parameter {:?}: {e}", p.name)))?;
                Ok(ParamSpec {
                    name: p.name,
                    shape,
                    kind: p.kind,
                    init: p.init,
                })
            })
            .collect()
    }

    fn inputs(&self, batch: usize) -> Result<Vec<InputSpec>, ModelError> {
        let input = self.top_input()?;
        if batch == 0 {
            return Err(ModelError::Invalid(
                "the batch size must be at least 1".into(),
            ));
        }
        let mut dims = vec![batch];
        dims.extend_from_slice(input);
        let shape = Shape::new(&dims).map_err(|e| {
            ModelError::Invalid(format!(
                "input [batch {batch}, {input:?}] is not a representable shape: {e}"
            ))
        })?;
        Ok(vec![InputSpec {
            name: INPUT_X.into(),
            shape,
        }])
    }

    fn uses_rng(&self) -> bool {
        self.dropout_streams() > 0
    }

    fn record(&self, tape: &mut Tape, cx: &ForwardCx<'_>) -> Result<Forward, ModelError> {
        let streams = self.dropout_streams();
        if streams > DROPOUT_STREAMS {
            return Err(ModelError::Invalid(format!(
                "{streams} dropout layers; a model may have at most {DROPOUT_STREAMS}"
            )));
        }
        let &[x] = cx.inputs else {
            return Err(ModelError::Invalid(format!(
                "a Sequential takes one input, {} given",
                cx.inputs.len()
            )));
        };
        let input = self.top_input()?;
        let got = tape.shape(x)?;
        let dims = got.dims();
        if got.rank() != input.len() + 1 || dims[1..got.rank()] != *input {
            return Err(ModelError::Invalid(format!(
                "input {got} does not match the model's [batch, {input:?}]"
            )));
        }
        let expected = Model::parameters(self)?.len();
        if cx.params.len() != expected {
            return Err(ModelError::Invalid(format!(
                "{} persistent leaves given, the model has {expected}",
                cx.params.len()
            )));
        }
        let lcx = LayerCx {
            mode: cx.mode,
            rng: cx.rng,
            stream: 0,
        };
        let out = Layer::forward(self, &mut tape.trace(), x, cx.params, &lcx)?;
        Ok(Forward {
            output: out.y,
            buffer_updates: if cx.mode == Mode::Train {
                out.buffer_updates
            } else {
                Vec::new()
            },
        })
    }
}

/// The dims of a recorded node (its shape's, up to the rank).
fn shape_dims(t: &Trace<'_>, x: NodeId) -> Vec<usize> {
    let s = t.shape_of(&x);
    s.dims()[..s.rank()].to_vec()
}

/// `[batch, …dims]` as a shape.
fn batched(batch: usize, dims: &[usize]) -> Result<Shape, ModelError> {
    let mut all = vec![batch];
    all.extend_from_slice(dims);
    Shape::new(&all).map_err(|e| ModelError::Invalid(format!("shape {all:?}: {e}")))
}

/// PyTorch's default weight and bias initialization of `nn.Linear` and `nn.ConvNd`
/// (`reset_parameters`: `kaiming_uniform_(weight, a=√5)`, whose bound is
/// `gain · √(3 / fan_in)` with `gain = √(2 / (1 + a²)) = √(1/3)`, that is `1 / √fan_in`; the
/// bias `U(−1/√fan_in, 1/√fan_in)`): `n` values `(2u − 1) / √fan_in`, `u` uniform in `[0, 1)`
/// from `rng` ([`SplitMix64::next_f32`]). `fan_in` is `in_features` for `Linear` and
/// `in_channels / groups · kernel elements` for convolutions; a zero `fan_in` gives zeros, as
/// PyTorch's `init` does nothing to a bias then.
pub fn uniform_fan_in(n: usize, fan_in: usize, rng: &mut SplitMix64) -> Vec<f32> {
    if fan_in == 0 {
        return vec![0.0; n];
    }
    let bound = 1.0 / (fan_in as f32).sqrt();
    (0..n)
        .map(|_| (2.0 * rng.next_f32() - 1.0) * bound)
        .collect()
}

/// Standard normal draws (PyTorch's `nn.Embedding` initializes its weight `N(0, 1)`), by the
/// Box–Muller transform (Box & Muller, 1958): from two uniforms `u₁, u₂` of
/// [`SplitMix64::next_f32`], `z = √(−2 ln(1 − u₁)) · cos(2π u₂)` computed in `f64` with `libm`
/// (the same bits on every host) and rounded to `f32`; one normal per pair of draws.
pub fn standard_normal(n: usize, rng: &mut SplitMix64) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let u1 = f64::from(rng.next_f32());
            let u2 = f64::from(rng.next_f32());
            let radius = libm::sqrt(-2.0 * libm::log(1.0 - u1));
            (radius * libm::cos(2.0 * std::f64::consts::PI * u2)) as f32
        })
        .collect()
}

/// The `i`-th persistent leaf of a layer, or an error naming the layer.
fn leaf(params: &[NodeId], i: usize, layer: &str) -> Result<NodeId, ModelError> {
    params.get(i).copied().ok_or_else(|| {
        ModelError::Invalid(format!(
            "{layer} got {} persistent leaves, needs more",
            params.len()
        ))
    })
}

/// The element count of a persistent tensor of extents `dims`, checked before its initial
/// value is drawn: every extent at least 1 (a zero-width layer has nothing to train and the
/// plan format holds no empty tensor) and at most [`tapeplan_core::MAX_TENSOR_ELEMS`] elements
/// in all, so that a hostile width is an error and not an allocation of terabytes.
///
/// # Errors
/// A message naming the extents and the bound.
fn checked_elems(dims: &[usize]) -> Result<usize, String> {
    if dims.contains(&0) {
        return Err(format!(
            "a persistent tensor of extents {dims:?} is empty: every width must be at least 1"
        ));
    }
    dims.iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|&n| n <= tapeplan_core::MAX_TENSOR_ELEMS)
        .ok_or_else(|| {
            format!(
                "a persistent tensor of extents {dims:?} exceeds {} elements",
                tapeplan_core::MAX_TENSOR_ELEMS
            )
        })
}

/// A parameter of `shape` with `init`.
fn param(name: &str, shape: Vec<usize>, init: Vec<f32>) -> LayerParam {
    LayerParam {
        name: name.into(),
        shape,
        kind: ParamKind::Parameter,
        init,
    }
}

/// A buffer of `shape` with `init`.
fn buffer(name: &str, shape: Vec<usize>, init: Vec<f32>) -> LayerParam {
    LayerParam {
        name: name.into(),
        shape,
        kind: ParamKind::Buffer,
        init,
    }
}

/// The single dim of a one-dimensional input, or an error naming what was expected.
fn expect_rank(input: &[usize], ranks: &[usize], what: &str) -> Result<(), String> {
    if ranks.contains(&input.len()) {
        Ok(())
    } else {
        Err(format!(
            "expects {what} (rank {ranks:?} without the batch), got rank {}",
            input.len()
        ))
    }
}

/// `value` as a `u16` pool extent, or an error naming it.
fn pool_u16(value: usize, what: &str) -> Result<u16, String> {
    u16::try_from(value).map_err(|_| format!("{what} {value} exceeds {}", u16::MAX))
}

/// `value` as a `u32` convolution extent, or an error naming it.
fn conv_u32(value: usize, what: &str) -> Result<u32, String> {
    u32::try_from(value).map_err(|_| format!("{what} {value} exceeds {}", u32::MAX))
}

/// PyTorch's output extent of a convolution or pooling window along one axis (the `Shape`
/// formula of `nn.Conv1d`, `nn.MaxPool1d`, …, floor mode): `⌊(len + 2·pad − dilation·(k − 1)
/// − 1) / stride⌋ + 1`, or an error when the window does not fit.
fn window_extent(
    len: usize,
    kernel: usize,
    stride: usize,
    pad: usize,
    dilation: usize,
) -> Result<usize, String> {
    if kernel == 0 || stride == 0 || dilation == 0 {
        return Err(format!(
            "kernel {kernel}, stride {stride} and dilation {dilation} must be at least 1"
        ));
    }
    let span = dilation * (kernel - 1) + 1;
    let padded = len + 2 * pad;
    if padded < span {
        return Err(format!(
            "a window of {span} (kernel {kernel}, dilation {dilation}) does not fit an extent \
             of {len} padded by {pad} on each side"
        ));
    }
    Ok((padded - span) / stride + 1)
}
