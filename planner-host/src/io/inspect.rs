//! A host-side view of plan bytes, for listings and for tools that need a plan's bindings and
//! shapes. It decodes with the same decoders as the runtime (`tapeplan_core::format`: the
//! sections, the records, [`Instr::decode`] for instructions and their attributes); callers
//! validate the bytes with the runtime first (`tapeplan_runtime::Plan::parse`).

use tapeplan_core::format::{
    decode_name, BindingKind, BindingRecord, EntryRecord, Header, Instr, InstrRecord, Sections,
    TensorKind, TensorRecord, BINDING_RECORD_BYTES, ENTRY_RECORD_BYTES, INSTR_RECORD_BYTES,
    TENSOR_RECORD_BYTES,
};
use tapeplan_core::{Attr, Shape};

/// A decoded binding.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedBinding {
    /// The name.
    pub name: String,
    /// The kind.
    pub kind: BindingKind,
    /// The entry, `None` for every entry.
    pub entry: Option<usize>,
    /// The tensor.
    pub tensor: usize,
    /// The tensor's shape.
    pub shape: Shape,
}

/// A decoded entry of a plan.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedEntry {
    /// The name.
    pub name: String,
    /// The instructions.
    pub instrs: Vec<Instr>,
    /// How many of its Adam and AdamW updates this build's runtime runs in one pass
    /// (`tapeplan_runtime::catalog::one_pass_adam_updates`; 0 for bytes that do not validate).
    pub one_pass_adam_updates: usize,
}

/// A plan's records, decoded.
#[derive(Clone, Debug)]
pub struct PlanInfo {
    /// The header.
    pub header: Header,
    /// The tensors.
    pub tensors: Vec<TensorRecord>,
    /// The entries.
    pub entries: Vec<DecodedEntry>,
    /// The bindings.
    pub bindings: Vec<DecodedBinding>,
}

/// Instructions `PlanInfo::model_summary` counts as layers.
const LAYER_OPS: &[&str] = &[
    "matmul",
    "conv",
    "conv_transpose",
    "max_pool",
    "avg_pool",
    "gather",
];

/// Instructions `PlanInfo::model_summary` counts as activations.
const ACTIVATION_OPS: &[&str] = &["tanh", "relu", "sigmoid", "softplus", "erf"];

/// The layer sizes of an MLP: parameters in pairs, each a weight and a bias with chaining
/// shapes, named either as the planner's MLP names them (`w1 [d0, d1], b1 [d1], …`) or as
/// PyTorch's `nn.Sequential` of `nn.Linear` does (`0.weight [d1, d0], 0.bias [d1], 2.weight …`,
/// any prefix per layer); else `None`.
fn mlp_sizes(weights: &[&DecodedBinding]) -> Option<Vec<usize>> {
    if weights.is_empty() || !weights.len().is_multiple_of(2) {
        return None;
    }
    let mut sizes: Vec<usize> = Vec::new();
    for (k, pair) in weights.chunks(2).enumerate() {
        let (w, b) = (pair[0], pair[1]);
        if w.shape.rank() != 2 || b.shape.rank() != 1 {
            return None;
        }
        let (rows, cols) = (w.shape.dim(0)?, w.shape.dim(1)?);
        let torch_prefix = w.name.strip_suffix(".weight");
        let (d_in, d_out) = if w.name == format!("w{}", k + 1) && b.name == format!("b{}", k + 1) {
            (rows, cols)
        } else if torch_prefix.is_some_and(|p| b.name.strip_suffix(".bias") == Some(p)) {
            (cols, rows)
        } else {
            return None;
        };
        if b.shape.dim(0)? != d_out || sizes.last().is_some_and(|&last| last != d_in) {
            return None;
        }
        if sizes.is_empty() {
            sizes.push(d_in);
        }
        sizes.push(d_out);
    }
    Some(sizes)
}

