//! The writer: the planner's [`Schedule`] serialized to the binary plan format
//! (`docs/plan-format.md`), through the record encoders `tapeplan-core` shares with the
//! runtime's decoder.

use tapeplan_core::format::{
    self, BindingKind, BindingRecord, EncodedAttr, EntryRecord, Header, InstrRecord, TensorRecord,
    ALL_ENTRIES, BINDING_RECORD_BYTES, ENTRY_RECORD_BYTES, HEADER_BYTES, INSTR_RECORD_BYTES,
    TENSOR_RECORD_BYTES,
};

use crate::plan::Schedule;

fn name(n: &str) -> [u8; format::NAME_BYTES] {
    // The planner checked every name with the same encoder.
    format::encode_name(n).unwrap_or([b'?'; format::NAME_BYTES])
}

fn push<const N: usize>(out: &mut Vec<u8>, f: impl FnOnce(&mut [u8])) {
    let mut rec = [0u8; N];
    f(&mut rec);
    out.extend_from_slice(&rec);
}

impl Schedule {
    /// The plan's bytes. The header's `plan_id` is the CRC-32 of every byte after the header
    /// (the records and the attribute section: the plan's content) followed, for a plan with
    /// flags (the `fast` math profile), by the flags word's four little-endian bytes, so the two
    /// profiles of one model have distinct identities; its `crc32` covers the whole plan.
    /// Attributes are encoded by `tapeplan_core::format::encode_attr`, their blocks laid out in
    /// instruction order.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut body = Vec::new();
        for t in &self.tensors {
            push::<TENSOR_RECORD_BYTES>(&mut body, |b| {
                TensorRecord {
                    offset_elems: t.offset_elems as u32,
                    rank: t.shape.rank() as u8,
                    kind: t.kind as u8,
                    reserved: 0,
                    dims: t.shape.dims_u32(),
                }
                .encode(b)
            });
        }
        let mut n_instrs = 0u32;
        let mut entry_records = Vec::new();
        let mut attr_section: Vec<u32> = Vec::new();
        for e in &self.entries {
            entry_records.push(EntryRecord {
                name: name(&e.name),
                first_instr: n_instrs,
                n_instrs: e.instrs.len() as u32,
            });
            for i in &e.instrs {
                let attr_word = match format::encode_attr(&i.attr) {
                    EncodedAttr::Inline(word) => word,
                    EncodedAttr::Block { words, len } => {
                        let at = attr_section.len() as u32;
                        attr_section.push(len as u32);
                        attr_section.extend_from_slice(&words[..len]);
                        at
                    }
                };
                push::<INSTR_RECORD_BYTES>(&mut body, |b| {
                    InstrRecord {
                        opcode: i.op.to_u8(),
                        n_args: i.op.arity() as u8,
                        flags: if i.fuse_next { format::FUSE_NEXT } else { 0 },
                        out: i.out,
                        args: i.args,
                        attr_word,
                    }
                    .encode(b)
                });
                n_instrs += 1;
            }
        }
        for r in &entry_records {
            push::<ENTRY_RECORD_BYTES>(&mut body, |b| r.encode(b));
        }
        let mut n_bindings = 0u32;
        let mut binding = |body: &mut Vec<u8>, n: &str, kind: BindingKind, entry: u32, t: u32| {
            push::<BINDING_RECORD_BYTES>(body, |b| {
                BindingRecord {
                    name: name(n),
                    kind: kind as u8,
                    reserved: [0; 3],
                    entry,
                    tensor: t,
                }
                .encode(b)
            });
            n_bindings += 1;
        };
        for (n, t, _) in &self.parameters {
            binding(&mut body, n, BindingKind::Parameter, ALL_ENTRIES, *t);
        }
        for (ei, e) in self.entries.iter().enumerate() {
            let ei = ei as u32;
            for (n, t) in &e.inputs {
                binding(&mut body, n, BindingKind::Input, ei, *t);
            }
            for (n, t) in &e.outputs {
                binding(&mut body, n, BindingKind::Output, ei, *t);
            }
            for (n, t) in &e.updates {
                binding(&mut body, n, BindingKind::Update, ei, *t);
            }
        }
        for w in &attr_section {
            body.extend_from_slice(&w.to_le_bytes());
        }
        let total = HEADER_BYTES + body.len();
        let flags = self.math.flags() | self.arith.flags();
        let plan_id = if flags == 0 {
            format::CRC32.checksum(&body)
        } else {
            let mut digest = format::CRC32.digest();
            digest.update(&body);
            digest.update(&flags.to_le_bytes());
            digest.finalize()
        };
        let header = Header {
            magic: format::MAGIC,
            version: format::VERSION,
            header_bytes: HEADER_BYTES as u16,
            total_bytes: total as u32,
            crc32: 0,
            arena_elems: self.arena_elems as u32,
            persistent_elems: self.persistent_elems as u32,
            n_tensors: self.tensors.len() as u32,
            n_instrs,
            n_entries: self.entries.len() as u32,
            n_bindings,
            flags,
            plan_id,
            attr_words: attr_section.len() as u32,
        };
        let mut out = vec![0u8; HEADER_BYTES];
        header.encode(&mut out);
        out.extend_from_slice(&body);
        let crc = format::plan_crc(&out).unwrap_or(0);
        out[format::CRC_OFFSET..format::CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        out
    }
}
