//! The graph → tape translation: the graph's values (inputs, initializers, `Constant` nodes,
//! node outputs) as tape nodes or as values known at plan time, and [`NodeCx`], what one
//! operator's translation (a row of [`super::ops::OPERATORS`]) speaks.
//!
//! A value is *known* when it is an initializer, a `Constant` node's tensor, a graph input whose
//! value the caller gives ([`TranslateOptions::known`]) or what an operator computes from known
//! values (`Shape`). Where an operator takes a constant (`Reshape`'s shape, `Slice`'s starts,
//! `Pow`'s exponent, the reductions' axes), the value must be known; where it takes data, a known
//! value becomes a tape leaf the first time data is asked of it: an input for a graph input, a
//! parameter for an initializer or a `Constant` (a `fill` when every element is the same).
//!
//! Tape values have at most [`MAX_RANK`] = 4 axes (the plan format's). A rank-5 value
//! `[N, C, D, H, W]` is held as the rank-4 `[N·C, D, H, W]` ([`fold_rank5`]: the same elements
//! in the same order), its ONNX extents kept beside it; only 3-D pooling reads it
//! ([`NodeCx::data_rank5`], [`NodeCx::set_output_rank5`]), every other read of it is an
//! [`OnnxError::Unsupported`] naming the rank.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use tapeplan_core::{Attr, NodeId, Opcode, Shape, Tape, TapeError, Trace, MAX_RANK};

use super::proto::{tensor_proto::DataType, GraphProto, ModelProto, NodeProto};
use super::tensor::{data_type_name, Elements, TensorData};
use super::{ops, OnnxError};

/// `FLOAT`'s `DataType` code: the element type of every tape value.
pub const FLOAT: i32 = DataType::Float as i32;
/// `BOOL`'s `DataType` code: masks (`0`/`1` in `f32` on the tape).
pub const BOOL: i32 = DataType::Bool as i32;
/// `INT64`'s `DataType` code: indices (`gather`'s input, `argmax`'s output), integers stored
/// as `f32` on the tape (exact up to `2^24`).
pub const INT64: i32 = DataType::Int64 as i32;
/// `INT32`'s `DataType` code (indices too).
pub const INT32: i32 = DataType::Int32 as i32;

/// What the translation is told besides the model.
#[derive(Clone, Debug, Default)]
pub struct TranslateOptions {
    /// Values of graph inputs known at plan time. Such an input may stand where an operator
    /// needs a constant; where it is used as data it is still a tape input (set at run time).
    /// The conformance harness gives every test input here.
    pub known: BTreeMap<String, TensorData>,
    /// Extents of named (`dim_param`) dimensions, e.g. the batch: `{"N": 32}`.
    pub dim_params: BTreeMap<String, usize>,
    /// Leaves already on the tape ([`translate_into`]) that stand for graph inputs and
    /// initializers, by ONNX name: the translation reads them instead of recording new leaves,
    /// so that a forward recorded twice (at two batch sizes) shares its parameters. A bound
    /// leaf's shape must be the value's.
    pub bound: BTreeMap<String, NodeId>,
    /// Record as PyTorch's `module.train()` runs the model it was exported from:
    /// `BatchNormalization` nodes with `training_mode=0` normalize with the batch's statistics
    /// and give new running statistics ([`Recorded::buffer_updates`]), as with
    /// `training_mode=1` (ONNX's definition: `momentum` weighs the old value, the biased batch
    /// variance). ONNX Runtime's training does the same with such a graph. Off (the default),
    /// the graph is recorded as it says.
    pub training: bool,
    /// With [`TranslateOptions::training`], the ONNX names of the initializers being trained:
    /// a `BatchNormalization` whose scale and bias are both outside this set (a frozen block)
    /// is recorded as in inference, normalizing with its running statistics and leaving them
    /// unchanged (PyTorch's `backbone.eval()` for fine-tuning a frozen backbone). `None`, the
    /// default: every batch normalization trains on the batch's statistics.
    pub eval_frozen_batch_norm: Option<BTreeSet<String>>,
}

/// A graph input that became a tape input.
#[derive(Clone, Debug)]
pub struct BoundInput {
    /// The ONNX name.
    pub onnx_name: String,
    /// The tape leaf's name (the ONNX name when it fits the plan format's 24 bytes, else
    /// `input<k>`).
    pub tape_name: String,
    /// The leaf.
    pub node: NodeId,
    /// Its shape on the tape (a rank-5 input `[N, C, D, H, W]` folded to `[N·C, D, H, W]`:
    /// the same elements in the same order, see [`fold_rank5`]).
    pub shape: Shape,
    /// Its ONNX extents (those of `shape` but for a folded rank-5 input).
    pub dims: Vec<usize>,
}

/// An initializer (or a `Constant` node's tensor) that became a tape parameter.
#[derive(Clone, Debug)]
pub struct BoundParameter {
    /// The ONNX name.
    pub onnx_name: String,
    /// The tape leaf's name (as for [`BoundInput::tape_name`]).
    pub tape_name: String,
    /// The leaf.
    pub node: NodeId,
    /// Its shape.
    pub shape: Shape,
    /// Its initial value.
    pub value: Vec<f32>,
    /// False for a `Constant` node's tensor (a constant of the graph, not a weight to train)
    /// and for a buffer.
    pub trainable: bool,
    /// True for a running statistic of `BatchNormalization` (its inputs 3 and 4): a buffer
    /// (PyTorch's `running_mean` and `running_var`), not a weight.
    pub buffer: bool,
}

