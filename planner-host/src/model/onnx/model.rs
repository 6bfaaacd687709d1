//! An ONNX forward graph as a [`Model`]: what `tapeplan plan --onnx` trains.
//!
//! - **Parameters** are the `FLOAT` initializers the graph uses as data, under their ONNX names,
//!   which `torch.onnx.export` makes the `state_dict` keys (`fc1.weight`, `features.0.bias`).
//!   A name longer than the plan format's 24 bytes is shortened ([`state_name`]: its first 15
//!   bytes, `~`, and 8 hex digits of a hash of the whole name); [`OnnxModel::names`] keeps the
//!   mapping.
//! - **Buffers**: `BatchNormalization`'s running statistics (its inputs 3 and 4), and the
//!   tensors of `Constant` nodes used as data that are not one value repeated (those become a
//!   `fill`): never differentiated, never trained.
//! - **Modes**: an exported graph is an inference graph (`BatchNormalization` with
//!   `training_mode=0`). [`Mode::Eval`] records it as it says: batch normalization normalizes
//!   with the running statistics and changes nothing. [`Mode::Train`] records it as PyTorch's
//!   `module.train()` runs the model it came from, and as ONNX Runtime's training runs the same
//!   graph (its training graph swaps in a training-mode batch normalization; checked by
//!   `tests/library/onnx_ort.rs`): batch normalization normalizes with the batch's statistics, and the
//!   running statistics' new values are [`Forward::buffer_updates`], in ONNX's convention (the
//!   node's `momentum` weighs the old value; the biased batch variance), which is what the
//!   node computes with `training_mode=1`.
//! - **Inputs** are the graph inputs used as data, with the named (`dim_param`) dimension 0
//!   given the batch at record time. A single data input is named `x` in the plan (the name
//!   [`Model::inputs`] gives a single input, which `tapeplan train`, `verify` and the devices
//!   set); several keep their ONNX names ([`state_name`]). [`OnnxModel::names`] maps them. An
//!   `INT64` input (token ids) is an `f32` input holding integers, exact up to 2^24.
//! - **The output** is the graph's first output.
//!
//! Shape arithmetic (`Shape`, `Gather`, `Concat` of shapes, `Reshape`) is folded at record
//! time, so the same graph is recorded at any batch.
//!
//! # Shapes
//! As the graph declares them, dimension 0 of every data input being the batch: a named
//! dimension (`dim_param`, the same name for every input), or a fixed extent that is then the
//! only batch the model takes.

use std::collections::{BTreeMap, BTreeSet};

use tapeplan_core::{NodeId, Shape, Tape};

use super::proto::{tensor_shape_proto::dimension::Value as Dim, type_proto, ModelProto};
use super::translate::{translate, translate_into, TranslateOptions};
use super::{read_model, OnnxError};
use crate::model::graph::{
    Forward, ForwardCx, InputSpec, Mode, Model, ModelError, ParamKind, ParamSpec,
};

/// The plan format's longest name, in bytes.
pub const MAX_NAME_BYTES: usize = crate::model::names::NAME_BYTES;

/// The name a persistent tensor or input of ONNX name `onnx_name` takes in a plan: the name
/// itself when it fits [`MAX_NAME_BYTES`], else shortened (`crate::model::names::plan_name`,
/// the rule every way in shares: the first at most 15 bytes, `~`, 8 hex digits of a hash).
pub use crate::model::names::plan_name as state_name;

/// A persistent tensor of an [`OnnxModel`]: its ONNX name and its description.
#[derive(Clone, Debug, PartialEq)]
pub struct OnnxParam {
    /// The initializer's (or `Constant` output's) ONNX name.
    pub onnx_name: String,
    /// Name (the ONNX name, or its [`state_name`]), shape, kind and initial value.
    pub spec: ParamSpec,
}