fn shape_of(t: &TensorRecord) -> Shape {
    Shape::from_u32(t.rank as usize, t.dims).unwrap_or(Shape::SCALAR)
}

impl PlanInfo {
    /// Decodes validated plan bytes.
    pub fn decode(bytes: &[u8]) -> PlanInfo {
        let header = Header::decode(bytes);
        let at = Sections::of(&header).unwrap_or(Sections {
            tensors_at: 0,
            instrs_at: 0,
            entries_at: 0,
            bindings_at: 0,
            attrs_at: 0,
            end_at: 0,
        });
        let records = |start: usize, size: usize, n: u32| {
            (0..n as usize).map(move |k| {
                let lo = start + k * size;
                bytes.get(lo..lo + size).unwrap_or(&[])
            })
        };
        let attr_section = bytes.get(at.attrs_at..at.end_at).unwrap_or(&[]);
        let tensors: Vec<TensorRecord> =
            records(at.tensors_at, TENSOR_RECORD_BYTES, header.n_tensors)
                .map(TensorRecord::decode)
                .collect();
        let instrs: Vec<Instr> = records(at.instrs_at, INSTR_RECORD_BYTES, header.n_instrs)
            .map(|b| {
                let rec = InstrRecord::decode(b);
                let out = tensors
                    .get(rec.out as usize)
                    .map_or(Shape::SCALAR, shape_of);
                // Validated bytes decode; a placeholder keeps a listing of anything else going.
                Instr::decode(&rec, attr_section, out).unwrap_or(Instr {
                    op: tapeplan_core::Opcode::Input,
                    flags: rec.flags,
                    out: rec.out,
                    args: rec.args,
                    attr: Attr::None,
                })
            })
            .collect();
        let plan = tapeplan_runtime::Plan::parse_alloc(bytes).ok();
        let entries = records(at.entries_at, ENTRY_RECORD_BYTES, header.n_entries)
            .enumerate()
            .map(|(index, b)| {
                let e = EntryRecord::decode(b);
                let lo = (e.first_instr as usize).min(instrs.len());
                let hi = (lo + e.n_instrs as usize).min(instrs.len());
                DecodedEntry {
                    name: decode_name(&e.name).unwrap_or("?").to_string(),
                    instrs: instrs[lo..hi].to_vec(),
                    one_pass_adam_updates: plan.as_ref().map_or(0, |p| {
                        p.entries().nth(index).map_or(0, |e| {
                            tapeplan_runtime::catalog::one_pass_adam_updates(p, e)
                        })
                    }),
                }
            })
            .collect();
        let bindings = records(at.bindings_at, BINDING_RECORD_BYTES, header.n_bindings)
            .map(|b| {
                let b = BindingRecord::decode(b);
                let t = tensors.get(b.tensor as usize);
                DecodedBinding {
                    name: decode_name(&b.name).unwrap_or("?").to_string(),
                    kind: BindingKind::from_u8(b.kind).unwrap_or(BindingKind::Input),
                    entry: (b.entry != tapeplan_core::format::ALL_ENTRIES)
                        .then_some(b.entry as usize),
                    tensor: b.tensor as usize,
                    shape: t.map(shape_of).unwrap_or(Shape::SCALAR),
                }
            })
            .collect();
        PlanInfo {
            header,
            tensors,
            entries,
            bindings,
        }
    }

    /// True when an instruction starts or continues a fused chain (flag
    /// [`FUSE_NEXT`](tapeplan_core::format::FUSE_NEXT)): a runtime without its fused-chain
    /// executor (feature `fusion`) rejects such a plan.
    pub fn is_fused(&self) -> bool {
        self.entries
            .iter()
            .flat_map(|e| &e.instrs)
            .any(|i| i.flags & tapeplan_core::format::FUSE_NEXT != 0)
    }

    /// The math profile the plan records (header flag bit 0).
    pub fn math(&self) -> tapeplan_core::MathProfile {
        tapeplan_core::MathProfile::from_flags(self.header.flags)
    }