/// A graph output.
#[derive(Clone, Debug)]
pub struct BoundOutput {
    /// Its position among the graph's outputs.
    pub index: usize,
    /// The ONNX name.
    pub onnx_name: String,
    /// The node holding it.
    pub node: NodeId,
    /// Its ONNX extents: the node's shape, but for a rank-5 output (a 3-D pooling's), which
    /// the tape holds folded (see [`fold_rank5`]): the same elements in the same order.
    pub dims: Vec<usize>,
    /// Its ONNX element type (`FLOAT`, or `BOOL` for a comparison's mask, `0`/`1` on the tape).
    pub data_type: i32,
}

/// How a translation's leaves and outputs relate to the graph's names ([`translate_into`]).
#[derive(Debug)]
pub struct Recorded {
    /// The graph inputs used as data that became new input leaves (not those
    /// [`TranslateOptions::bound`] gives), in the graph's order.
    pub inputs: Vec<BoundInput>,
    /// The initializers and constants used as data that became new parameter leaves (not those
    /// [`TranslateOptions::bound`] gives).
    pub parameters: Vec<BoundParameter>,
    /// The graph outputs computed on the tape, in the graph's order.
    pub outputs: Vec<BoundOutput>,
    /// The graph outputs of integer type known at plan time (shape arithmetic: `Shape`, …),
    /// with their positions among the graph's outputs; not on the tape.
    pub folded_outputs: Vec<(usize, String, TensorData)>,
    /// The ONNX names of the values read through the leaves [`TranslateOptions::bound`] gives.
    pub bound_used: Vec<String>,
    /// The ONNX names of the values used as `BatchNormalization`'s running statistics
    /// (buffers), bound or not.
    pub buffers: Vec<String>,
    /// With [`TranslateOptions::training`]: the buffers' new values, `(leaf, new value)`.
    pub buffer_updates: Vec<(NodeId, NodeId)>,
    /// The default domain's opset version the model imports.
    pub opset: i64,
}

/// A translated graph: the tape, and how its leaves and outputs relate to the graph's names.
#[derive(Debug)]
pub struct Translation {
    /// The forward computation.
    pub tape: Tape,
    /// The graph inputs used as data, in the graph's order.
    pub inputs: Vec<BoundInput>,
    /// The initializers and constants used as data.
    pub parameters: Vec<BoundParameter>,
    /// The graph outputs computed on the tape, in the graph's order.
    pub outputs: Vec<BoundOutput>,
    /// The graph outputs of integer type known at plan time (shape arithmetic: `Shape`, …),
    /// with their positions among the graph's outputs; not on the tape.
    pub folded_outputs: Vec<(usize, String, TensorData)>,
    /// The default domain's opset version the model imports.
    pub opset: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    Input,
    Initializer,
    Constant,
    Computed,
}

#[derive(Clone, Debug)]
struct Slot {
    origin: Origin,
    data_type: i32,
    /// The value, when known at plan time.
    known: Option<TensorData>,
    /// The tape node holding it, once data was asked of it.
    node: Option<NodeId>,
    /// The declared shape of a graph input with no known value.
    declared: Option<Shape>,
    /// For an alias (`Identity`) of a value with no tape node yet: the value it names, whose
    /// leaf (under the original name) it shares once data is asked of either.
    source: Option<String>,
    /// The ONNX extents of a rank-5 value held on the tape folded ([`fold_rank5`]): a declared
    /// graph input or a pooling's output. `None` for every other value (a known value's
    /// extents are its data's).
    onnx_dims: Option<Vec<usize>>,
}

impl Slot {
    /// The ONNX extents `[N, C, D, H, W]` of a rank-5 value, which the tape holds folded as
    /// `[N·C, D, H, W]`; `None` for a value of rank at most 4 (its extents are the tape's).
    fn rank5_dims(&self) -> Option<Vec<usize>> {
        self.onnx_dims.clone().or_else(|| {
            self.known
                .as_ref()
                .filter(|k| k.dims.len() == 5)
                .map(|k| k.dims.clone())
        })
    }
}

/// The translation's state while it walks the nodes.
pub struct Translator {
    tape: Tape,
    slots: HashMap<String, Slot>,
    opset: i64,
    inputs: Vec<BoundInput>,
    parameters: Vec<BoundParameter>,
    leaf_names: HashSet<String>,
    bound: BTreeMap<String, NodeId>,
    bound_used: Vec<String>,
    buffers: Vec<String>,
    training: bool,
    eval_frozen_batch_norm: Option<BTreeSet<String>>,
    buffer_updates: Vec<(NodeId, NodeId)>,
}

/// The default domain's opset version of a model (`""` or `ai.onnx`).
///
/// # Errors
/// [`OnnxError::Model`] when the model imports no default-domain opset.
pub fn default_opset(model: &ModelProto) -> Result<i64, OnnxError> {
    model
        .opset_import
        .iter()
        .find(|o| matches!(o.domain(), "" | "ai.onnx"))
        .map(|o| o.version())
        .ok_or_else(|| OnnxError::Model("the model imports no opset of the default domain".into()))
}

/// Translates a model's graph into a tape (the forward computation).
///
/// # Errors
/// [`OnnxError::Unsupported`] for an operator, attribute, element type or rank outside the
/// vocabulary (it names the node, the operator and what is supported); [`OnnxError::Model`],
/// [`OnnxError::Tensor`] or [`OnnxError::Node`] for a malformed graph.
pub fn translate(model: &ModelProto, options: &TranslateOptions) -> Result<Translation, OnnxError> {
    let mut tape = Tape::new();
    let r = translate_into(model, options, &mut tape)?;
    Ok(Translation {
        tape,
        inputs: r.inputs,
        parameters: r.parameters,
        outputs: r.outputs,
        folded_outputs: r.folded_outputs,
        opset: r.opset,
    })
}

