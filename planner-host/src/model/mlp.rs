//! Model building: multilayer perceptrons, their losses, and seeded initialization, written
//! against [`Recordable`] so the same code records a tape or computes values.

use tapeplan_core::{NodeId, Recordable, Reduction, Shape, Tape, TapeError};

use crate::model::graph::{
    Forward, ForwardCx, InputSpec, Mode, Model, ModelError, ParamKind, ParamSpec,
};
use crate::protocol::{glorot_uniform_fill, SplitMix64, INPUT_LABELS, INPUT_X, INPUT_Y};

/// A hidden layer's activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `tanh`.
    Tanh,
    /// `relu`.
    Relu,
}

impl Activation {
    /// Applies the activation.
    ///
    /// # Errors
    /// The payload's.
    pub fn apply<R: Recordable>(self, r: &mut R, x: &R::Value) -> Result<R::Value, R::Error> {
        match self {
            Activation::Tanh => r.tanh(x),
            Activation::Relu => r.relu(x),
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Tanh => "tanh",
            Activation::Relu => "relu",
        }
    }
}

/// The loss a training step minimizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Softmax cross-entropy over integer class labels, mean over the batch (PyTorch's
    /// `nn.CrossEntropyLoss` with `reduction='mean'`).
    SoftmaxCrossEntropy,
    /// Mean squared error over every output element (PyTorch's `nn.MSELoss`, `reduction='mean'`).
    MeanSquaredError,
    /// Binary cross-entropy of logits against targets in `[0, 1]` of the output's shape, mean
    /// over every element (PyTorch's `nn.BCEWithLogitsLoss`, `reduction='mean'`, no weights):
    /// `max(x, 0) − x·z + log1p(exp(−|x|))` per element (the `bce_with_logits` instruction).
    BceWithLogits,
    /// Mean absolute error over every output element (PyTorch's `nn.L1Loss`,
    /// `reduction='mean'`): `sum(|pred − target|) / n`.
    L1,
}

impl Loss {
    /// The name of the target input: `labels` for cross-entropy, `y` for the others.
    pub fn target_name(self) -> &'static str {
        match self {
            Loss::SoftmaxCrossEntropy => INPUT_LABELS,
            _ => INPUT_Y,
        }
    }

    /// The target's shape for a model output of shape `output`.
    ///
    /// # Shapes
    /// Cross-entropy: `output` is `[batch, classes]`, the target `[batch]` (class indices
    /// stored as `f32`); the others: the target has the output's shape.
    ///
    /// # Errors
    /// [`ModelError::Invalid`] when cross-entropy is asked of an output that is not
    /// `[batch, classes]`.
    pub fn target_shape(self, output: Shape) -> Result<Shape, ModelError> {
        match self {
            Loss::SoftmaxCrossEntropy => match (output.rank(), output.dim(0)) {
                (2, Some(batch)) => Ok(Shape::vector(batch)),
                _ => Err(ModelError::Invalid(format!(
                    "cross-entropy needs a [batch, classes] output, the model answers {output:?}"
                ))),
            },
            _ => Ok(output),
        }
    }

    /// The command-line name: `ce`, `mse`, `bce` or `l1`.
    pub fn name(self) -> &'static str {
        match self {
            Loss::SoftmaxCrossEntropy => "ce",
            Loss::MeanSquaredError => "mse",
            Loss::BceWithLogits => "bce",
            Loss::L1 => "l1",
        }
    }
}

/// A multilayer perceptron: dense layers `sizes[0] -> sizes[1] -> … -> sizes[n]`, the
/// activation after every layer but the last.
#[derive(Clone, Debug, PartialEq)]
pub struct Mlp {
    /// Layer widths, the input width first and the output width last.
    pub sizes: Vec<usize>,
    /// The hidden activation.
    pub activation: Activation,
}

/// A dense layer's parameter handles (or values).
#[derive(Clone, Debug)]
pub struct Dense<V> {
    /// The weight, `[d_in, d_out]` (so a layer is `x · w + b`; PyTorch's `nn.Linear.weight` is
    /// its transpose).
    pub weight: V,
    /// The bias, `[d_out]`.
    pub bias: V,
}

impl Mlp {
    /// Checks that every tensor of this model at batch size `batch` has a representable shape
    /// (at most 2^28 elements), so building it cannot fail half way.
    ///
    /// # Errors
    /// [`tapeplan_core::ShapeError`] naming what is too large.
    pub fn check(&self, batch: usize) -> Result<(), tapeplan_core::ShapeError> {
        for pair in self.sizes.windows(2) {
            Shape::new(&[pair[0], pair[1]])?;
            Shape::new(&[batch, pair[0]])?;
            Shape::new(&[batch, pair[1]])?;
        }
        Ok(())
    }

