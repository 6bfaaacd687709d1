//! Exchange with PyTorch: a plan's MLP parameters as a `safetensors` file with the names,
//! shapes and layouts of a PyTorch `nn.Sequential` of `nn.Linear` layers, and host-side
//! checkpoint files (the runtime's `TPCK` blobs, `docs/checkpoints.md`).
//!
//! # The mapping
//!
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
//! on bits. Parameters with other names (optimizer moments, generator state, step counters)
//! are training state, not model weights: export leaves them out, import leaves them as they
//! were. The file's `__metadata__` carries `format = pt`, the plan's id, the layer widths and
//! the hidden activation, so `scripts/check_export.py` can rebuild the forward pass.

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
    /// The plan has no `w{k}`/`b{k}` parameter to exchange.
    #[error("the plan has no dense-layer parameters (w1, b1, …)")]
    NoLayers,
    /// The file says (`tapeplan.activation`) it was exported from a model with another hidden
    /// activation than the plan's: same shapes, another function.
    #[error("the file's parameters are of a {file} model, the plan's activation is {plan}")]
    Activation {
        /// The file's `tapeplan.activation`.
        file: String,
        /// The plan's (see `forward_activation`).
        plan: &'static str,
    },
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

/// The safetensors bytes of `params`' dense layers under PyTorch names and layouts (see the
/// module docs); parameters that are not `w{k}`/`b{k}` are left out. `metadata` is added to
/// the file's `__metadata__` after `format = pt` and `tapeplan.layers`.
///
/// # Errors
/// [`ExchangeError::NotDense`] for a `w{k}` that is not a matrix or a `b{k}` that is not a
/// vector; [`ExchangeError::NoLayers`] when nothing maps; [`ExchangeError::Safetensors`].
pub fn export_safetensors(
    params: &[Param],
    metadata: &[(&str, String)],
) -> Result<Vec<u8>, ExchangeError> {
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for p in params {
        let Some((tname, role)) = torch_name(&p.name) else {
            continue;
        };
        let shape = torch_shape(&p.name, role, p.shape)?;
        let values = match role {
            Role::Weight => transpose(&p.values, p.shape.dims()[0], p.shape.dims()[1]),
            Role::Bias => p.values.clone(),
        };
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        tensors.push((tname, shape, bytes));
    }
    if tensors.is_empty() {
        return Err(ExchangeError::NoLayers);
    }
    let views = tensors
        .iter()
        .map(|(n, s, b)| Ok((n.as_str(), TensorView::new(Dtype::F32, s.clone(), b)?)))
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    let widths = layer_widths(params);
    let mut meta: HashMap<String, String> = HashMap::new();
    meta.insert("format".into(), "pt".into());
    meta.insert(
        "tapeplan.layers".into(),
        widths
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(","),
    );
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

/// Reads the dense-layer parameters named in `params` from safetensors `bytes` (PyTorch names
/// and layouts, see the module docs) and overwrites their `values`; parameters that are not
/// `w{k}`/`b{k}` are left as they are. Strict, like PyTorch's `load_state_dict(strict=True)`:
/// every mapped parameter must be in the file and the file must hold nothing else.
///
/// # Errors
/// [`ExchangeError::Safetensors`] for malformed bytes; [`ExchangeError::MissingTensor`],
/// [`ExchangeError::UnexpectedTensor`], [`ExchangeError::Dtype`] (only `F32` is read),
/// [`ExchangeError::Shape`], [`ExchangeError::NotDense`], [`ExchangeError::NoLayers`].
/// `params` is unchanged on error.
pub fn import_safetensors(bytes: &[u8], params: &mut [Param]) -> Result<(), ExchangeError> {
    let st = SafeTensors::deserialize(bytes)?;
    let mut wanted: HashMap<String, usize> = HashMap::new();
    let mut loaded: Vec<(usize, Vec<f32>)> = Vec::new();
    for (i, p) in params.iter().enumerate() {
        let Some((tname, role)) = torch_name(&p.name) else {
            continue;
        };
        let expected = torch_shape(&p.name, role, p.shape)?;
        let view = st
            .tensor(&tname)
            .map_err(|_| ExchangeError::MissingTensor {
                torch_name: tname.clone(),
                name: p.name.clone(),
            })?;
        if view.dtype() != Dtype::F32 {
            return Err(ExchangeError::Dtype {
                name: tname,
                dtype: view.dtype(),
            });
        }
        if view.shape() != expected.as_slice() {
            return Err(ExchangeError::Shape {
                name: tname,
                expected,
                found: view.shape().to_vec(),
            });
        }
        let values: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let values = match role {
            Role::Weight => transpose(&values, expected[0], expected[1]),
            Role::Bias => values,
        };
        wanted.insert(tname, i);
        loaded.push((i, values));
    }
    if loaded.is_empty() {
        return Err(ExchangeError::NoLayers);
    }
    let mut names = st.names();
    names.sort_unstable();
    if let Some(extra) = names.into_iter().find(|n| !wanted.contains_key(*n)) {
        return Err(ExchangeError::UnexpectedTensor(extra.to_string()));
    }
    for (i, v) in loaded {
        params[i].values = v;
    }
    Ok(())
}

/// The safetensors file of a plan's dense parameters with their values from `persistent`,
/// with metadata `tapeplan.plan_id` (8 hex digits) and `tapeplan.activation`
/// ([`forward_activation`]).
///
/// # Errors
/// As [`export_safetensors`].
pub fn export_plan_params(plan: &RtPlan<'_>, persistent: &[f32]) -> Result<Vec<u8>, ExchangeError> {
    export_safetensors(
        &params_of(plan, persistent),
        &[
            ("tapeplan.plan_id", format!("{:08x}", plan.plan_id())),
            (
                "tapeplan.activation",
                forward_activation(plan.bytes()).to_string(),
            ),
        ],
    )
}

/// A new persistent region for `plan`: `base` (for example a checkpoint's values, or zeros)
/// with the dense parameters replaced by those in the safetensors `bytes`.
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
    import_safetensors(bytes, &mut params)?;
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

/// Checks that every trainable parameter of `plan` (a name without a `.`: optimizer and
/// generator state, whose elements may be raw bits, are not checked) is finite in `persistent`.
///
/// # Shapes
/// `persistent: [persistent_elems]`.
///
/// # Errors
/// [`ExchangeError::NonFiniteParameter`] naming the first non-finite element.
pub fn check_finite_parameters(plan: &RtPlan<'_>, persistent: &[f32]) -> Result<(), ExchangeError> {
    for b in plan
        .parameters()
        .filter(|b| !crate::model::optim::is_state_name(b.name))
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

/// `tapeplan export`: the safetensors file of the dense parameters saved in checkpoint
/// `ckpt_bytes` of `plan`.
///
/// # Errors
/// [`ExchangeError::Checkpoint`] for a rejected checkpoint or one of another plan; as
/// [`export_plan_params`].
pub fn export_checkpoint(plan: &RtPlan<'_>, ckpt_bytes: &[u8]) -> Result<Vec<u8>, ExchangeError> {
    let ckpt = Checkpoint::parse(ckpt_bytes)?;
    ckpt.check_plan(plan)?;
    let values: Vec<f32> = ckpt.values().collect();
    export_plan_params(plan, &values)
}

/// `tapeplan import`: a checkpoint of `plan` whose dense parameters come from the safetensors
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
    let (values, sequence) = match base {
        Some(b) => {
            let ckpt = Checkpoint::parse(b)?;
            ckpt.check_plan(plan)?;
            (ckpt.values().collect(), ckpt.sequence())
        }
        None => (RuntimeModel::new(plan.bytes())?.persistent().to_vec(), 0),
    };
    let persistent = import_into_persistent(plan, &values, st_bytes)?;
    check_finite_parameters(plan, &persistent)?;
    let mut buf = vec![0u8; tapeplan_runtime::checkpoint_bytes(plan)];
    let n = tapeplan_runtime::write_checkpoint(plan, &persistent, sequence, &mut buf)?;
    buf.truncate(n);
    Ok(buf)
}