/// Translates a model's graph onto an existing tape, after what it holds: the graph inputs and
/// initializers that [`TranslateOptions::bound`] names are read through the given leaves, the
/// others become new leaves (named so as not to collide with the tape's leaves). A caller
/// records the same graph twice over the same parameter leaves this way (a forward at the
/// plan's batch and one at batch 1).
///
/// On an error the tape keeps the nodes recorded before it (unreachable from any root the
/// caller holds).
///
/// # Errors
/// As [`translate`]; [`OnnxError::Model`] when a bound leaf's shape is not the value's.
pub fn translate_into(
    model: &ModelProto,
    options: &TranslateOptions,
    tape: &mut Tape,
) -> Result<Recorded, OnnxError> {
    let opset = default_opset(model)?;
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| OnnxError::Model("the model has no graph".into()))?;
    let leaf_names = tape.nodes().iter().filter_map(|n| n.name.clone()).collect();
    let mut tr = Translator {
        tape: std::mem::take(tape),
        slots: HashMap::new(),
        opset,
        inputs: Vec::new(),
        parameters: Vec::new(),
        leaf_names,
        bound: options.bound.clone(),
        bound_used: Vec::new(),
        buffers: Vec::new(),
        training: options.training,
        eval_frozen_batch_norm: options.eval_frozen_batch_norm.clone(),
        buffer_updates: Vec::new(),
    };
    let r = tr.translate_graph(graph, options);
    *tape = std::mem::take(&mut tr.tape);
    let (outputs, folded_outputs) = r?;
    Ok(Recorded {
        inputs: tr.inputs,
        parameters: tr.parameters,
        outputs,
        folded_outputs,
        bound_used: tr.bound_used,
        buffers: tr.buffers,
        buffer_updates: tr.buffer_updates,
        opset,
    })
}

/// A translation's graph outputs: on the tape, and folded.
type Outputs = (Vec<BoundOutput>, Vec<(usize, String, TensorData)>);

impl Translator {
    fn translate_graph(
        &mut self,
        graph: &GraphProto,
        options: &TranslateOptions,
    ) -> Result<Outputs, OnnxError> {
        let tr = self;
        tr.declare_graph(graph, options)?;
        for (index, node) in graph.node.iter().enumerate() {
            let mut cx = NodeCx {
                tr: &mut *tr,
                node,
                index,
            };
            ops::translate_node(&mut cx)?;
        }
        let mut outputs = Vec::new();
        let mut folded_outputs = Vec::new();
        for (k, out) in graph.output.iter().enumerate() {
            let name = out.name();
            let slot = tr.slots.get(name).ok_or_else(|| {
                OnnxError::Model(format!("graph output {name:?} is never computed"))
            })?;
            if let (
                None,
                Some(
                    known @ TensorData {
                        elements: Elements::Int(_),
                        ..
                    },
                ),
            ) = (slot.node, &slot.known)
            {
                folded_outputs.push((k, name.to_owned(), known.clone()));
                continue;
            }
            // The type the translation computed (a comparison's BOOL mask, FLOAT data).
            let data_type = slot.data_type;
            if !matches!(data_type, FLOAT | BOOL | INT64) {
                return Err(OnnxError::Unsupported {
                    node: format!("graph output {name:?}"),
                    op: "output".into(),
                    what: format!("element type {}", data_type_name(data_type)),
                    supported: "FLOAT outputs (BOOL masks as 0/1, INT64 indices as f32 integers)"
                        .into(),
                });
            }
            let rank5 = slot.rank5_dims();
            let mut node = tr.data_of(name, &format!("graph output {k}"))?;
            // A leaf cannot be an entry's output: copy it (bit-exact).
            if matches!(tr.tape.node(node)?.op, Opcode::Input | Opcode::Parameter)
                || outputs.iter().any(|o: &BoundOutput| o.node == node)
            {
                let shape = tr.tape.shape(node)?;
                node = tr
                    .tape
                    .push(Opcode::Reshape, Attr::target(shape), &[node])?;
            }
            let dims = match rank5 {
                Some(d) => d,
                None => dims_of(tr.tape.shape(node)?),
            };
            outputs.push(BoundOutput {
                index: k,
                onnx_name: name.to_owned(),
                node,
                dims,
                data_type,
            });
        }
        Ok((outputs, folded_outputs))
    }