    /// The parameter names and shapes in order: `w1, b1, w2, b2, …`.
    ///
    /// # Panics
    /// When a weight has more than 2^28 elements; [`Mlp::check`] first.
    pub fn parameter_shapes(&self) -> Vec<(String, Shape)> {
        let mut out = Vec::new();
        for (l, pair) in self.sizes.windows(2).enumerate() {
            out.push((format!("w{}", l + 1), Shape::matrix(pair[0], pair[1])));
            out.push((format!("b{}", l + 1), Shape::vector(pair[1])));
        }
        out
    }

    /// Records the parameters as leaves of `tape`, in [`Mlp::parameter_shapes`] order.
    pub fn record_parameters(&self, tape: &mut Tape) -> Vec<NodeId> {
        self.parameter_shapes()
            .into_iter()
            .map(|(name, shape)| tape.parameter(&name, shape))
            .collect()
    }

    /// The logits `[batch, d_out]` of `x: [batch, d_in]`.
    ///
    /// # Shapes
    /// `x: [batch, sizes[0]]`, `params` in [`Mlp::parameter_shapes`] order; answers
    /// `[batch, sizes[last]]`.
    ///
    /// # Errors
    /// Shape errors of the payload.
    pub fn logits<R: Recordable>(
        &self,
        r: &mut R,
        x: &R::Value,
        params: &[R::Value],
    ) -> Result<R::Value, R::Error> {
        let layers = params.len() / 2;
        let mut h = x.clone();
        for l in 0..layers {
            let (w, b) = (&params[2 * l], &params[2 * l + 1]);
            let z = r.matmul(&h, w)?;
            let zs = r.shape_of(&z);
            let bb = r.broadcast(b, zs)?;
            let z = r.add(&z, &bb)?;
            h = if l + 1 < layers {
                self.activation.apply(r, &z)?
            } else {
                z
            };
        }
        Ok(h)
    }
}

/// Softmax cross-entropy of `logits: [batch, classes]` against integer `labels: [batch]`
/// (stored as `f32`), averaged over the batch.
///
/// Spoken as a composition: the row maximum is subtracted through `detach` (the max-shift that
/// keeps `exp` finite, and that contributes no gradient since softmax is shift-invariant), then
/// `log_softmax = s - log(sum(exp(s)))`, the label's entry picked by a one-hot product, and the
/// mean taken as `sum * (-1 / batch)`.
///
/// # Errors
/// Shape errors of the payload.
pub fn softmax_cross_entropy<R: Recordable>(
    r: &mut R,
    logits: &R::Value,
    labels: &R::Value,
) -> Result<R::Value, R::Error> {
    let shape = r.shape_of(logits);
    let (batch, classes) = (shape.dim(0).unwrap_or(0), shape.dim(1).unwrap_or(0));
    let col = Shape::matrix(batch, 1);
    let m = r.max_to(logits, col)?;
    let m = r.detach(&m)?;
    let mb = r.broadcast(&m, shape)?;
    let s = r.sub(logits, &mb)?;
    let e = r.exp(&s)?;
    let se = r.sum_to(&e, col)?;
    let lse = r.log(&se)?;
    let lse_b = r.broadcast(&lse, shape)?;
    let logp = r.sub(&s, &lse_b)?;
    let onehot = r.one_hot(labels, classes)?;
    let picked = r.mul(&onehot, &logp)?;
    let total = r.sum_all(&picked)?;
    r.scale(&total, -1.0 / batch as f32)
}

/// Mean squared error of `pred` against `target` (same shapes): `sum((pred - target)²) / n`,
/// spoken as `sum * (1 / n)`.
///
/// # Errors
/// Shape errors of the payload.
pub fn mean_squared_error<R: Recordable>(
    r: &mut R,
    pred: &R::Value,
    target: &R::Value,
) -> Result<R::Value, R::Error> {
    let n = r.shape_of(pred).elems();
    let d = r.sub(pred, target)?;
    let dd = r.mul(&d, &d)?;
    let total = r.sum_all(&dd)?;
    r.scale(&total, 1.0 / n as f32)
}