/// A data input of an [`OnnxModel`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OnnxInput {
    /// The graph input's ONNX name.
    pub onnx_name: String,
    /// Its name in a plan: `x` for a model's single data input, else [`state_name`] of the
    /// ONNX name.
    pub name: String,
    /// Its extents after dimension 0 (the batch).
    pub rest: Vec<usize>,
    /// Its ONNX element type (`FLOAT`, or `INT64` for ids held as `f32` integers).
    pub data_type: i32,
}

/// An ONNX forward graph as a [`Model`] (see the module's documentation).
#[derive(Clone, Debug)]
pub struct OnnxModel {
    proto: ModelProto,
    /// The named batch dimension, or `None` when dimension 0 is fixed.
    batch_dim: Option<String>,
    /// The fixed batch, when dimension 0 is not named.
    fixed_batch: Option<usize>,
    params: Vec<OnnxParam>,
    inputs: Vec<OnnxInput>,
    output: String,
    /// [`OnnxModel::eval_frozen_batch_norm`]'s trained initializers (ONNX names).
    eval_frozen_batch_norm: Option<BTreeSet<String>>,
    /// The nodes [`OnnxModel::eval_frozen_batch_norm`] applies to.
    eval_batch_norm_nodes: Vec<String>,
}

impl OnnxModel {
    /// Reads an `.onnx` file's bytes.
    ///
    /// # Errors
    /// As [`read_model`] and [`OnnxModel::new`].
    pub fn from_bytes(bytes: &[u8]) -> Result<OnnxModel, ModelError> {
        OnnxModel::new(read_model(bytes)?)
    }

