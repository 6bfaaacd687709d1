//! Exchange with PyTorch: a plan's parameters and buffers as a `safetensors` file under their
//! `state_dict` names, and host-side checkpoint files (the runtime's `TPCK` blobs,
//! `docs/checkpoints.md`).
//!
//! # The names
//!
//! Every model tensor of a plan (its parameters and buffers: every persistent binding but the
//! training state, see [`is_training_state`]) is exchanged under its plan name, which for a
//! model from the layer API or an ONNX file is already its PyTorch `state_dict` key, with its
//! plan shape and values as they are. A `--rename FROM=TO` rule ([`Rename`]) maps keys whose
//! names differ between the two sides. A `state_dict` key longer than the plan format's 24
//! bytes has a shortened plan name ([`crate::model::names::plan_name`]): import matches the
//! file's full key to it, and export writes the plan name (a `--rename` rule restores the full
//! key).
//!
//! # The MLP's mapping
//!
//! The `--layers` MLP's parameters (a plan whose model tensors are all `w{k}`/`b{k}`) are
//! exchanged as PyTorch's `nn.Sequential` of `nn.Linear` layers names and lays them out.
//! tapeplan's dense layer `k` (1-based) computes `x · w{k} + b{k}` with `w{k}: [d_in, d_out]`;
//! PyTorch's `nn.Linear(d_in, d_out)` computes `x · weightᵀ + bias` with
//! `weight: [d_out, d_in]`. In `nn.Sequential(Linear, Act, Linear, Act, …, Linear)` the
//! activations sit at the odd indices, so:
//!
//! | tapeplan | shape | safetensors (PyTorch `state_dict`) | shape | values |
//! |---|---|---|---|---|
//! | `w{k}` | `[d_in, d_out]` | `{2(k-1)}.weight` | `[d_out, d_in]` | transposed (exact) |
//! | `b{k}` | `[d_out]` | `{2(k-1)}.bias` | `[d_out]` | as is |
//!
//! (`w1 → 0.weight`, `b1 → 0.bias`, `w2 → 2.weight`, …). Every tensor is `F32`, little-endian,
//! row-major; a transposition moves bits and never rounds, so export → import is the identity
//! on bits. Training state (optimizer moments, generator state, step counters) is not model
//! weights: export leaves it out, import leaves it as it was. The file's `__metadata__` carries
//! `format = pt`, the plan's id, and for the MLP the layer widths and the hidden activation, so
//! `scripts/check_export.py` can rebuild the forward pass.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use tapeplan_core::{Opcode, Shape};
use tapeplan_runtime::{Checkpoint, CheckpointError, Plan as RtPlan};

use crate::exec::runtime::{RuntimeModel, TrainError};
use crate::io::inspect::PlanInfo;