/// Glorot (Xavier) uniform initialization (Glorot & Bengio, AISTATS 2010; PyTorch's
/// `nn.init.xavier_uniform_`): each weight of a `[fan_in, fan_out]` matrix is
/// `(2u - 1) · sqrt(6 / (fan_in + fan_out))` with `u` uniform in `[0, 1)` from a SplitMix64
/// stream seeded with `seed`, drawn in parameter order then row-major order; biases are zero.
/// Training state ([`crate::model::names::is_training_state`] over the names of `shapes`) gets
/// zeros and draws nothing: its initial values come from the plan's `init` entry.
pub fn glorot_uniform(shapes: &[(String, Shape)], seed: u64) -> Vec<Vec<f32>> {
    let mut rng = SplitMix64::new(seed);
    let all: Vec<&str> = shapes.iter().map(|(n, _)| n.as_str()).collect();
    shapes
        .iter()
        .map(|(name, s)| {
            if s.rank() == 2 && !crate::model::names::is_training_state(name, &all) {
                let [fan_in, fan_out, _, _] = s.dims();
                let mut w = vec![0.0; s.elems()];
                glorot_uniform_fill(&mut rng, fan_in, fan_out, &mut w);
                w
            } else {
                vec![0.0; s.elems()]
            }
        })
        .collect()
}

/// The inputs of a training tape.
#[derive(Clone, Debug)]
pub struct TrainInputs {
    /// The features, `[batch, d_in]`, named `x`.
    pub x: NodeId,
    /// The targets, named `labels` (`[batch]` class indices) or `y` (`[batch, d_out]`).
    pub target: NodeId,
}

/// Where dropout draws from: the probability and the generator's key and counter (scalars in
/// the persistent region).
#[derive(Clone, Debug)]
pub struct Dropout<V> {
    /// The probability of dropping an element.
    pub p: f32,
    /// The generator's key.
    pub key: V,
    /// The generator's counter (advanced by one every training step).
    pub counter: V,
}

impl Mlp {
    /// The logits with dropout after every hidden activation (training mode), each layer drawing
    /// from the counter plus its layer index, so layers get different masks.
    ///
    /// # Shapes
    /// As [`Mlp::logits`].
    ///
    /// # Errors
    /// Shape errors of the payload.
    pub fn logits_with_dropout<R: Recordable>(
        &self,
        r: &mut R,
        x: &R::Value,
        params: &[R::Value],
        dropout: &Dropout<R::Value>,
    ) -> Result<R::Value, R::Error> {
        let layers = params.len() / 2;
        let mut h = x.clone();
        for l in 0..layers {
            let (w, b) = (&params[2 * l], &params[2 * l + 1]);
            let z = r.matmul(&h, w)?;
            let zs = r.shape_of(&z);
            let bb = r.broadcast(b, zs)?;
            let z = r.add(&z, &bb)?;
            h = if l + 1 < layers {
                let a = self.activation.apply(r, &z)?;
                // Stream (key, counter · 16 + l): distinct per layer and per step.
                let sixteen = r.fill(16.0, Shape::SCALAR)?;
                let base = r.mul(&dropout.counter, &sixteen)?;
                let layer = r.fill(l as f32, Shape::SCALAR)?;
                let c = r.add(&base, &layer)?;
                r.dropout(&a, dropout.p, &dropout.key, &c)?
            } else {
                z
            };
        }
        Ok(h)
    }
}

/// The loss of `logits` against `target`.
///
/// # Errors
/// Shape errors of the payload.
pub fn loss_of<R: Recordable>(
    r: &mut R,
    loss: Loss,
    logits: &R::Value,
    target: &R::Value,
) -> Result<R::Value, R::Error> {
    match loss {
        Loss::SoftmaxCrossEntropy => softmax_cross_entropy(r, logits, target),
        Loss::MeanSquaredError => mean_squared_error(r, logits, target),
        Loss::BceWithLogits => r.binary_cross_entropy_with_logits(logits, target, Reduction::Mean),
        Loss::L1 => r.l1_loss(logits, target, Reduction::Mean),
    }
}

/// Records a model's inputs (`x`, and `labels` or `y`) on a tape.
pub fn record_inputs(tape: &mut Tape, mlp: &Mlp, loss: Loss, batch: usize) -> TrainInputs {
    let d_in = mlp.sizes[0];
    let d_out = *mlp.sizes.last().unwrap_or(&0);
    let x = tape.input(INPUT_X, Shape::matrix(batch, d_in));
    let target = match loss {
        Loss::SoftmaxCrossEntropy => tape.input(INPUT_LABELS, Shape::vector(batch)),
        _ => tape.input(INPUT_Y, Shape::matrix(batch, d_out)),
    };
    TrainInputs { x, target }
}