    /// A model of a decoded graph: translates it once at batch 1 to find which initializers
    /// and constants it uses as data (its parameters and buffers) and which inputs.
    ///
    /// # Errors
    /// [`ModelError::Onnx`] for a graph the translation refuses (an unsupported operator names
    /// the node, the operator and what is supported); [`ModelError::Invalid`] for a graph with
    /// no output, inputs whose dimension 0 disagree, or two names shortened alike.
    pub fn new(proto: ModelProto) -> Result<OnnxModel, ModelError> {
        let graph = proto
            .graph
            .as_ref()
            .ok_or_else(|| OnnxError::Model("the model has no graph".into()))?;
        let output = graph
            .output
            .first()
            .map(|o| o.name().to_owned())
            .ok_or_else(|| ModelError::Invalid("the ONNX graph has no output".into()))?;
        let initializers: Vec<&str> = graph.initializer.iter().map(|i| i.name()).collect();
        let mut batch_dim: Option<String> = None;
        let mut fixed_batch: Option<usize> = None;
        let mut declared = Vec::new();
        for input in &graph.input {
            let name = input.name();
            if initializers.contains(&name) {
                continue;
            }
            let Some(type_proto::Value::TensorType(t)) =
                input.r#type.as_ref().and_then(|t| t.value.as_ref())
            else {
                return Err(ModelError::Invalid(format!(
                    "ONNX graph input {name:?} is not a tensor"
                )));
            };
            let dims = t.shape.as_ref().map(|s| s.dim.as_slice()).unwrap_or(&[]);
            let Some((first, rest)) = dims.split_first() else {
                return Err(ModelError::Invalid(format!(
                    "ONNX graph input {name:?} has no batch dimension (rank 0 or no shape)"
                )));
            };
            match &first.value {
                Some(Dim::DimParam(p)) => {
                    if batch_dim.get_or_insert_with(|| p.clone()) != p {
                        return Err(ModelError::Invalid(format!(
                            "ONNX graph input {name:?}: batch dimension {p:?}, another input's is \
                             {:?} (every input's dimension 0 is the one batch)",
                            batch_dim.as_deref().unwrap_or("")
                        )));
                    }
                }
                Some(Dim::DimValue(v)) => {
                    let v = usize::try_from(*v).map_err(|_| {
                        ModelError::Invalid(format!("ONNX graph input {name:?}: extent {v}"))
                    })?;
                    if *fixed_batch.get_or_insert(v) != v {
                        return Err(ModelError::Invalid(format!(
                            "ONNX graph input {name:?}: dimension 0 is {v}, another input's {}",
                            fixed_batch.unwrap_or(0)
                        )));
                    }
                }
                None => {
                    return Err(ModelError::Invalid(format!(
                        "ONNX graph input {name:?}: dimension 0 has no extent and no name"
                    )))
                }
            }
            let rest = rest
                .iter()
                .map(|d| match &d.value {
                    Some(Dim::DimValue(v)) => usize::try_from(*v).ok(),
                    _ => None,
                })
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| {
                    ModelError::Invalid(format!(
                        "ONNX graph input {name:?}: only dimension 0 (the batch) may be named \
                         or unknown"
                    ))
                })?;
            declared.push(OnnxInput {
                onnx_name: name.to_owned(),
                name: state_name(name),
                rest,
                data_type: t.elem_type(),
            });
        }
        if batch_dim.is_some() && fixed_batch.is_some() {
            return Err(ModelError::Invalid(
                "ONNX graph inputs: one input's batch is named, another's fixed".into(),
            ));
        }
        let probe = fixed_batch.unwrap_or(1);
        let mut options = TranslateOptions::default();
        if let Some(b) = &batch_dim {
            options.dim_params.insert(b.clone(), probe);
        }
        let t = translate(&proto, &options)?;
        let mut params = Vec::with_capacity(t.parameters.len());
        for p in &t.parameters {
            let kind = if p.trainable {
                ParamKind::Parameter
            } else {
                ParamKind::Buffer
            };
            params.push(OnnxParam {
                onnx_name: p.onnx_name.clone(),
                spec: ParamSpec {
                    name: state_name(&p.onnx_name),
                    shape: p.shape,
                    kind,
                    init: p.value.clone(),
                },
            });
        }
        // Only the inputs the forward reads, in the graph's order; a single one is `x`.
        declared.retain(|d| t.inputs.iter().any(|i| i.onnx_name == d.onnx_name));
        if let [only] = declared.as_mut_slice() {
            only.name = crate::protocol::INPUT_X.to_owned();
        }
        let mut names: Vec<&str> = params
            .iter()
            .map(|p| p.spec.name.as_str())
            .chain(declared.iter().map(|d| d.name.as_str()))
            .collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(ModelError::Invalid(format!(
                "two ONNX names take the plan name {:?} (shortened to 24 bytes)",
                w[0]
            )));
        }
        Ok(OnnxModel {
            proto,
            batch_dim,
            fixed_batch,
            params,
            inputs: declared,
            output,
            eval_frozen_batch_norm: None,
            eval_batch_norm_nodes: Vec::new(),
        })
    }

    /// Records each `BatchNormalization` of a frozen block as in inference in [`Mode::Train`]
    /// too: where neither its scale nor its bias is trained (`trainable`, the job's flag per
    /// persistent tensor in [`Model::parameters`] order, as
    /// [`crate::model::trainable_subset`] gives it), it normalizes with its running statistics
    /// and leaves them unchanged, as PyTorch's `backbone.eval()` does when a frozen backbone is
    /// fine-tuned. Without this (the default) every batch normalization trains on the batch's
    /// statistics, as ONNX Runtime's training does. Answers the nodes it applies to (their
    /// names, or `#index` for a node without one); none is not an error here.
    ///
    /// # Errors
    /// [`ModelError::Invalid`] when `trainable` does not have one flag per persistent tensor.
    pub fn eval_frozen_batch_norm(
        &mut self,
        trainable: &[bool],
    ) -> Result<Vec<String>, ModelError> {
        if trainable.len() != self.params.len() {
            return Err(ModelError::Invalid(format!(
                "{} trainable flags for {} persistent tensors",
                trainable.len(),
                self.params.len()
            )));
        }
        let trained: BTreeSet<String> = self
            .params
            .iter()
            .zip(trainable)
            .filter(|(_, &t)| t)
            .map(|(p, _)| p.onnx_name.clone())
            .collect();
        let graph = self.proto.graph.as_ref();
        let nodes = graph.map(|g| g.node.as_slice()).unwrap_or(&[]);
        // `Identity` outputs name their source (as the translation resolves them).
        let alias: BTreeMap<String, String> = nodes
            .iter()
            .filter(|n| n.op_type() == "Identity")
            .filter_map(|n| Some((n.output.first()?.clone(), n.input.first()?.clone())))
            .collect();
        let source = |name: &String| {
            let mut name = name.clone();
            for _ in 0..alias.len() {
                match alias.get(&name) {
                    Some(s) => name = s.clone(),
                    None => break,
                }
            }
            name
        };
        let frozen = |n: &super::proto::NodeProto, i: usize| {
            n.input
                .get(i)
                .is_some_and(|x| !trained.contains(&source(x)))
        };
        let applies: Vec<String> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.op_type() == "BatchNormalization")
            .filter(|(_, n)| {
                !n.attribute
                    .iter()
                    .any(|a| a.name() == "training_mode" && a.i() != 0)
            })
            .filter(|(_, n)| frozen(n, 1) && frozen(n, 2))
            .map(|(k, n)| {
                if n.name().is_empty() {
                    format!("#{k}")
                } else {
                    n.name().to_owned()
                }
            })
            .collect();
        self.eval_frozen_batch_norm = Some(trained);
        self.eval_batch_norm_nodes.clone_from(&applies);
        Ok(applies)
    }

    /// The `BatchNormalization` nodes recorded as in inference in [`Mode::Train`]
    /// ([`OnnxModel::eval_frozen_batch_norm`]); empty by default.
    pub fn batch_norm_in_eval(&self) -> &[String] {
        &self.eval_batch_norm_nodes
    }

    /// The persistent tensors with their ONNX names, in [`Model::parameters`] order.
    pub fn params(&self) -> &[OnnxParam] {
        &self.params
    }

    /// The data inputs, in [`Model::inputs`] order.
    pub fn data_inputs(&self) -> &[OnnxInput] {
        &self.inputs
    }

    /// The mapping of ONNX names to plan names (persistent tensors, then inputs); they differ
    /// only for names over 24 bytes ([`state_name`]).
    pub fn names(&self) -> Vec<(String, String)> {
        self.params
            .iter()
            .map(|p| (p.onnx_name.clone(), p.spec.name.clone()))
            .chain(
                self.inputs
                    .iter()
                    .map(|i| (i.onnx_name.clone(), i.name.clone())),
            )
            .collect()
    }

    /// The graph output the forward returns (the graph's first).
    pub fn output_name(&self) -> &str {
        &self.output
    }

    /// The named batch dimension (`dim_param`), if dimension 0 is named.
    pub fn batch_dim(&self) -> Option<&str> {
        self.batch_dim.as_deref()
    }

    /// The initial values of every persistent tensor (parameters and buffers) as a safetensors
    /// file, keyed by ONNX name (the `state_dict` key: a plan's name is [`state_name`] of it),
    /// `F32`, in PyTorch's layouts (ONNX's initializers have them), metadata `format = pt`:
    /// what `torch.load_state_dict` and tapeplan's import read.
    ///
    /// # Errors
    /// [`ModelError::Invalid`] when safetensors refuses a tensor (it does not for a valid
    /// model).
    pub fn initial_safetensors(&self) -> Result<Vec<u8>, ModelError> {
        use safetensors::tensor::{Dtype, TensorView};
        let bytes: Vec<Vec<u8>> = self
            .params
            .iter()
            .map(|p| p.spec.init.iter().flat_map(|v| v.to_le_bytes()).collect())
            .collect();
        let invalid =
            |e: safetensors::SafeTensorError| ModelError::Invalid(format!("safetensors: {e}"));
        let views = self
            .params
            .iter()
            .zip(&bytes)
            .map(|(p, b)| {
                let dims = p.spec.shape.dims()[..p.spec.shape.rank()].to_vec();
                TensorView::new(Dtype::F32, dims, b).map(|v| (p.onnx_name.as_str(), v))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(invalid)?;
        let meta = std::collections::HashMap::from([("format".to_owned(), "pt".to_owned())]);
        safetensors::serialize(views, Some(meta)).map_err(invalid)
    }

    /// The decoded graph.
    pub fn proto(&self) -> &ModelProto {
        &self.proto
    }

    fn check_batch(&self, batch: usize) -> Result<(), ModelError> {
        if batch == 0 {
            return Err(ModelError::Invalid("the batch must be at least 1".into()));
        }
        match self.fixed_batch {
            Some(b) if b != batch => Err(ModelError::Invalid(format!(
                "the ONNX graph's inputs fix the batch at {b} (dimension 0 is a number, not a \
                 name), so it cannot be planned at batch {batch}: plan it with --batch {b}, or \
                 export the model with a named batch dimension (torch.onnx.export(..., \
                 dynamic_axes={{\"input\": {{0: \"batch\"}}}}))"
            ))),
            _ => Ok(()),
        }
    }
}

impl Model for OnnxModel {
    fn parameters(&self) -> Result<Vec<ParamSpec>, ModelError> {
        Ok(self.params.iter().map(|p| p.spec.clone()).collect())
    }

    fn inputs(&self, batch: usize) -> Result<Vec<InputSpec>, ModelError> {
        self.check_batch(batch)?;
        self.inputs
            .iter()
            .map(|i| {
                let mut dims = vec![batch];
                dims.extend(&i.rest);
                let shape = Shape::new(&dims).map_err(|e| {
                    ModelError::Invalid(format!("ONNX input {:?}: {e}", i.onnx_name))
                })?;
                Ok(InputSpec {
                    name: i.name.clone(),
                    shape,
                })
            })
            .collect()
    }

    /// Records the graph over the given leaves, in [`Mode::Train`] with batch normalization in
    /// training mode (see the module's documentation).
    fn record(&self, tape: &mut Tape, cx: &ForwardCx<'_>) -> Result<Forward, ModelError> {
        self.check_batch(cx.batch)?;
        if cx.params.len() != self.params.len() || cx.inputs.len() != self.inputs.len() {
            return Err(ModelError::Invalid(format!(
                "ONNX model: {} parameter and {} input leaves given, the model has {} and {}",
                cx.params.len(),
                cx.inputs.len(),
                self.params.len(),
                self.inputs.len()
            )));
        }
        let mut bound: BTreeMap<String, NodeId> = BTreeMap::new();
        for (p, &leaf) in self.params.iter().zip(cx.params) {
            bound.insert(p.onnx_name.clone(), leaf);
        }
        for (i, &leaf) in self.inputs.iter().zip(cx.inputs) {
            bound.insert(i.onnx_name.clone(), leaf);
        }
        let mut options = TranslateOptions {
            bound,
            training: cx.mode == Mode::Train,
            eval_frozen_batch_norm: self.eval_frozen_batch_norm.clone(),
            ..TranslateOptions::default()
        };
        if let Some(b) = &self.batch_dim {
            options.dim_params.insert(b.clone(), cx.batch);
        }
        let r = translate_into(&self.proto, &options, tape)?;
        if let Some(p) = r.parameters.first() {
            return Err(ModelError::Invalid(format!(
                "ONNX model: at batch {} the graph uses {:?} as data, which it did not at batch \
                 1",
                cx.batch, p.onnx_name
            )));
        }
        if let Some(i) = r.inputs.first() {
            return Err(ModelError::Invalid(format!(
                "ONNX model: at batch {} the graph reads input {:?}, which it did not at batch 1",
                cx.batch, i.onnx_name
            )));
        }
        let output = r
            .outputs
            .iter()
            .find(|o| o.onnx_name == self.output)
            .ok_or_else(|| {
                ModelError::Invalid(format!(
                    "ONNX graph output {:?} is not computed on the tape (it is known at plan time)",
                    self.output
                ))
            })?;
        let mut buffer_updates = Vec::with_capacity(r.buffer_updates.len());
        for &(leaf, value) in &r.buffer_updates {
            if let Some(k) = cx.params.iter().position(|&p| p == leaf) {
                buffer_updates.push((k, value));
            }
        }
        Ok(Forward {
            output: output.node,
            buffer_updates,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use tapeplan_core::{Run, Tensor};

    use super::*;
    use crate::model::trainable_subset;

    /// `tests/data/onnx/cnn2d_bn.onnx` (`scripts/onnx_models.py`): Conv2d → BatchNorm2d →
    /// ReLU → MaxPool2d → Linear, batch `N`.
    const CNN2D_BN: &[u8] = include_bytes!("../../../tests/data/onnx/cnn2d_bn.onnx");

    /// The forward's output bits and buffer updates at batch 2 in `mode`, over the model's
    /// initial values and a fixed input.
    fn forward(m: &OnnxModel, mode: Mode) -> (Vec<u32>, usize) {
        let specs = m.parameters().unwrap();
        let inputs = m.inputs(2).unwrap();
        let mut tape = Tape::new();
        let xs: Vec<NodeId> = inputs
            .iter()
            .map(|i| tape.input(&i.name, i.shape))
            .collect();
        let leaves: Vec<NodeId> = specs
            .iter()
            .map(|s| tape.parameter(&s.name, s.shape))
            .collect();
        let fwd = m
            .record(
                &mut tape,
                &ForwardCx {
                    batch: 2,
                    mode,
                    inputs: &xs,
                    params: &leaves,
                    rng: None,
                },
            )
            .unwrap();
        let mut run = Run::new(&tape);
        let n = inputs[0].shape.elems();
        let x: Vec<f32> = (0..n)
            .map(|k| ((k * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        run.set(xs[0], Tensor::new(inputs[0].shape, x).unwrap())
            .unwrap();
        for (leaf, spec) in leaves.iter().zip(&specs) {
            run.set(*leaf, Tensor::new(spec.shape, spec.init.clone()).unwrap())
                .unwrap();
        }
        run.forward().unwrap();
        let y = run.value(fwd.output).unwrap();
        let bits = y.data.iter().map(|v| v.to_bits()).collect();
        (bits, fwd.buffer_updates.len())
    }

    #[test]
    fn a_frozen_batch_norm_trains_with_its_running_statistics_when_asked() {
        let mut m = OnnxModel::from_bytes(CNN2D_BN).unwrap();
        let (eval, eval_updates) = forward(&m, Mode::Eval);
        let (train, train_updates) = forward(&m, Mode::Train);
        assert_eq!(eval_updates, 0);
        assert_eq!(train_updates, 2, "running mean and variance");
        assert_ne!(
            train, eval,
            "batch statistics differ from the running ones here"
        );

        let specs = m.parameters().unwrap();
        // Only the classifier trains: the block's scale and bias are frozen.
        let head = trainable_subset(&specs, &["fc.*".to_owned()], &[]).unwrap();
        let nodes = m.eval_frozen_batch_norm(&head).unwrap();
        assert_eq!(nodes, ["/bn/BatchNormalization"]);
        assert_eq!(m.batch_norm_in_eval(), nodes.as_slice());
        let (frozen_train, frozen_updates) = forward(&m, Mode::Train);
        assert_eq!(
            frozen_train, eval,
            "train_step normalizes as inference does"
        );
        assert_eq!(frozen_updates, 0, "the running statistics stay as they are");

        // The block's scale trained: it trains on the batch's statistics again.
        let bn_trained =
            trainable_subset(&specs, &["fc.*".to_owned(), "bn.weight".to_owned()], &[]).unwrap();
        assert!(m.eval_frozen_batch_norm(&bn_trained).unwrap().is_empty());
        assert_eq!(forward(&m, Mode::Train), (train, 2));
        assert!(
            m.eval_frozen_batch_norm(&head[1..]).is_err(),
            "one flag per tensor"
        );
    }
}