    fn declare_graph(
        &mut self,
        graph: &GraphProto,
        options: &TranslateOptions,
    ) -> Result<(), OnnxError> {
        for init in &graph.initializer {
            let data = TensorData::from_proto(init)?;
            self.slots.insert(
                init.name().to_owned(),
                Slot {
                    origin: Origin::Initializer,
                    data_type: data.data_type,
                    known: Some(data),
                    node: None,
                    declared: None,
                    source: None,
                    onnx_dims: None,
                },
            );
        }
        for input in &graph.input {
            let name = input.name();
            if let Some(data) = options.known.get(name) {
                self.slots.insert(
                    name.to_owned(),
                    Slot {
                        origin: Origin::Input,
                        data_type: data.data_type,
                        known: Some(data.clone()),
                        node: None,
                        declared: None,
                        source: None,
                        onnx_dims: None,
                    },
                );
                continue;
            }
            if self.slots.contains_key(name) {
                // An initializer listed as an input too (IR < 4): its value is its default.
                continue;
            }
            let tensor = input
                .r#type
                .as_ref()
                .and_then(|t| t.value.as_ref())
                .and_then(|v| match v {
                    super::proto::type_proto::Value::TensorType(t) => Some(t),
                    _ => None,
                })
                .ok_or_else(|| OnnxError::Model(format!("graph input {name:?} is not a tensor")))?;
            let mut dims = Vec::new();
            if let Some(shape) = &tensor.shape {
                for d in &shape.dim {
                    use super::proto::tensor_shape_proto::dimension::Value as D;
                    let extent = match &d.value {
                        Some(D::DimValue(v)) => usize::try_from(*v).map_err(|_| {
                            OnnxError::Model(format!("graph input {name:?}: extent {v}"))
                        })?,
                        Some(D::DimParam(p)) => *options.dim_params.get(p).ok_or_else(|| {
                            OnnxError::Model(format!(
                                "graph input {name:?}: the named dimension {p:?} needs an extent \
                                 (TranslateOptions::dim_params)"
                            ))
                        })?,
                        None => {
                            return Err(OnnxError::Model(format!(
                                "graph input {name:?}: a dimension of unknown extent"
                            )))
                        }
                    };
                    dims.push(extent);
                }
            } else {
                return Err(OnnxError::Model(format!(
                    "graph input {name:?} has no shape"
                )));
            }
            let shape = plan_shape_of(&dims).map_err(|why| OnnxError::Unsupported {
                node: format!("graph input {name:?}"),
                op: "input".into(),
                what: why,
                supported: shapes_supported(),
            })?;
            let onnx_dims = (dims.len() == 5).then_some(dims);
            self.slots.insert(
                name.to_owned(),
                Slot {
                    origin: Origin::Input,
                    data_type: tensor.elem_type(),
                    known: None,
                    node: None,
                    declared: Some(shape),
                    source: None,
                    onnx_dims,
                },
            );
        }
        Ok(())
    }

    /// A leaf name that fits the plan format and is not taken.
    fn leaf_name(&mut self, onnx_name: &str, fallback: &str) -> String {
        let fits = !onnx_name.is_empty() && onnx_name.len() <= 24 && !onnx_name.contains('\0');
        let mut name = if fits && !self.leaf_names.contains(onnx_name) {
            onnx_name.to_owned()
        } else {
            let mut k = self.leaf_names.len();
            loop {
                let n = format!("{fallback}{k}");
                if !self.leaf_names.contains(&n) {
                    break n;
                }
                k += 1;
            }
        };
        self.leaf_names.insert(name.clone());
        std::mem::take(&mut name)
    }

    /// The tape node holding value `name`, made a leaf the first time data is asked of a known
    /// value. `user` names the consumer for errors.
    fn data_of(&mut self, name: &str, user: &str) -> Result<NodeId, OnnxError> {
        let slot =
            self.slots.get(name).cloned().ok_or_else(|| {
                OnnxError::Model(format!("{user}: value {name:?} is never defined"))
            })?;
        if let Some(node) = slot.node {
            return Ok(node);
        }
        if let Some(src) = &slot.source {
            let node = self.data_of(src, user)?;
            if let Some(s) = self.slots.get_mut(name) {
                s.node = Some(node);
            }
            return Ok(node);
        }
        let (shape, values) = match &slot.known {
            Some(data) => {
                let shape = plan_shape_of(&data.dims).map_err(|why| OnnxError::Unsupported {
                    node: user.to_owned(),
                    op: "value".into(),
                    what: format!("{name:?}: {why}"),
                    supported: shapes_supported(),
                })?;
                (shape, data.to_f32())
            }
            None => (
                slot.declared.ok_or_else(|| {
                    OnnxError::Model(format!("{user}: value {name:?} has no shape"))
                })?,
                None,
            ),
        };
        if let Some(&leaf) = self.bound.get(name) {
            let found = self.tape.shape(leaf)?;
            if found != shape {
                return Err(OnnxError::Model(format!(
                    "{user}: the leaf bound to {name:?} has shape {found}, the value {shape}"
                )));
            }
            self.bound_used.push(name.to_owned());
            if let Some(s) = self.slots.get_mut(name) {
                s.node = Some(leaf);
            }
            return Ok(leaf);
        }
        let node = match slot.origin {
            Origin::Input => {
                let tape_name = self.leaf_name(name, "input");
                let node = self.tape.input(&tape_name, shape);
                self.inputs.push(BoundInput {
                    onnx_name: name.to_owned(),
                    tape_name,
                    node,
                    shape,
                    dims: slot.rank5_dims().unwrap_or_else(|| dims_of(shape)),
                });
                node
            }
            Origin::Initializer | Origin::Constant => {
                let values = values.ok_or_else(|| OnnxError::Unsupported {
                    node: user.to_owned(),
                    op: "value".into(),
                    what: format!(
                        "{name:?} of element type {} used as data",
                        data_type_name(slot.data_type)
                    ),
                    supported: "FLOAT data (BOOL as 0/1 masks)".into(),
                })?;
                let uniform = values
                    .first()
                    .is_some_and(|v0| values.iter().all(|v| v.to_bits() == v0.to_bits()));
                if slot.origin == Origin::Constant && uniform {
                    self.tape
                        .push(Opcode::Fill, Attr::fill(values[0], shape), &[])?
                } else {
                    let tape_name = self.leaf_name(name, "param");
                    let node = self.tape.parameter(&tape_name, shape);
                    self.parameters.push(BoundParameter {
                        onnx_name: name.to_owned(),
                        tape_name,
                        node,
                        shape,
                        value: values,
                        trainable: slot.origin == Origin::Initializer && slot.data_type == FLOAT,
                        buffer: false,
                    });
                    node
                }
            }
            Origin::Computed => {
                return Err(OnnxError::Model(format!(
                    "{user}: value {name:?} has no tape node"
                )))
            }
        };
        if let Some(s) = self.slots.get_mut(name) {
            s.node = Some(node);
        }
        Ok(node)
    }
}