    /// The arithmetic profile the plan records (header flag bit 1).
    pub fn arith(&self) -> tapeplan_core::ArithProfile {
        tapeplan_core::ArithProfile::from_flags(self.header.flags)
    }

    /// The parameters' names and shapes, in binding order.
    pub fn parameters(&self) -> Vec<(String, Shape)> {
        self.bindings
            .iter()
            .filter(|b| b.kind == BindingKind::Parameter)
            .map(|b| (b.name.clone(), b.shape))
            .collect()
    }

    /// The shape of entry `entry`'s binding of `kind` named `name`.
    pub fn binding_shape(&self, entry: &str, kind: BindingKind, name: &str) -> Option<Shape> {
        let ei = self.entries.iter().position(|e| e.name == entry)?;
        self.bindings
            .iter()
            .find(|b| b.kind == kind && b.entry == Some(ei) && b.name == name)
            .map(|b| b.shape)
    }

    /// What model the plan is, read from its bindings and its `forward` entry: lines for the
    /// listing.
    ///
    /// - `model:` the forward pass's inputs and outputs, the parameters it reads (the model's
    ///   weights, with their count of elements), the layers and activations its instructions
    ///   speak, and for parameters named `w1, b1, …, wK, bK` whose shapes chain, the MLP's
    ///   layer sizes;
    /// - `training:` each other entry's inputs and outputs and how many persistent tensors it
    ///   updates, the task (`labels`: classification, `y`: regression), and the training state
    ///   (persistent tensors the forward pass does not read: optimizer moments, step counters,
    ///   the dropout generator).
    pub fn model_summary(&self) -> Vec<String> {
        let forward = self.entries.iter().position(|e| e.name == "forward");
        let params: Vec<&DecodedBinding> = self
            .bindings
            .iter()
            .filter(|b| b.kind == BindingKind::Parameter)
            .collect();
        let read_by_forward = |b: &DecodedBinding| {
            forward.and_then(|f| self.entries.get(f)).is_none_or(|e| {
                e.instrs
                    .iter()
                    .any(|i| i.arg_indices().iter().any(|&a| a as usize == b.tensor))
            })
        };
        let (weights, state): (Vec<&DecodedBinding>, Vec<&DecodedBinding>) =
            params.iter().partition(|b| read_by_forward(b));
        let elems = |bs: &[&DecodedBinding]| -> usize { bs.iter().map(|b| b.shape.elems()).sum() };
        let named = |bs: &[&DecodedBinding]| -> String {
            bs.iter()
                .map(|b| format!("{} {}", b.name, b.shape))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut lines = Vec::new();
        let mut model = String::from("model:");
        if let Some(f) = forward {
            model.push_str(&format!(" forward {};", self.signature(f)));
        }
        model.push_str(&format!(
            " {} parameters, {} elements ({})",
            weights.len(),
            elems(&weights),
            named(&weights)
        ));
        lines.push(model);
        if let Some(e) = forward.and_then(|f| self.entries.get(f)) {
            let mut ops: Vec<(&str, usize)> = Vec::new();
            for i in &e.instrs {
                let name = i.op.name();
                if LAYER_OPS.contains(&name) || ACTIVATION_OPS.contains(&name) {
                    match ops.iter_mut().find(|(n, _)| *n == name) {
                        Some((_, k)) => *k += 1,
                        None => ops.push((name, 1)),
                    }
                }
            }
            let mut layers = String::from("  layers: ");
            if ops.is_empty() {
                layers.push_str("no matmul, convolution, pooling or activation");
            }
            let counted: Vec<String> = ops.iter().map(|(n, k)| format!("{n} x{k}")).collect();
            layers.push_str(&counted.join(", "));
            let activations: Vec<&str> = ops
                .iter()
                .map(|(n, _)| *n)
                .filter(|n| ACTIVATION_OPS.contains(n))
                .collect();
            if let Some(sizes) = mlp_sizes(&weights) {
                let act = match activations.as_slice() {
                    [] => "no activation".to_string(),
                    acts => acts.join(", "),
                };
                let sizes: Vec<String> = sizes.iter().map(ToString::to_string).collect();
                layers.push_str(&format!("; an MLP {} ({act})", sizes.join("-")));
            }
            lines.push(layers);
        }
        let mut training = String::from("training:");
        for (k, e) in self.entries.iter().enumerate() {
            if Some(k) == forward {
                continue;
            }
            let updates = self
                .bindings
                .iter()
                .filter(|b| b.kind == BindingKind::Update && b.entry == Some(k))
                .count();
            training.push_str(&format!(
                " {} {}, updates {updates} persistent tensors;",
                e.name,
                self.signature(k)
            ));
        }
        let takes = |name: &str| {
            self.bindings
                .iter()
                .any(|b| b.kind == BindingKind::Input && b.name == name)
        };
        training.push_str(if takes("labels") {
            " task: classification (integer labels)"
        } else if takes("y") {
            " task: regression (targets y)"
        } else {
            " task: as the entries say"
        });
        lines.push(training);
        let names: Vec<&str> = state.iter().map(|b| b.name.as_str()).collect();
        lines.push(if state.is_empty() {
            "  state: none besides the parameters".to_string()
        } else {
            format!(
                "  state: {} tensors, {} elements ({})",
                state.len(),
                elems(&state),
                names.join(", ")
            )
        });
        lines
    }

    /// Entry `entry`'s inputs and outputs: `x [32, 64], labels [32] -> loss []`.
    fn signature(&self, entry: usize) -> String {
        let of = |kind: BindingKind| -> String {
            self.bindings
                .iter()
                .filter(|b| b.kind == kind && b.entry == Some(entry))
                .map(|b| format!("{} {}", b.name, b.shape))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let (inputs, outputs) = (of(BindingKind::Input), of(BindingKind::Output));
        if inputs.is_empty() && outputs.is_empty() {
            "(no inputs or outputs)".to_string()
        } else {
            format!("{inputs} -> {outputs}")
        }
    }

    /// A listing: the header, each entry's instructions (index, opcode, output and argument
    /// tensors, attribute, output shape and arena offset), then the bindings.
    pub fn listing(&self) -> String {
        use std::fmt::Write;
        let h = &self.header;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "plan v{}: id {:#010x}, math {}, arith {}, arena {} elems ({} bytes), persistent {} elems, {} tensors, {} instructions",
            h.version,
            h.plan_id,
            self.math(),
            self.arith(),
            h.arena_elems,
            h.arena_elems as usize * 4,
            h.persistent_elems,
            h.n_tensors,
            h.n_instrs
        );
        for line in self.model_summary() {
            let _ = writeln!(out, "{line}");
        }
        for e in &self.entries {
            let _ = writeln!(
                out,
                "entry {} ({} instructions; `@N` is the output's arena offset in f32 elements, `rN` a register slot, `┬ │ └` a fused chain)",
                e.name,
                e.instrs.len()
            );
            if e.one_pass_adam_updates > 0 {
                let _ = writeln!(
                    out,
                    "  ({} Adam updates run as one pass each on hosts: their three chains element by element, the same bits)",
                    e.one_pass_adam_updates
                );
            }
            let mut in_chain = false;
            for (k, i) in e.instrs.iter().enumerate() {
                let fused = i.fuse_next();
                let mark = match (in_chain, fused) {
                    (false, true) => '┬',
                    (true, true) => '│',
                    (true, false) => '└',
                    (false, false) => ' ',
                };
                in_chain = fused;
                let op = i.op.name();
                let args: Vec<String> = i.arg_indices().iter().map(|a| format!("t{a}")).collect();
                let t = self.tensors.get(i.out as usize);
                let shape = t.map(shape_of).unwrap_or(Shape::SCALAR);
                let attr = match i.attr {
                    Attr::Fill { value, .. } => format!("value={value}"),
                    Attr::Pow(p) => format!("p={p}"),
                    Attr::Lr(lr) => format!("lr={lr}"),
                    Attr::Window { axis, start, len } => {
                        format!("axis={axis} start={start} len={len}")
                    }
                    Attr::Conv(c) => c.to_string(),
                    Attr::Axis(axis) | Attr::AxisTo(axis, _) => format!("axis={axis}"),
                    Attr::Pool(w) | Attr::PoolTo(w, _) => format!(
                        "kernel={:?} strides={:?} dilations={:?} pads={:?}{}",
                        w.kernel,
                        w.strides,
                        w.dilations,
                        w.pads,
                        if w.count_include_pad {
                            " count_include_pad"
                        } else {
                            ""
                        }
                    ),
                    Attr::Scan { axes, reverse } => format!("axes={axes:#b} reverse={reverse}"),
                    Attr::None | Attr::Target(_) => String::new(),
                };
                let at = match t {
                    Some(t) if t.kind == TensorKind::Register as u8 => {
                        format!("r{}", t.offset_elems)
                    }
                    Some(t) if t.kind == TensorKind::Persistent as u8 => {
                        format!("@{} (persistent)", t.offset_elems)
                    }
                    t => format!("@{}", t.map(|t| t.offset_elems).unwrap_or(0)),
                };
                let _ = writeln!(
                    out,
                    "{k:>5} {mark} {op:<10} t{:<4} <- {:<12} {attr:<16} {shape:<10} {at}",
                    i.out,
                    args.join(", "),
                );
            }
        }
        let _ = writeln!(out, "bindings");
        for b in &self.bindings {
            let entry = b
                .entry
                .and_then(|e| self.entries.get(e))
                .map(|e| e.name.as_str())
                .unwrap_or("*");
            let _ = writeln!(
                out,
                "  {:<10} {:<12} {:<12} t{:<4} {}",
                format!("{:?}", b.kind).to_lowercase(),
                entry,
                b.name,
                b.tensor,
                b.shape
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(name: &str, dims: &[usize]) -> DecodedBinding {
        DecodedBinding {
            name: name.to_string(),
            kind: BindingKind::Parameter,
            entry: None,
            tensor: 0,
            shape: Shape::new(dims).unwrap(),
        }
    }

    fn sizes(params: &[DecodedBinding]) -> Option<Vec<usize>> {
        let refs: Vec<&DecodedBinding> = params.iter().collect();
        mlp_sizes(&refs)
    }

    #[test]
    fn mlp_sizes_reads_both_namings_and_refuses_the_rest() {
        let planner = [
            param("w1", &[64, 32]),
            param("b1", &[32]),
            param("w2", &[32, 10]),
            param("b2", &[10]),
        ];
        assert_eq!(sizes(&planner), Some(vec![64, 32, 10]));
        // nn.Sequential(Linear(64, 32), Tanh(), Linear(32, 10)): weights are [out, in].
        let torch = [
            param("0.weight", &[32, 64]),
            param("0.bias", &[32]),
            param("2.weight", &[10, 32]),
            param("2.bias", &[10]),
        ];
        assert_eq!(sizes(&torch), Some(vec![64, 32, 10]));
        // Shapes that do not chain, a bias of the wrong width, a missing bias, other names.
        let unchained = [
            param("w1", &[64, 32]),
            param("b1", &[32]),
            param("w2", &[16, 10]),
            param("b2", &[10]),
        ];
        assert_eq!(sizes(&unchained), None);
        assert_eq!(sizes(&[param("w1", &[4, 3]), param("b1", &[4])]), None);
        assert_eq!(sizes(&[param("w1", &[4, 3])]), None);
        assert_eq!(
            sizes(&[param("conv.weight", &[8, 3]), param("fc.bias", &[8])]),
            None
        );
        assert_eq!(sizes(&[]), None);
    }
}