/// Errors of exporting, importing, and of checkpoint files.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The safetensors bytes are malformed, or could not be written.
    #[error("safetensors: {0}")]
    Safetensors(#[from] safetensors::SafeTensorError),
    /// A tensor the plan needs is not in the file.
    #[error("the file has no tensor {torch_name:?} (for the plan's {name})")]
    MissingTensor {
        /// The PyTorch name looked for.
        torch_name: String,
        /// The plan's parameter.
        name: String,
    },
    /// The file holds a tensor that maps to no parameter of the plan.
    #[error("the file's tensor {0:?} is not a parameter of the plan")]
    UnexpectedTensor(String),
    /// A tensor is not `F32`.
    #[error("tensor {name:?} is {dtype:?}; only F32 is read")]
    Dtype {
        /// The PyTorch name.
        name: String,
        /// Its dtype.
        dtype: Dtype,
    },
    /// A tensor has another shape than the plan's parameter implies.
    #[error("tensor {name:?} has shape {found:?}, the plan needs {expected:?}")]
    Shape {
        /// The PyTorch name.
        name: String,
        /// The shape the plan implies (PyTorch layout).
        expected: Vec<usize>,
        /// The file's shape.
        found: Vec<usize>,
    },
    /// A `w{k}` that is not a matrix, or a `b{k}` that is not a vector.
    #[error("parameter {name} has shape {shape}, not that of a dense layer")]
    NotDense {
        /// The parameter.
        name: String,
        /// Its shape.
        shape: Shape,
    },
    /// The plan has no model tensor to exchange (only training state).
    #[error("the plan has no parameters or buffers to exchange (only training state)")]
    NoLayers,
    /// A `--rename` rule is malformed or renames no tensor.
    #[error("--rename {rule}: {why}")]
    Rename {
        /// The rule as given.
        rule: String,
        /// What is wrong.
        why: String,
    },
    /// The file says (`tapeplan.activation`) it was exported from a model with another hidden
    /// activation than the plan's: same shapes, another function.
    #[error("the file's parameters are of a {file} model, the plan's activation is {plan}")]
    Activation {
        /// The file's `tapeplan.activation`.
        file: String,
        /// The plan's (see `forward_activation`).
        plan: &'static str,
    },
    /// A device transcript's `param` lines do not hold the plan's model tensors (a name
    /// missing or not the plan's, another element count).
    #[error("the transcript's parameters do not fit the plan: {0}")]
    TranscriptParameters(String),
    /// A checkpoint was rejected.
    #[error("checkpoint rejected: {0}")]
    Checkpoint(#[from] CheckpointError),
    /// A checkpoint holds state outside the plan's parameters, which a
    /// [`RuntimeModel`] cannot load by name.
    #[error("the checkpoint holds non-zero state at element {element} of the persistent region, outside every parameter")]
    UnboundState {
        /// The element's index in the persistent region.
        element: usize,
    },
    /// A trainable parameter holds a NaN or an infinity (a diverged model): a guarded plan
    /// would refuse every step from it, so training could make no progress.
    #[error("parameter {name} element {element} is {value}, not finite: the model diverged before it was saved; start from another checkpoint or from a fresh initialization")]
    NonFiniteParameter {
        /// The parameter.
        name: String,
        /// The element's index within the parameter (row-major).
        element: usize,
        /// Its value.
        value: f32,
    },
    /// An output path cannot be written (checked before any work is done).
    #[error("{path}: {reason} (checked before any work is done, so none is lost)")]
    Unwritable {
        /// The output.
        path: PathBuf,
        /// Why, in words.
        reason: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The runtime refused a parameter.
    #[error(transparent)]
    Train(#[from] TrainError),
}

/// Which part of a dense layer a parameter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `w{k}`, `[d_in, d_out]`.
    Weight,
    /// `b{k}`, `[d_out]`.
    Bias,
}

/// The PyTorch `nn.Sequential` name of a tapeplan parameter (`w1 → 0.weight`,
/// `b2 → 2.bias`), with its role; `None` for a name that is not `w{k}` or `b{k}` with
/// `k ≥ 1`.
pub fn torch_name(name: &str) -> Option<(String, Role)> {
    let (role, suffix, digits) = match name.as_bytes().first()? {
        b'w' => (Role::Weight, "weight", &name[1..]),
        b'b' => (Role::Bias, "bias", &name[1..]),
        _ => return None,
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) || digits.starts_with('0') {
        return None;
    }
    let k: usize = digits.parse().ok()?;
    let index = k.checked_sub(1)?.checked_mul(2)?;
    Some((format!("{index}.{suffix}"), role))
}

/// The PyTorch shape of a tapeplan parameter of `shape` in `role`: a weight transposed.
fn torch_shape(name: &str, role: Role, shape: Shape) -> Result<Vec<usize>, ExchangeError> {
    match (role, shape.rank()) {
        (Role::Weight, 2) => Ok(vec![shape.dims()[1], shape.dims()[0]]),
        (Role::Bias, 1) => Ok(vec![shape.dims()[0]]),
        _ => Err(ExchangeError::NotDense {
            name: name.to_string(),
            shape,
        }),
    }
}

/// `[rows, cols]` row-major → `[cols, rows]` row-major.
fn transpose(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; v.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = v[r * cols + c];
        }
    }
    out
}

/// Whether the plan's persistent binding `name` is training state rather than a model tensor,
/// given the names of all of the plan's persistent bindings: the optimizer's (`opt.step`,
/// Adam's running powers, and `P.m`, `P.v`, `P.b` for another binding `P` of `all`, shortened
/// for a long `P`) or the dropout generator's (`rng.key`, `rng.counter`). The one rule,
/// [`crate::model::names::is_training_state`].
pub fn is_training_state(name: &str, all: &[&str]) -> bool {
    crate::model::names::is_training_state(name, all)
}

/// A key remap rule `FROM=TO` of `export` and `import`: a key equal to `FROM` becomes `TO`; a
/// key that starts with `FROM` followed by `.` (or with `FROM` when it ends in `.`) has that
/// prefix replaced by `TO` (`features=backbone` maps `features.0.weight` to
/// `backbone.0.weight`). The first rule that matches a key applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rename {
    /// The key or prefix replaced.
    pub from: String,
    /// Its replacement.
    pub to: String,
}

impl std::str::FromStr for Rename {
    type Err = String;

    fn from_str(rule: &str) -> Result<Rename, String> {
        match rule.split_once('=') {
            Some((from, to)) if !from.is_empty() && !to.is_empty() => Ok(Rename {
                from: from.to_owned(),
                to: to.to_owned(),
            }),
            _ => Err(format!("{rule:?} is not FROM=TO (two non-empty names)")),
        }
    }
}

impl std::fmt::Display for Rename {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.from, self.to)
    }
}

impl Rename {
    /// `key` renamed by this rule, or `None` when the rule does not match it.
    pub fn apply(&self, key: &str) -> Option<String> {
        if key == self.from {
            return Some(self.to.clone());
        }
        let rest = key.strip_prefix(self.from.as_str())?;
        (self.from.ends_with('.') || rest.starts_with('.')).then(|| format!("{}{rest}", self.to))
    }
}

/// `key` renamed by the first rule of `rules` that matches it (unchanged when none does);
/// marks the rule used in `used`.
fn rename(key: &str, rules: &[Rename], used: &mut [bool]) -> String {
    for (r, u) in rules.iter().zip(used.iter_mut()) {
        if let Some(k) = r.apply(key) {
            *u = true;
            return k;
        }
    }
    key.to_owned()
}