/// A shape from extents, or why it is outside the vocabulary.
pub fn shape_of(dims: &[usize]) -> Result<Shape, String> {
    if dims.len() > MAX_RANK {
        return Err(format!("rank {} (extents {dims:?})", dims.len()));
    }
    if dims.contains(&0) {
        return Err(format!("a zero extent (extents {dims:?})"));
    }
    Shape::new(dims).map_err(|e| format!("extents {dims:?} ({e})"))
}

/// A rank-5 tensor `[N, C, D, H, W]` (ONNX's 3-D pooling input) as the rank-4 plan tensor
/// `[N·C, D, H, W]`: row-major storage makes the two the same elements in the same order, so
/// inputs and outputs keep their bytes. The plan format's tensors have at most
/// [`MAX_RANK`] = 4 axes (a record holds four extents); only the pooling rows read such a
/// value ([`NodeCx::data_rank5`]), every other operator refuses it. `None` for another rank
/// or when `N·C` overflows.
pub fn fold_rank5(dims: &[usize]) -> Option<[usize; 4]> {
    match *dims {
        [n, c, d, h, w] => Some([n.checked_mul(c)?, d, h, w]),
        _ => None,
    }
}

/// The tape shape of a value with ONNX extents `dims`: [`shape_of`], rank 5 folded
/// ([`fold_rank5`]).
fn plan_shape_of(dims: &[usize]) -> Result<Shape, String> {
    if dims.len() == 5 && !dims.contains(&0) {
        let folded = fold_rank5(dims).ok_or_else(|| format!("extents {dims:?} overflow"))?;
        return shape_of(&folded).map_err(|why| format!("{why}, rank 5 {dims:?} folded"));
    }
    shape_of(dims)
}

/// What [`shape_of`] takes, for its errors' `supported` part.
fn shapes_supported() -> String {
    format!(
        "ranks up to {MAX_RANK} (rank 5 for MaxPool and AveragePool), extents of at least 1, at most {} elements",
        tapeplan_core::MAX_TENSOR_ELEMS
    )
}

/// NumPy's (ONNX's multidirectional) broadcast of two shapes.
pub fn broadcast_shapes(a: Shape, b: Shape) -> Option<Shape> {
    let r = a.rank().max(b.rank());
    let mut out = vec![0usize; r];
    for (k, o) in out.iter_mut().enumerate() {
        let get = |s: Shape| {
            let off = r - s.rank();
            if k < off {
                1
            } else {
                s.dim(k - off).unwrap_or(1)
            }
        };
        let (x, y) = (get(a), get(b));
        *o = if x == y || y == 1 {
            x
        } else if x == 1 {
            y
        } else {
            return None;
        };
    }
    Shape::new(&out).ok()
}

/// One node being translated: what a row of the operator table speaks.
pub struct NodeCx<'t> {
    tr: &'t mut Translator,
    node: &'t NodeProto,
    index: usize,
}

