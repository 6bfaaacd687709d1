//! A host-side view of plan bytes, for listings and for tools that need a plan's bindings and
//! shapes. It decodes with the same record decoders as the runtime; callers validate the bytes
//! with the runtime first (`tapeplan_runtime::Plan::parse`).

use tapeplan_core::format::{
    decode_name, BindingKind, BindingRecord, EntryRecord, Header, InstrRecord, TensorKind,
    TensorRecord, BINDING_RECORD_BYTES, ENTRY_RECORD_BYTES, HEADER_BYTES, INSTR_RECORD_BYTES,
    TENSOR_RECORD_BYTES,
};
use tapeplan_core::{Opcode, Shape};

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

/// A decoded entry.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedEntry {
    /// The name.
    pub name: String,
    /// The instructions.
    pub instrs: Vec<InstrRecord>,
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

fn shape_of(t: &TensorRecord) -> Shape {
    Shape::from_u32(t.rank as usize, t.dims).unwrap_or(Shape::SCALAR)
}

impl PlanInfo {
    /// Decodes validated plan bytes.
    pub fn decode(bytes: &[u8]) -> PlanInfo {
        let header = Header::decode(bytes);
        let mut at = HEADER_BYTES;
        let mut take = |n: usize| {
            let s = bytes.get(at..at + n).unwrap_or(&[]);
            at += n;
            s
        };
        let tensors: Vec<TensorRecord> = (0..header.n_tensors)
            .map(|_| TensorRecord::decode(take(TENSOR_RECORD_BYTES)))
            .collect();
        let instrs: Vec<InstrRecord> = (0..header.n_instrs)
            .map(|_| InstrRecord::decode(take(INSTR_RECORD_BYTES)))
            .collect();
        let entries = (0..header.n_entries)
            .map(|_| {
                let e = EntryRecord::decode(take(ENTRY_RECORD_BYTES));
                let lo = (e.first_instr as usize).min(instrs.len());
                let hi = (lo + e.n_instrs as usize).min(instrs.len());
                DecodedEntry {
                    name: decode_name(&e.name).unwrap_or("?").to_string(),
                    instrs: instrs[lo..hi].to_vec(),
                }
            })
            .collect();
        let bindings = (0..header.n_bindings)
            .map(|_| {
                let b = BindingRecord::decode(take(BINDING_RECORD_BYTES));
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

    /// The math profile the plan records (header flag bit 0).
    pub fn math(&self) -> tapeplan_core::MathProfile {
        tapeplan_core::MathProfile::from_flags(self.header.flags)
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

    /// A listing: the header, each entry's instructions (index, opcode, output and argument
    /// tensors, attribute, output shape and arena offset), then the bindings.
    pub fn listing(&self) -> String {
        use std::fmt::Write;
        let h = &self.header;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "plan v{}: id {:#010x}, math {}, arena {} elems ({} bytes), persistent {} elems, {} tensors, {} instructions",
            h.version,
            h.plan_id,
            self.math(),
            h.arena_elems,
            h.arena_elems as usize * 4,
            h.persistent_elems,
            h.n_tensors,
            h.n_instrs
        );
        for e in &self.entries {
            let _ = writeln!(
                out,
                "entry {} ({} instructions; `@N` is the output's arena offset in f32 elements, `rN` a register slot, `┬ │ └` a fused chain)",
                e.name,
                e.instrs.len()
            );
            let mut in_chain = false;
            for (k, i) in e.instrs.iter().enumerate() {
                let fused = i.flags & tapeplan_core::format::FUSE_NEXT != 0;
                let mark = match (in_chain, fused) {
                    (false, true) => '┬',
                    (true, true) => '│',
                    (true, false) => '└',
                    (false, false) => ' ',
                };
                in_chain = fused;
                let op = Opcode::from_u8(i.opcode).map(Opcode::name).unwrap_or("?");
                let args: Vec<String> = i
                    .args
                    .iter()
                    .take(i.n_args as usize)
                    .map(|a| format!("t{a}"))
                    .collect();
                let t = self.tensors.get(i.out as usize);
                let shape = t.map(shape_of).unwrap_or(Shape::SCALAR);
                let attr = match Opcode::from_u8(i.opcode) {
                    Some(Opcode::Fill) => format!("value={}", f32::from_bits(i.attr)),
                    Some(Opcode::Pow) => format!("p={}", f32::from_bits(i.attr)),
                    Some(op) if tapeplan_core::ops::uses_attr(op) => format!("attr={:#x}", i.attr),
                    _ => String::new(),
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