/// An error for the first rule that renamed nothing.
fn unused_rule(rules: &[Rename], used: &[bool]) -> Result<(), ExchangeError> {
    match rules.iter().zip(used).find(|(_, &u)| !u) {
        Some((r, _)) => Err(ExchangeError::Rename {
            rule: r.to_string(),
            why: "it matches no tensor name".into(),
        }),
        None => Ok(()),
    }
}

/// The error for two keys that the rules rename to one.
fn collision(rules: &[Rename], why: String) -> ExchangeError {
    ExchangeError::Rename {
        rule: rules
            .iter()
            .map(Rename::to_string)
            .collect::<Vec<_>>()
            .join(" "),
        why,
    }
}

/// How one model tensor is exchanged: its key (before renames) and, for the MLP's `w{k}`/`b{k}`,
/// its dense role.
struct Exchanged {
    index: usize,
    key: String,
    role: Option<Role>,
    /// The shape in the file (a weight's transposed).
    file_shape: Vec<usize>,
}

/// The model tensors of `params` (training state left out) and how each is exchanged.
fn exchanged(params: &[Param]) -> Result<Vec<Exchanged>, ExchangeError> {
    let all: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
    let model: Vec<(usize, &Param)> = params
        .iter()
        .enumerate()
        .filter(|(_, p)| !is_training_state(&p.name, &all))
        .collect();
    let mlp = model.iter().all(|(_, p)| torch_name(&p.name).is_some());
    model
        .into_iter()
        .map(|(index, p)| match torch_name(&p.name).filter(|_| mlp) {
            Some((key, role)) => Ok(Exchanged {
                index,
                key,
                role: Some(role),
                file_shape: torch_shape(&p.name, role, p.shape)?,
            }),
            None => Ok(Exchanged {
                index,
                key: p.name.clone(),
                role: None,
                file_shape: p.shape.dims()[..p.shape.rank()].to_vec(),
            }),
        })
        .collect()
}

/// One named parameter: its tapeplan name, shape and row-major values.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    /// The tapeplan name (`w1`, `b1`, …).
    pub name: String,
    /// The tapeplan shape (`[d_in, d_out]` for weights).
    pub shape: Shape,
    /// Row-major values, `shape.elems()` of them.
    pub values: Vec<f32>,
}

/// Every parameter of `plan` with its values taken from `persistent` (the plan's persistent
/// region: a session's, a model's, or a checkpoint's), in binding order.
///
/// # Shapes
/// `persistent: [persistent_elems]`.
pub fn params_of(plan: &RtPlan<'_>, persistent: &[f32]) -> Vec<Param> {
    plan.parameters()
        .map(|b| Param {
            name: b.name.to_string(),
            shape: b.shape,
            values: persistent.get(b.range()).unwrap_or(&[]).to_vec(),
        })
        .collect()
}

/// The hidden activation of a plan's `forward` entry as PyTorch names its module (`tanh`,
/// `relu`), `none` for a single layer, `unknown` otherwise.
pub fn forward_activation(plan_bytes: &[u8]) -> &'static str {
    let info = PlanInfo::decode(plan_bytes);
    let Some(fwd) = info.entries.iter().find(|e| e.name == "forward") else {
        return "unknown";
    };
    let has = |op: Opcode| fwd.instrs.iter().any(|i| i.op == op);
    match (has(Opcode::Tanh), has(Opcode::Relu)) {
        (true, false) => "tanh",
        (false, true) => "relu",
        (false, false) if info.parameters().len() <= 2 => "none",
        _ => "unknown",
    }
}

/// The layer widths `d_in, d_1, …, d_out` of the dense parameters, in layer order.
fn layer_widths(params: &[Param]) -> Vec<usize> {
    let mut weights: Vec<(usize, Shape)> = params
        .iter()
        .filter_map(|p| {
            let (_, role) = torch_name(&p.name)?;
            (role == Role::Weight && p.shape.rank() == 2)
                .then(|| (p.name[1..].parse().unwrap_or(0), p.shape))
        })
        .collect();
    weights.sort_by_key(|(k, _)| *k);
    let mut out = Vec::new();
    for (i, (_, s)) in weights.iter().enumerate() {
        if i == 0 {
            out.push(s.dims()[0]);
        }
        out.push(s.dims()[1]);
    }
    out
}

/// The safetensors bytes of `params`' model tensors under their exchanged names and layouts
/// (see the module docs); training state is left out. `metadata` is added to the file's
/// `__metadata__` after `format = pt` (and `tapeplan.layers` for the MLP).
///
/// # Errors
/// As [`export_safetensors_renamed`] without rules.
pub fn export_safetensors(
    params: &[Param],
    metadata: &[(&str, String)],
) -> Result<Vec<u8>, ExchangeError> {
    export_safetensors_renamed(params, metadata, &[])
}