impl NodeCx<'_> {
    /// The node's operator.
    pub fn op(&self) -> &str {
        self.node.op_type()
    }

    /// The node as errors name it: its name, or its index and first output.
    pub fn who(&self) -> String {
        match self.node.name() {
            "" => format!(
                "node #{} (output {:?})",
                self.index,
                self.node.output.first().map_or("", |s| s.as_str())
            ),
            n => format!("node {n:?}"),
        }
    }

    /// The default domain's opset version.
    pub fn opset(&self) -> i64 {
        self.tr.opset
    }

    /// The node itself.
    pub fn node(&self) -> &NodeProto {
        self.node
    }

    /// An [`OnnxError::Unsupported`] for this node.
    pub fn unsupported(&self, what: impl Into<String>, supported: impl Into<String>) -> OnnxError {
        OnnxError::Unsupported {
            node: self.who(),
            op: self.op().to_owned(),
            what: what.into(),
            supported: supported.into(),
        }
    }

    /// An [`OnnxError::Node`] for this node.
    pub fn invalid(&self, why: impl Into<String>) -> OnnxError {
        OnnxError::Node {
            node: self.who(),
            op: self.op().to_owned(),
            why: why.into(),
        }
    }

    /// The number of inputs given (trailing empty names are absent optional inputs).
    pub fn num_inputs(&self) -> usize {
        self.node
            .input
            .iter()
            .rposition(|s| !s.is_empty())
            .map_or(0, |p| p + 1)
    }

    /// True when optional input `i` is given.
    pub fn has_input(&self, i: usize) -> bool {
        self.node.input.get(i).is_some_and(|s| !s.is_empty())
    }

    fn input_name(&self, i: usize) -> Result<&str, OnnxError> {
        match self.node.input.get(i) {
            Some(s) if !s.is_empty() => Ok(s),
            _ => Err(self.invalid(format!("input {i} is missing"))),
        }
    }

    /// The element type of input `i`.
    ///
    /// # Errors
    /// A missing or undefined input.
    pub fn input_type(&self, i: usize) -> Result<i32, OnnxError> {
        let name = self.input_name(i)?;
        self.tr
            .slots
            .get(name)
            .map(|s| s.data_type)
            .ok_or_else(|| self.invalid(format!("input {i} ({name:?}) is never defined")))
    }

    /// Input `i` as data of one of the element types `allowed` (`FLOAT`; `BOOL` where the
    /// operator takes masks).
    ///
    /// # Errors
    /// [`OnnxError::Unsupported`] for another element type.
    pub fn data_of_types(&mut self, i: usize, allowed: &[i32]) -> Result<NodeId, OnnxError> {
        let t = self.input_type(i)?;
        if !allowed.contains(&t) {
            let names: Vec<String> = allowed.iter().map(|&a| data_type_name(a)).collect();
            return Err(self.unsupported(
                format!("input {i} of element type {}", data_type_name(t)),
                format!("element types {}", names.join(", ")),
            ));
        }
        let name = self.input_name(i)?.to_owned();
        if let Some(dims) = self.tr.slots.get(&name).and_then(Slot::rank5_dims) {
            return Err(self.unsupported(
                format!("input {i} of rank 5 (extents {dims:?})"),
                format!(
                    "ranks up to {MAX_RANK} (rank 5 only as MaxPool's and AveragePool's input)"
                ),
            ));
        }
        let who = self.who();
        self.tr.data_of(&name, &who)
    }

    /// Input `i` as `FLOAT` data of any rank up to 5 and its ONNX extents: a rank-5 value
    /// `[N, C, D, H, W]` is the tape's rank-4 `[N·C, D, H, W]` ([`fold_rank5`]); the pooling
    /// rows read their input so.
    ///
    /// # Errors
    /// As [`NodeCx::data_of_types`].
    pub fn data_rank5(&mut self, i: usize) -> Result<(NodeId, Vec<usize>), OnnxError> {
        let name = self.input_name(i)?.to_owned();
        let Some(dims) = self.tr.slots.get(&name).and_then(Slot::rank5_dims) else {
            let x = self.data(i)?;
            return Ok((x, dims_of(self.shape(x)?)));
        };
        let t = self.input_type(i)?;
        if t != FLOAT {
            return Err(self.unsupported(
                format!("input {i} of element type {}", data_type_name(t)),
                "element types FLOAT",
            ));
        }
        let who = self.who();
        Ok((self.tr.data_of(&name, &who)?, dims))
    }

    /// Input `i` as `FLOAT` data.
    ///
    /// # Errors
    /// As [`NodeCx::data_of_types`].
    pub fn data(&mut self, i: usize) -> Result<NodeId, OnnxError> {
        self.data_of_types(i, &[FLOAT])
    }

    /// Input `i`'s value when it is known at plan time.
    pub fn known(&self, i: usize) -> Option<&TensorData> {
        let name = self.node.input.get(i)?;
        self.tr.slots.get(name)?.known.as_ref()
    }

    /// Input `i`'s value, which must be known at plan time (`what` names it for the error).
    ///
    /// # Errors
    /// [`OnnxError::Unsupported`] when it is computed at run time.
    pub fn known_const(&self, i: usize, what: &str) -> Result<&TensorData, OnnxError> {
        self.known(i).ok_or_else(|| {
            self.unsupported(
                format!("{what} (input {i}) computed at run time"),
                format!(
                    "{what} known at plan time (an initializer, a Constant node or a given value)"
                ),
            )
        })
    }

    /// Input `i` as a constant list of integers (a shape, axes, starts, pads).
    ///
    /// # Errors
    /// As [`NodeCx::known_const`]; [`OnnxError::Node`] when it is not integers.
    pub fn const_ints(&self, i: usize, what: &str) -> Result<Vec<i64>, OnnxError> {
        self.known_const(i, what)?
            .to_i64()
            .ok_or_else(|| self.invalid(format!("{what} (input {i}) is not integers")))
    }

    /// Input `i` as a constant list of floats (converting integers).
    ///
    /// # Errors
    /// As [`NodeCx::known_const`].
    pub fn const_floats(&self, i: usize, what: &str) -> Result<Vec<f32>, OnnxError> {
        Ok(match &self.known_const(i, what)?.elements {
            Elements::F32(v) => v.clone(),
            Elements::F64(v) => v.iter().map(|&x| x as f32).collect(),
            Elements::Int(v) => v.iter().map(|&x| x as f32).collect(),
            Elements::Bool(v) => v.iter().map(|&b| f32::from(u8::from(b))).collect(),
        })
    }

    fn attribute(&self, name: &str) -> Option<&super::proto::AttributeProto> {
        self.node.attribute.iter().find(|a| a.name() == name)
    }

    /// An integer attribute, or `default`.
    pub fn attr_int(&self, name: &str, default: i64) -> i64 {
        self.attribute(name).map_or(default, |a| a.i())
    }

    /// A float attribute, or `default`.
    pub fn attr_float(&self, name: &str, default: f32) -> f32 {
        self.attribute(name).map_or(default, |a| a.f())
    }

    /// An integer-list attribute, if present.
    pub fn attr_ints(&self, name: &str) -> Option<Vec<i64>> {
        self.attribute(name).map(|a| a.ints.clone())
    }

    /// A string attribute, or `default`.
    pub fn attr_string(&self, name: &str, default: &str) -> String {
        self.attribute(name).map_or(default.to_owned(), |a| {
            String::from_utf8_lossy(a.s()).into_owned()
        })
    }

    /// A tensor attribute, if present.
    ///
    /// # Errors
    /// As [`TensorData::from_proto`].
    pub fn attr_tensor(&self, name: &str) -> Result<Option<TensorData>, OnnxError> {
        self.attribute(name)
            .and_then(|a| a.t.as_ref())
            .map(TensorData::from_proto)
            .transpose()
    }

    /// The names of the node's attributes.
    pub fn attribute_names(&self) -> impl Iterator<Item = &str> {
        self.node.attribute.iter().map(|a| a.name())
    }

    /// A node's shape.
    ///
    /// # Errors
    /// Never for a node of this translation.
    pub fn shape(&self, id: NodeId) -> Result<Shape, OnnxError> {
        Ok(self.tr.tape.shape(id)?)
    }

    /// Records an instruction; a shape-rule error names this node.
    ///
    /// # Errors
    /// [`OnnxError::Node`] with the shape rule's error.
    pub fn push(&mut self, op: Opcode, attr: Attr, args: &[NodeId]) -> Result<NodeId, OnnxError> {
        self.tr
            .tape
            .push(op, attr, args)
            .map_err(|e| self.invalid(format!("{op}: {e}")))
    }

    /// Records a composition spoken against `Recordable` (the activations and normalizations
    /// of `tapeplan_core`: `leaky_relu`, `gelu`, `layer_norm`, …) on the tape; a shape-rule
    /// error names this node.
    ///
    /// # Errors
    /// [`OnnxError::Node`] with the shape rule's error.
    pub fn record<T>(
        &mut self,
        f: impl FnOnce(&mut Trace<'_>) -> Result<T, TapeError>,
    ) -> Result<T, OnnxError> {
        let r = f(&mut self.tr.tape.trace());
        r.map_err(|e| self.invalid(e.to_string()))
    }

    /// `value` everywhere in `shape`.
    ///
    /// # Errors
    /// As [`NodeCx::push`].
    pub fn fill(&mut self, value: f32, shape: Shape) -> Result<NodeId, OnnxError> {
        self.push(Opcode::Fill, Attr::fill(value, shape), &[])
    }

    /// `x` with another shape (same elements, same order); `x` itself when the shape is equal.
    ///
    /// # Errors
    /// As [`NodeCx::push`].
    pub fn reshape(&mut self, x: NodeId, shape: Shape) -> Result<NodeId, OnnxError> {
        if self.shape(x)? == shape {
            return Ok(x);
        }
        self.push(Opcode::Reshape, Attr::target(shape), &[x])
    }

    /// `x` broadcast to `shape`; `x` itself when the shape is equal.
    ///
    /// # Errors
    /// As [`NodeCx::push`].
    pub fn broadcast(&mut self, x: NodeId, shape: Shape) -> Result<NodeId, OnnxError> {
        if self.shape(x)? == shape {
            return Ok(x);
        }
        self.push(Opcode::Broadcast, Attr::target(shape), &[x])
    }

    /// The broadcast of the shapes of `args` (ONNX's multidirectional broadcasting).
    ///
    /// # Errors
    /// [`OnnxError::Node`] when they do not broadcast.
    pub fn common_shape(&self, args: &[NodeId]) -> Result<Shape, OnnxError> {
        let mut shape = Shape::SCALAR;
        for &a in args {
            let s = self.shape(a)?;
            shape = broadcast_shapes(shape, s)
                .ok_or_else(|| self.invalid(format!("shapes {shape} and {s} do not broadcast")))?;
        }
        Ok(shape)
    }

    /// An elementwise instruction over `args` after broadcasting them to their common shape.
    ///
    /// # Errors
    /// As [`NodeCx::common_shape`] and [`NodeCx::push`].
    pub fn elementwise(&mut self, op: Opcode, args: &[NodeId]) -> Result<NodeId, OnnxError> {
        let shape = self.common_shape(args)?;
        let mut b = Vec::with_capacity(args.len());
        for &a in args {
            b.push(self.broadcast(a, shape)?);
        }
        self.push(op, Attr::NONE, &b)
    }

    /// Sets output `k` to a tape node of element type `data_type` (`FLOAT`, or `BOOL` for a
    /// mask).
    ///
    /// # Errors
    /// [`OnnxError::Node`] when the node has no output `k`.
    pub fn set_output(&mut self, k: usize, node: NodeId, data_type: i32) -> Result<(), OnnxError> {
        let name = self.output_name(k)?;
        self.tr.slots.insert(
            name,
            Slot {
                origin: Origin::Computed,
                data_type,
                known: None,
                node: Some(node),
                declared: None,
                source: None,
                onnx_dims: None,
            },
        );
        Ok(())
    }

    /// Sets output `k` to a `FLOAT` tape node holding a rank-5 value of ONNX extents `dims`
    /// `[N, C, D, H, W]`, folded on the tape as `[N·C, D, H, W]` ([`fold_rank5`]).
    ///
    /// # Errors
    /// [`OnnxError::Node`] when the node has no output `k` or `node`'s shape is not `dims`
    /// folded.
    pub fn set_output_rank5(
        &mut self,
        k: usize,
        node: NodeId,
        dims: Vec<usize>,
    ) -> Result<(), OnnxError> {
        let found = dims_of(self.shape(node)?);
        if fold_rank5(&dims).map(|f| f.to_vec()) != Some(found.clone()) {
            return Err(self.invalid(format!("a rank-5 output {dims:?} held as {found:?}")));
        }
        let name = self.output_name(k)?;
        self.tr.slots.insert(
            name,
            Slot {
                origin: Origin::Computed,
                data_type: FLOAT,
                known: None,
                node: Some(node),
                declared: None,
                source: None,
                onnx_dims: Some(dims),
            },
        );
        Ok(())
    }

    /// Sets output `k` to a value known at plan time (a `Constant`, a `Shape`).
    ///
    /// # Errors
    /// As [`NodeCx::set_output`].
    pub fn set_known_output(&mut self, k: usize, data: TensorData) -> Result<(), OnnxError> {
        let name = self.output_name(k)?;
        self.tr.slots.insert(
            name,
            Slot {
                origin: Origin::Constant,
                data_type: data.data_type,
                known: Some(data),
                node: None,
                declared: None,
                source: None,
                onnx_dims: None,
            },
        );
        Ok(())
    }

    /// Makes output `k` the same value as input `i` (`Identity`).
    ///
    /// # Errors
    /// A missing input or output.
    pub fn alias_output(&mut self, k: usize, i: usize) -> Result<(), OnnxError> {
        let from = self.input_name(i)?.to_owned();
        let slot = self
            .tr
            .slots
            .get(&from)
            .cloned()
            .ok_or_else(|| self.invalid(format!("input {i} ({from:?}) is never defined")))?;
        let name = self.output_name(k)?;
        let mut alias = slot;
        if alias.node.is_none() {
            alias.source = Some(alias.source.clone().unwrap_or(from));
        }
        self.tr.slots.insert(name, alias);
        Ok(())
    }

    /// True when optional output `k` is named (an empty name is an output not asked for).
    pub fn has_output(&self, k: usize) -> bool {
        self.node.output.get(k).is_some_and(|s| !s.is_empty())
    }

    /// A tensor known at plan time (an index table, a ramp) as a tape leaf: a `fill` when
    /// every element is equal, else a parameter that is not trained, named after the node's
    /// first output and `what`.
    ///
    /// # Errors
    /// A shape outside the vocabulary.
    pub fn constant(&mut self, what: &str, data: TensorData) -> Result<NodeId, OnnxError> {
        let name = format!(
            "{}/{what}",
            self.node.output.first().map_or("", |s| s.as_str())
        );
        self.tr.slots.insert(
            name.clone(),
            Slot {
                origin: Origin::Constant,
                data_type: data.data_type,
                known: Some(data),
                node: None,
                declared: None,
                source: None,
                onnx_dims: None,
            },
        );
        let who = self.who();
        self.tr.data_of(&name, &who)
    }

    /// Marks `leaf` (what data of an input gave) as a buffer (`BatchNormalization`'s running
    /// statistics): the initializer it holds is not trainable. Nothing for a computed value.
    pub fn mark_buffer(&mut self, leaf: NodeId) {
        let tr = &mut *self.tr;
        let mut names = Vec::new();
        for p in tr.parameters.iter_mut().filter(|p| p.node == leaf) {
            p.trainable = false;
            p.buffer = true;
            names.push(p.onnx_name.clone());
        }
        names.extend(
            tr.bound
                .iter()
                .filter(|(_, &n)| n == leaf)
                .map(|(name, _)| name.clone()),
        );
        for name in names {
            if !tr.buffers.contains(&name) {
                tr.buffers.push(name);
            }
        }
    }

    /// True when recording for training ([`TranslateOptions::training`]).
    pub fn training(&self) -> bool {
        self.tr.training
    }

    /// True when input `i` of this node is an initializer being trained, as
    /// [`TranslateOptions::eval_frozen_batch_norm`] says (`None` when that option is off).
    pub fn input_trained(&self, i: usize) -> Option<bool> {
        let trained = self.tr.eval_frozen_batch_norm.as_ref()?;
        let mut name = self.node.input.get(i).map(String::as_str).unwrap_or("");
        // An `Identity` alias names its source's initializer.
        for _ in 0..self.tr.slots.len() {
            match self.tr.slots.get(name).and_then(|s| s.source.as_deref()) {
                Some(source) => name = source,
                None => break,
            }
        }
        Some(trained.contains(name))
    }

    /// Records the new value of a buffer leaf (a running statistic) in training.
    pub fn buffer_update(&mut self, leaf: NodeId, value: NodeId) {
        self.tr.buffer_updates.push((leaf, value));
    }

    /// The number of outputs the node names.
    pub fn num_outputs(&self) -> usize {
        self.node.output.iter().filter(|s| !s.is_empty()).count()
    }

    fn output_name(&self, k: usize) -> Result<String, OnnxError> {
        match self.node.output.get(k) {
            Some(s) if !s.is_empty() => Ok(s.clone()),
            _ => Err(self.invalid(format!("output {k} is missing"))),
        }
    }

    /// An axis attribute or input, negative counting from the end, checked against `rank`.
    ///
    /// # Errors
    /// [`OnnxError::Node`] outside `[-rank, rank)`.
    pub fn axis(&self, axis: i64, rank: usize) -> Result<usize, OnnxError> {
        let r = rank as i64;
        if axis < -r || axis >= r {
            return Err(self.invalid(format!("axis {axis} outside [-{r}, {r})")));
        }
        Ok(if axis < 0 { axis + r } else { axis } as usize)
    }

    /// A shape from extents, or [`OnnxError::Unsupported`] naming this node.
    ///
    /// # Errors
    /// Ranks above the vocabulary's maximum, zero extents.
    pub fn shape_from(&self, dims: &[usize]) -> Result<Shape, OnnxError> {
        shape_of(dims).map_err(|why| self.unsupported(why, shapes_supported()))
    }
}

/// The extents of a shape as a vector.
pub fn dims_of(s: Shape) -> Vec<usize> {
    s.dims()[..s.rank()].to_vec()
}