/// Records a model's loss on a fresh tape: inputs, parameters, logits and loss.
///
/// # Errors
/// Shape errors while recording.
pub fn record_loss(
    tape: &mut Tape,
    mlp: &Mlp,
    loss: Loss,
    batch: usize,
) -> Result<(TrainInputs, Vec<NodeId>, NodeId, NodeId), TapeError> {
    let inputs = record_inputs(tape, mlp, loss, batch);
    let params = mlp.record_parameters(tape);
    let mut t = tape.trace();
    let logits = mlp.logits(&mut t, &inputs.x, &params)?;
    let l = loss_of(&mut t, loss, &logits, &inputs.target)?;
    Ok((inputs, params, logits, l))
}

/// An [`Mlp`] as a [`Model`], with dropout and a seeded initialization.
///
/// Parameters `w1, b1, w2, b2, …` (weights `[d_in, d_out]`, so a layer is `x · w + b`;
/// biases `[d_out]`), initialized by [`glorot_uniform`] from `init_seed`; one input `x:
/// [batch, d_in]`; the output is the logits `[batch, d_out]`. In [`Mode::Train`] with
/// `dropout > 0`, dropout follows every hidden activation ([`Mlp::logits_with_dropout`]).
/// Recorded through the general job, it gives the same tape and plan bytes as the `--layers`
/// MLP always had.
#[derive(Clone, Debug, PartialEq)]
pub struct MlpModel {
    /// The layers.
    pub mlp: Mlp,
    /// The dropout probability after every hidden activation in training mode (0: none).
    pub dropout: f32,
    /// The seed of the Glorot initialization ([`glorot_uniform`]).
    pub init_seed: u64,
}

impl Mlp {
    /// This MLP as a [`Model`] with dropout probability `dropout` and Glorot initialization
    /// seeded with `init_seed`.
    pub fn model(&self, dropout: f32, init_seed: u64) -> MlpModel {
        MlpModel {
            mlp: self.clone(),
            dropout,
            init_seed,
        }
    }
}

impl Model for MlpModel {
    fn parameters(&self) -> Result<Vec<ParamSpec>, ModelError> {
        if self.mlp.sizes.len() < 2 {
            return Err(ModelError::Invalid(format!(
                "an MLP needs at least an input and an output width, found {:?}",
                self.mlp.sizes
            )));
        }
        self.mlp
            .check(1)
            .map_err(|e| ModelError::Invalid(format!("MLP {:?}: {e}", self.mlp.sizes)))?;
        let shapes = self.mlp.parameter_shapes();
        let init = glorot_uniform(&shapes, self.init_seed);
        Ok(shapes
            .into_iter()
            .zip(init)
            .map(|((name, shape), init)| ParamSpec {
                name,
                shape,
                kind: ParamKind::Parameter,
                init,
            })
            .collect())
    }

    fn inputs(&self, batch: usize) -> Result<Vec<InputSpec>, ModelError> {
        self.mlp
            .check(batch)
            .map_err(|e| ModelError::Invalid(format!("MLP at batch {batch}: {e}")))?;
        let d_in = self.mlp.sizes.first().copied().unwrap_or(0);
        Ok(vec![InputSpec {
            name: INPUT_X.into(),
            shape: Shape::new(&[batch, d_in])
                .map_err(|e| ModelError::Invalid(format!("MLP at batch {batch}: {e}")))?,
        }])
    }

    fn uses_rng(&self) -> bool {
        self.dropout > 0.0
    }

    fn record(&self, tape: &mut Tape, cx: &ForwardCx<'_>) -> Result<Forward, ModelError> {
        let [x] = cx.inputs else {
            return Err(ModelError::Invalid(format!(
                "an MLP takes one input, given {}",
                cx.inputs.len()
            )));
        };
        let mut t = tape.trace();
        let output = match (cx.mode, cx.rng) {
            (Mode::Train, Some(rng)) if self.dropout > 0.0 => {
                let d = Dropout {
                    p: self.dropout,
                    key: rng.key,
                    counter: rng.counter,
                };
                self.mlp.logits_with_dropout(&mut t, x, cx.params, &d)?
            }
            _ => self.mlp.logits(&mut t, x, cx.params)?,
        };
        Ok(Forward {
            output,
            buffer_updates: Vec::new(),
        })
    }
}

/// The MLP without dropout, initialized by [`glorot_uniform`] with seed 0: [`Mlp::model`]`(0.0,
/// 0)`.
impl Model for Mlp {
    fn parameters(&self) -> Result<Vec<ParamSpec>, ModelError> {
        self.model(0.0, 0).parameters()
    }

    fn inputs(&self, batch: usize) -> Result<Vec<InputSpec>, ModelError> {
        self.model(0.0, 0).inputs(batch)
    }

    fn record(&self, tape: &mut Tape, cx: &ForwardCx<'_>) -> Result<Forward, ModelError> {
        self.model(0.0, 0).record(tape, cx)
    }
}