/// [`export_safetensors`] with the keys renamed by `renames` ([`Rename`]).
///
/// # Errors
/// [`ExchangeError::NotDense`] for an MLP's `w{k}` that is not a matrix or `b{k}` that is not
/// a vector; [`ExchangeError::NoLayers`] when nothing is left to export;
/// [`ExchangeError::Rename`] for a rule that renames nothing, or two tensors renamed to one
/// key; [`ExchangeError::Safetensors`].
pub fn export_safetensors_renamed(
    params: &[Param],
    metadata: &[(&str, String)],
    renames: &[Rename],
) -> Result<Vec<u8>, ExchangeError> {
    let mut used = vec![false; renames.len()];
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    let model = exchanged(params)?;
    for e in &model {
        let p = &params[e.index];
        let values = match e.role {
            Some(Role::Weight) => transpose(&p.values, p.shape.dims()[0], p.shape.dims()[1]),
            _ => p.values.clone(),
        };
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let key = rename(&e.key, renames, &mut used);
        if tensors.iter().any(|(k, _, _)| *k == key) {
            return Err(collision(
                renames,
                format!("two tensors would be written as {key:?}"),
            ));
        }
        tensors.push((key, e.file_shape.clone(), bytes));
    }
    unused_rule(renames, &used)?;
    if tensors.is_empty() {
        return Err(ExchangeError::NoLayers);
    }
    let views = tensors
        .iter()
        .map(|(n, s, b)| Ok((n.as_str(), TensorView::new(Dtype::F32, s.clone(), b)?)))
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    let mut meta: HashMap<String, String> = HashMap::new();
    meta.insert("format".into(), "pt".into());
    if model.iter().all(|e| e.role.is_some()) {
        let widths = layer_widths(params);
        meta.insert(
            "tapeplan.layers".into(),
            widths
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    for (k, v) in metadata {
        meta.insert((*k).to_string(), v.clone());
    }
    Ok(canonical_header(safetensors::serialize(views, Some(meta))?))
}

/// The same safetensors file with its JSON header's keys in sorted order, so equal contents
/// give equal bytes (`safetensors` writes `__metadata__` in `HashMap` order, which changes
/// from run to run). Answers the file unchanged if the header does not re-serialize to the
/// same length (it always does: same JSON, compact both times).
fn canonical_header(mut file: Vec<u8>) -> Vec<u8> {
    use std::collections::BTreeMap;
    let Some(n) = file
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .and_then(|n| usize::try_from(n).ok())
    else {
        return file;
    };
    let Some(header) = file.get(8..8 + n) else {
        return file;
    };
    let trimmed = header.trim_ascii_end();
    let Ok(mut top) = serde_json::from_slice::<BTreeMap<String, serde_json::Value>>(trimmed) else {
        return file;
    };
    if let Some(meta) = top.get_mut("__metadata__") {
        let Ok(sorted) = serde_json::from_value::<BTreeMap<String, String>>(meta.clone()) else {
            return file;
        };
        match serde_json::to_value(sorted) {
            Ok(v) => *meta = v,
            Err(_) => return file,
        }
    }
    let Ok(json) = serde_json::to_vec(&top) else {
        return file;
    };
    if json.len() != trimmed.len() {
        return file;
    }
    file[8..8 + json.len()].copy_from_slice(&json);
    file
}

/// Reads the model tensors of `params` from safetensors `bytes` (exchanged names and layouts,
/// see the module docs) and overwrites their `values`; training state is left as it is.
/// Strict, like PyTorch's `load_state_dict(strict=True)`: every model tensor must be in the
/// file and the file must hold nothing else.
///
/// # Errors
/// As [`import_safetensors_renamed`] without rules.
pub fn import_safetensors(bytes: &[u8], params: &mut [Param]) -> Result<(), ExchangeError> {
    import_safetensors_renamed(bytes, params, &[])
}

/// [`import_safetensors`] with the file's keys renamed by `renames` ([`Rename`]) before they
/// are matched with the plan's.
///
/// # Errors
/// [`ExchangeError::Safetensors`] for malformed bytes; [`ExchangeError::MissingTensor`],
/// [`ExchangeError::UnexpectedTensor`], [`ExchangeError::Dtype`] (only `F32` is read),
/// [`ExchangeError::Shape`], [`ExchangeError::NotDense`], [`ExchangeError::NoLayers`],
/// [`ExchangeError::Rename`] for a rule that renames none of the file's keys or two keys
/// renamed to one. `params` is unchanged on error.
pub fn import_safetensors_renamed(
    bytes: &[u8],
    params: &mut [Param],
    renames: &[Rename],
) -> Result<(), ExchangeError> {
    let st = SafeTensors::deserialize(bytes)?;
    let mut used = vec![false; renames.len()];
    let mut file_names = st.names();
    file_names.sort_unstable();
    // The file's keys as the plan's side names them: renamed, then a key past the plan
    // format's 24 bytes shortened as the model's plan name is (`model::names::plan_name`).
    let mut by_key: HashMap<String, &str> = HashMap::new();
    for n in file_names {
        let key = crate::model::names::plan_name(&rename(n, renames, &mut used));
        if let Some(other) = by_key.insert(key.clone(), n) {
            return Err(collision(
                renames,
                format!("the file's {other:?} and {n:?} both become {key:?}"),
            ));
        }
    }
    unused_rule(renames, &used)?;
    let model = exchanged(params)?;
    let mut loaded: Vec<(usize, Vec<f32>)> = Vec::new();
    for e in &model {
        let p = &params[e.index];
        let Some(&file_name) = by_key.get(&e.key) else {
            return Err(ExchangeError::MissingTensor {
                torch_name: e.key.clone(),
                name: p.name.clone(),
            });
        };
        let view = st.tensor(file_name)?;
        if view.dtype() != Dtype::F32 {
            return Err(ExchangeError::Dtype {
                name: file_name.to_owned(),
                dtype: view.dtype(),
            });
        }
        if view.shape() != e.file_shape.as_slice() {
            return Err(ExchangeError::Shape {
                name: file_name.to_owned(),
                expected: e.file_shape.clone(),
                found: view.shape().to_vec(),
            });
        }
        let values: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let values = match e.role {
            Some(Role::Weight) => transpose(&values, e.file_shape[0], e.file_shape[1]),
            _ => values,
        };
        loaded.push((e.index, values));
    }
    if loaded.is_empty() {
        return Err(ExchangeError::NoLayers);
    }
    let mut keys: Vec<&String> = by_key.keys().collect();
    keys.sort_unstable();
    if let Some(extra) = keys
        .into_iter()
        .find(|k| !model.iter().any(|e| e.key == **k))
    {
        return Err(ExchangeError::UnexpectedTensor(by_key[extra].to_string()));
    }
    for (i, v) in loaded {
        params[i].values = v;
    }
    Ok(())
}

/// The safetensors file of a plan's model tensors with their values from `persistent`,
/// with metadata `tapeplan.plan_id` (8 hex digits) and `tapeplan.activation`
/// ([`forward_activation`]).
///
/// # Errors
/// As [`export_safetensors`].
pub fn export_plan_params(plan: &RtPlan<'_>, persistent: &[f32]) -> Result<Vec<u8>, ExchangeError> {
    export_plan_params_renamed(plan, persistent, &[])
}

/// [`export_plan_params`] with the keys renamed by `renames`.
///
/// # Errors
/// As [`export_safetensors_renamed`].
pub fn export_plan_params_renamed(
    plan: &RtPlan<'_>,
    persistent: &[f32],
    renames: &[Rename],
) -> Result<Vec<u8>, ExchangeError> {
    export_safetensors_renamed(
        &params_of(plan, persistent),
        &[
            ("tapeplan.plan_id", format!("{:08x}", plan.plan_id())),
            (
                "tapeplan.activation",
                forward_activation(plan.bytes()).to_string(),
            ),
        ],
        renames,
    )
}

/// A new persistent region for `plan`: `base` (for example a checkpoint's values, or zeros)
/// with the model tensors replaced by those in the safetensors `bytes`.
///
/// # Shapes
/// `base: [persistent_elems]`; answers `[persistent_elems]`.
///
/// # Errors
/// [`ExchangeError::Activation`] when the file names another activation than the plan's; as
/// [`import_safetensors`].
pub fn import_into_persistent(
    plan: &RtPlan<'_>,
    base: &[f32],
    bytes: &[u8],
) -> Result<Vec<f32>, ExchangeError> {
    import_into_persistent_renamed(plan, base, bytes, &[])
}

/// [`import_into_persistent`] with the file's keys renamed by `renames`.
///
/// # Shapes
/// `base: [persistent_elems]`; answers `[persistent_elems]`.
///
/// # Errors
/// As [`import_into_persistent`] and [`import_safetensors_renamed`].
pub fn import_into_persistent_renamed(
    plan: &RtPlan<'_>,
    base: &[f32],
    bytes: &[u8],
    renames: &[Rename],
) -> Result<Vec<f32>, ExchangeError> {
    // A file this tool exported names its activation; a PyTorch file does not (nothing to
    // check then).
    let (_, meta) = SafeTensors::read_metadata(bytes)?;
    let theirs = meta
        .metadata()
        .as_ref()
        .and_then(|m| m.get("tapeplan.activation"));
    let ours = forward_activation(plan.bytes());
    if let Some(file) = theirs.filter(|a| a.as_str() != ours && ours != "unknown") {
        return Err(ExchangeError::Activation {
            file: file.clone(),
            plan: ours,
        });
    }
    let mut params = params_of(plan, base);
    import_safetensors_renamed(bytes, &mut params, renames)?;
    let mut out = base.to_vec();
    for (b, p) in plan.parameters().zip(&params) {
        if let Some(dst) = out.get_mut(b.range()) {
            dst.copy_from_slice(&p.values);
        }
    }
    Ok(out)
}

/// The forward entry's logits for `rows` samples of `features` (`[rows, d_in]`), in batches
/// of the plan's batch size with the last batch zero-padded (the padding's logits dropped).
///
/// # Shapes
/// `features: [rows, d_in]`; answers `[rows, d_out]`.
///
/// # Errors
/// A runtime error.
pub fn forward_logits(
    model: &mut RuntimeModel<'_>,
    features: &[f32],
    rows: usize,
    d_in: usize,
    batch: usize,
) -> Result<Vec<f32>, TrainError> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < rows {
        let n = batch.min(rows - start);
        let mut x = vec![0.0f32; batch * d_in];
        x[..n * d_in].copy_from_slice(&features[start * d_in..(start + n) * d_in]);
        let logits = model.logits(&x)?;
        let classes = logits.len() / batch.max(1);
        out.extend_from_slice(&logits[..n * classes]);
        start += n;
    }
    Ok(out)
}

/// A safetensors file of a test set and the runtime's answers on it, for
/// `scripts/check_export.py`: `x: F32 [rows, d_in]`, `labels: U8 [rows]`,
/// `logits: F32 [rows, d_out]`.
///
/// # Errors
/// [`ExchangeError::Safetensors`] when the lengths do not match the shapes.
pub fn reference_file(
    features: &[f32],
    labels: &[u8],
    logits: &[f32],
) -> Result<Vec<u8>, ExchangeError> {
    let rows = labels.len();
    let d_in = features.len() / rows.max(1);
    let d_out = logits.len() / rows.max(1);
    let fx: Vec<u8> = features.iter().flat_map(|v| v.to_le_bytes()).collect();
    let fl: Vec<u8> = logits.iter().flat_map(|v| v.to_le_bytes()).collect();
    let views = vec![
        ("x", TensorView::new(Dtype::F32, vec![rows, d_in], &fx)?),
        ("labels", TensorView::new(Dtype::U8, vec![rows], labels)?),
        (
            "logits",
            TensorView::new(Dtype::F32, vec![rows, d_out], &fl)?,
        ),
    ];
    Ok(safetensors::serialize(views, None)?)
}

// ---------------------------------------------------------------------------------------------
// Checkpoint files on the host.

/// `path` with `suffix` appended to its last component (`a/b.ckpt` + `.tmp` → `a/b.ckpt.tmp`).
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

/// The folder `path` is in (`.` for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The suffix of the file `tapeplan plan` writes beside a plan whose parameter names were
/// shortened to fit the format's 24 bytes: `PLAN.names.json`, a JSON object from each shortened
/// plan name to the model's full `state_dict` key ([`write_names`], [`read_names`]).
pub const NAMES_SUFFIX: &str = ".names.json";

/// Writes the map from shortened plan names to full `state_dict` keys, as a JSON object sorted
/// by plan name.
///
/// # Errors
/// [`ExchangeError::Io`].
pub fn write_names(path: &Path, names: &[(String, String)]) -> Result<(), ExchangeError> {
    let map: std::collections::BTreeMap<&str, &str> = names
        .iter()
        .map(|(short, full)| (short.as_str(), full.as_str()))
        .collect();
    let text = serde_json::to_string_pretty(&map).unwrap_or_default() + "\n";
    write_atomic(path, text.as_bytes())
}

/// Reads a [`NAMES_SUFFIX`] file: `(plan name, full key)` pairs, sorted by plan name.
///
/// # Errors
/// [`ExchangeError::Io`] for an unreadable file; [`ExchangeError::Rename`] for one that is not a
/// JSON object of strings.
pub fn read_names(path: &Path) -> Result<Vec<(String, String)>, ExchangeError> {
    let text = std::fs::read_to_string(path).map_err(|source| ExchangeError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let map: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&text).map_err(|e| ExchangeError::Rename {
            rule: path.display().to_string(),
            why: format!("not a JSON object from plan names to state_dict keys: {e}"),
        })?;
    Ok(map.into_iter().collect())
}

/// The rename rules that give each of `keys` (a plan's tensor names) its full `state_dict` key
/// from `names` (a [`NAMES_SUFFIX`] map; keys it does not list keep their name), then apply the
/// user's `renames` to the full keys: `--rename` speaks the model's own names, never the
/// shortened ones. Each answered rule renames exactly one key.
///
/// # Errors
/// [`ExchangeError::Rename`] for a user rule that matches no full key.
pub fn compose_renames(
    keys: &[String],
    names: &[(String, String)],
    renames: &[Rename],
) -> Result<Vec<Rename>, ExchangeError> {
    let mut used = vec![false; renames.len()];
    let mut rules: Vec<Rename> = keys
        .iter()
        .filter_map(|k| {
            let full = names
                .iter()
                .find(|(short, _)| short == k)
                .map_or(k.as_str(), |(_, full)| full.as_str());
            let to = rename(full, renames, &mut used);
            (to != *k).then(|| Rename {
                from: k.clone(),
                to,
            })
        })
        .collect();
    unused_rule(renames, &used)?;
    // Longest first: an exact rule for `fc` must not catch `fc.weight` as a prefix before its own.
    rules.sort_by(|a, b| b.from.len().cmp(&a.from.len()).then(a.from.cmp(&b.from)));
    Ok(rules)
}

/// Writes `bytes` to `path` atomically: to `path.tmp` first (flushed to disk), then renamed
/// over `path`, then the folder flushed (so the rename itself survives a power cut). A crash
/// leaves either the old file or the new one, never half of one; on an error the `.tmp` file is
/// removed.
///
/// # Errors
/// [`ExchangeError::Io`].
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ExchangeError> {
    let tmp = with_suffix(path, ".tmp");
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| ExchangeError::Io { path: p, source }
    };
    let written = (|| {
        let mut f = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        drop(f);
        std::fs::rename(&tmp, path).map_err(io(path))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return written;
    }
    sync_dir(parent_dir(path)).map_err(io(parent_dir(path)))
}

/// Flushes a folder's entries (a rename in it) to disk. Only Unix can open a folder as a file;
/// elsewhere this does nothing.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Checks, before any work is done, that a file can be written at `path` (by
/// [`write_atomic`] or a plain write): `path` is not a folder, its folder exists and accepts a
/// new file, and an existing `path` is writable. Probes with a uniquely named empty file in the
/// folder, removed again; nothing else is created or changed.
///
/// # Errors
/// [`ExchangeError::Unwritable`] saying why.
pub fn check_writable(path: &Path) -> Result<(), ExchangeError> {
    let unwritable = |reason: String| ExchangeError::Unwritable {
        path: path.to_path_buf(),
        reason,
    };
    if path.is_dir() {
        return Err(unwritable(
            "is a folder; give a file name in it".to_string(),
        ));
    }
    let dir = parent_dir(path);
    if !dir.is_dir() {
        return Err(unwritable(format!(
            "the folder {} does not exist",
            dir.display()
        )));
    }
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let probe = dir.join(format!(".{name}.{}.probe", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(f) => {
            drop(f);
            let _ = std::fs::remove_file(&probe);
        }
        Err(e) => {
            return Err(unwritable(format!(
                "cannot create a file in the folder {}: {e}",
                dir.display()
            )))
        }
    }
    if path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| unwritable(format!("cannot be overwritten: {e}")))?;
    }
    Ok(())
}

