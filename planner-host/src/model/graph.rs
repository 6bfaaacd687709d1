//! The general model: what every way in becomes before a training job is built from it.
//!
//! A model enters as a Rust layer stack, an ONNX forward graph or a hand-recorded tape; each is a
//! [`Model`]: named persistent tensors (PyTorch's `state_dict` keys and layouts) with their
//! initial values, named data inputs, and a forward computation the job records on its tape as
//! often as its entries need it (inference at the plan's batch and at batch 1, training mode
//! with dropout and batch statistics). The job adds the loss, the recorded gradient of the
//! trainable subset and the optimizer's update, and plans the entries. Nothing downstream knows
//! which way the model came in.

use tapeplan_core::{NodeId, Shape, Tape, TapeError};

/// Which forward a recording is for (PyTorch's `module.train()` / `module.eval()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Training: dropout draws, batch normalization uses the batch's statistics and updates its
    /// running statistics (buffers).
    Train,
    /// Inference: no dropout, batch normalization uses its running statistics.
    Eval,
}

/// What a persistent tensor of a model is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A parameter (PyTorch's `nn.Parameter`): differentiated and updated by the optimizer when
    /// it is in the trainable subset.
    Parameter,
    /// A buffer (PyTorch's `register_buffer`: batch normalization's `running_mean`,
    /// `running_var`, `num_batches_tracked`): never differentiated; a [`Mode::Train`] forward
    /// may give it a new value ([`Forward::buffer_updates`]). It lives in the persistent region
    /// and travels with the parameters in checkpoints and exported `state_dict`s.
    Buffer,
}

/// A persistent tensor of a model: its name, shape, kind and initial value.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamSpec {
    /// The name, as PyTorch's `state_dict` names it (`features.0.weight`, `fc.bias`,
    /// `bn1.running_mean`); at most 24 bytes (the plan format's names).
    pub name: String,
    /// The shape, in PyTorch's layout (`nn.Linear.weight` is `[out_features, in_features]`,
    /// `nn.Conv2d.weight` is `[out_channels, in_channels / groups, kH, kW]`).
    pub shape: Shape,
    /// Parameter or buffer.
    pub kind: ParamKind,
    /// The initial value, row-major, `shape.elems()` elements.
    pub init: Vec<f32>,
}

/// A data input of a model at a given batch size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSpec {
    /// The name (`x` for a single input, the ONNX graph input's name for an imported model).
    pub name: String,
    /// The shape at the batch size asked for (the batch is dimension 0).
    pub shape: Shape,
}

/// The generator state dropout draws from: two scalar leaves of the persistent region, the key
/// and a counter the job advances by one every training step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RngLeaves {
    /// The generator's key.
    pub key: NodeId,
    /// The step counter.
    pub counter: NodeId,
}

/// What one recording of the forward computation is given.
#[derive(Clone, Copy, Debug)]
pub struct ForwardCx<'a> {
    /// The batch size.
    pub batch: usize,
    /// Training or inference.
    pub mode: Mode,
    /// The input leaves, in [`Model::inputs`] order, with the shapes it gives at `batch`.
    pub inputs: &'a [NodeId],
    /// The persistent leaves (parameters and buffers), in [`Model::parameters`] order.
    pub params: &'a [NodeId],
    /// The generator, present when [`Model::uses_rng`] and `mode` is [`Mode::Train`].
    pub rng: Option<RngLeaves>,
}

/// One recording of the forward computation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forward {
    /// The model's output (logits, or the prediction of a regression), `[batch, …]`.
    pub output: NodeId,
    /// New values of buffers (index into [`Model::parameters`], value) after a [`Mode::Train`]
    /// forward; empty for [`Mode::Eval`].
    pub buffer_updates: Vec<(usize, NodeId)>,
}

/// Why a model could not describe or record itself.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A tape error (a shape rule refused an instruction).
    #[error("tape: {0}")]
    Tape(#[from] TapeError),
    /// An ONNX graph that cannot be translated.
    #[error("onnx: {0}")]
    Onnx(#[from] crate::model::onnx::OnnxError),
    /// A model description that is invalid (a layer whose widths do not chain, a name that does
    /// not fit, a batch the model cannot take).
    #[error("{0}")]
    Invalid(String),
}

/// A model: persistent tensors, data inputs and a forward computation recorded on a tape.
///
/// The three ways in implement it: the layer API (`crate::model::nn`, coming), an ONNX graph
/// ([`crate::model::onnx`]) and the multilayer perceptron of `--layers` ([`crate::model::Mlp`]).
pub trait Model {
    /// The persistent tensors, in the order [`ForwardCx::params`] passes their leaves.
    ///
    /// # Errors
    /// [`ModelError`] when the model is invalid.
    fn parameters(&self) -> Result<Vec<ParamSpec>, ModelError>;

    /// The data inputs at batch size `batch`.
    ///
    /// # Errors
    /// [`ModelError`] when the model cannot take that batch.
    fn inputs(&self, batch: usize) -> Result<Vec<InputSpec>, ModelError>;

    /// Whether a [`Mode::Train`] forward draws random numbers (dropout).
    fn uses_rng(&self) -> bool {
        false
    }

    /// Records the forward computation on `tape` over the given leaves.
    ///
    /// # Errors
    /// [`ModelError`] when a shape rule refuses an instruction.
    fn record(&self, tape: &mut Tape, cx: &ForwardCx<'_>) -> Result<Forward, ModelError>;
}