/// Checks that every model tensor of `plan` (training state, whose elements may be raw bits,
/// is not checked: see [`is_training_state`]) is finite in `persistent`.
///
/// # Shapes
/// `persistent: [persistent_elems]`.
///
/// # Errors
/// [`ExchangeError::NonFiniteParameter`] naming the first non-finite element.
pub fn check_finite_parameters(plan: &RtPlan<'_>, persistent: &[f32]) -> Result<(), ExchangeError> {
    let all: Vec<&str> = plan.parameters().map(|b| b.name).collect();
    for b in plan
        .parameters()
        .filter(|b| !is_training_state(b.name, &all))
    {
        let values = persistent.get(b.range()).unwrap_or_default();
        if let Some((element, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
            return Err(ExchangeError::NonFiniteParameter {
                name: b.name.to_string(),
                element,
                value,
            });
        }
    }
    Ok(())
}

/// The checkpoint blob of a model's whole persistent region (see
/// `tapeplan_runtime::write_checkpoint`), `checkpoint_bytes(plan)` long.
///
/// # Errors
/// [`ExchangeError::Checkpoint`] (cannot happen for a model's own region).
pub fn checkpoint_of(model: &RuntimeModel<'_>, sequence: u32) -> Result<Vec<u8>, ExchangeError> {
    let plan = model.plan();
    let mut buf = vec![0u8; tapeplan_runtime::checkpoint_bytes(plan)];
    let n = tapeplan_runtime::write_checkpoint(plan, model.persistent(), sequence, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

/// Restores a checked checkpoint into a [`RuntimeModel`] freshly made from its plan (its
/// persistent region all `+0.0`), through the model's parameters. Afterwards the model's
/// persistent region equals the checkpoint's payload bit for bit: every element outside the
/// parameters must be `+0.0` in the checkpoint (no instruction can write one, since a plan
/// writes the persistent region only through parameter updates), and is checked before
/// anything is loaded.
///
/// Firmware and other users of a `tapeplan_runtime::Session` call
/// `Checkpoint::restore` instead, which copies the whole region.
///
/// # Errors
/// [`ExchangeError::Checkpoint`] for a checkpoint of another plan;
/// [`ExchangeError::NonFiniteParameter`] for a diverged model ([`check_finite_parameters`]);
/// [`ExchangeError::UnboundState`]; [`ExchangeError::Train`]. The model is unchanged on error.
pub fn restore_into_model(
    model: &mut RuntimeModel<'_>,
    ckpt: &Checkpoint<'_>,
) -> Result<(), ExchangeError> {
    let plan = *model.plan();
    ckpt.check_plan(&plan)?;
    let values: Vec<f32> = ckpt.values().collect();
    check_finite_parameters(&plan, &values)?;
    let mut bound = vec![false; values.len()];
    for b in plan.parameters() {
        if let Some(s) = bound.get_mut(b.range()) {
            s.fill(true);
        }
    }
    if let Some(element) = values
        .iter()
        .zip(&bound)
        .position(|(v, &b)| !b && v.to_bits() != 0)
    {
        return Err(ExchangeError::UnboundState { element });
    }
    for b in plan.parameters() {
        model.load_parameter(b.name, &values[b.range()])?;
    }
    Ok(())
}

/// `tapeplan export`: the safetensors file of the model tensors saved in checkpoint
/// `ckpt_bytes` of `plan`, keys renamed by `renames`.
///
/// # Errors
/// [`ExchangeError::Checkpoint`] for a rejected checkpoint or one of another plan; as
/// [`export_plan_params`].
pub fn export_checkpoint(
    plan: &RtPlan<'_>,
    ckpt_bytes: &[u8],
    renames: &[Rename],
) -> Result<Vec<u8>, ExchangeError> {
    let ckpt = Checkpoint::parse(ckpt_bytes)?;
    ckpt.check_plan(plan)?;
    let values: Vec<f32> = ckpt.values().collect();
    export_plan_params_renamed(plan, &values, renames)
}

/// A new persistent region for `plan`: `base` (a fresh model's region, or zeros) with every
/// model tensor (`crate::model::run::plan_model_tensors`: the parameters and buffers, not the
/// optimizer's state) replaced by a device transcript's final values of the same name
/// (`crate::exec::transcript::final_parameters`), checked finite.
///
/// # Shapes
/// `base: [persistent_elems]`; each of `params` `[elems of the plan's tensor of that name]`;
/// answers `[persistent_elems]`.
///
/// # Errors
/// [`ExchangeError::TranscriptParameters`] naming a model tensor the transcript does not hold,
/// a name in the transcript the plan has no model tensor for, or another element count;
/// [`ExchangeError::NonFiniteParameter`] for a diverged device.
pub fn persistent_from_transcript(
    plan: &RtPlan<'_>,
    base: &[f32],
    params: &[(String, Vec<f32>)],
) -> Result<Vec<f32>, ExchangeError> {
    let tensors = crate::model::run::plan_model_tensors(plan);
    let bad = |m: String| ExchangeError::TranscriptParameters(m);
    if let Some((name, _)) = params
        .iter()
        .find(|(n, _)| !tensors.iter().any(|(t, _)| t == n))
    {
        return Err(bad(format!(
            "it holds {name:?}, which is not a model tensor of the plan (the plan's: {})",
            tensors
                .iter()
                .map(|(t, _)| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let mut values = base.to_vec();
    for b in plan.parameters() {
        if !tensors.iter().any(|(t, _)| t == b.name) {
            continue;
        }
        let Some((_, v)) = params.iter().find(|(n, _)| n == b.name) else {
            return Err(bad(format!(
                "it has no `param {}` lines (the plan's {} {})",
                b.name, b.name, b.shape
            )));
        };
        if v.len() != b.shape.elems() {
            return Err(bad(format!(
                "`param {}` has {} values, the plan's {} {} has {}",
                b.name,
                v.len(),
                b.name,
                b.shape,
                b.shape.elems()
            )));
        }
        let Some(slot) = values.get_mut(b.range()) else {
            return Err(bad(format!(
                "{} lies outside the persistent region",
                b.name
            )));
        };
        slot.copy_from_slice(v);
    }
    check_finite_parameters(plan, &values)?;
    Ok(values)
}

/// `tapeplan import`: a checkpoint of `plan` whose model tensors come from the safetensors
/// `st_bytes`, and whose other state (optimizer moments, generator, step counter) and
/// `sequence` come from checkpoint `base`; without one, from a fresh [`RuntimeModel`] of the
/// plan (its `init` entry run, if it has one) and 0.
///
/// # Errors
/// [`ExchangeError::Checkpoint`] for a rejected base; [`ExchangeError::Train`] when the plan
/// cannot make a [`RuntimeModel`]; [`ExchangeError::NonFiniteParameter`] when a parameter of
/// the result is not finite ([`check_finite_parameters`]); as [`import_into_persistent`].
pub fn import_to_checkpoint(
    plan: &RtPlan<'_>,
    st_bytes: &[u8],
    base: Option<&[u8]>,
) -> Result<Vec<u8>, ExchangeError> {
    import_to_checkpoint_renamed(plan, st_bytes, base, &[])
}

/// [`import_to_checkpoint`] with the file's keys renamed by `renames`.
///
/// # Errors
/// As [`import_to_checkpoint`] and [`import_safetensors_renamed`].
pub fn import_to_checkpoint_renamed(
    plan: &RtPlan<'_>,
    st_bytes: &[u8],
    base: Option<&[u8]>,
    renames: &[Rename],
) -> Result<Vec<u8>, ExchangeError> {
    let (values, sequence) = match base {
        Some(b) => {
            let ckpt = Checkpoint::parse(b)?;
            ckpt.check_plan(plan)?;
            (ckpt.values().collect(), ckpt.sequence())
        }
        None => (RuntimeModel::new(plan.bytes())?.persistent().to_vec(), 0),
    };
    let persistent = import_into_persistent_renamed(plan, &values, st_bytes, renames)?;
    check_finite_parameters(plan, &persistent)?;
    let mut buf = vec![0u8; tapeplan_runtime::checkpoint_bytes(plan)];
    let n = tapeplan_runtime::write_checkpoint(plan, &persistent, sequence, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}
