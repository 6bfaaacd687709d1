//! A test-only plan builder over the core format encoders, a host reference interpreter, and
//! helpers to damage plans and recompute their CRC. The runtime's tests (`tests/runtime/`) and
//! the cross-crate tests (`tapeplan-tests`, as `tapeplan_tests::builder`) include it by path.
#![allow(dead_code, missing_docs)]

use std::collections::HashMap;

use tapeplan_core::format::{
    decode_attr, encode_name, plan_crc, BindingKind, BindingRecord, EntryRecord, Header,
    InstrRecord, Sections, TensorKind, TensorRecord, ALL_ENTRIES, BINDING_RECORD_BYTES, CRC_OFFSET,
    ENTRY_RECORD_BYTES, FUSE_NEXT, HEADER_BYTES, INSTR_RECORD_BYTES, MAGIC, NO_ARG,
    TENSOR_RECORD_BYTES, VERSION,
};
use tapeplan_core::ops::eval;
use tapeplan_core::MathProfile;
use tapeplan_core::{Opcode, Shape};
use tapeplan_runtime::{EntryId, Plan, Session};

#[derive(Clone, Debug, Default)]
pub struct Builder {
    pub arena_elems: u32,
    pub persistent_elems: u32,
    pub plan_id: u32,
    /// The header's flags word (bit 0: the `fast` math profile).
    pub flags: u32,
    pub tensors: Vec<TensorRecord>,
    pub instrs: Vec<InstrRecord>,
    pub entries: Vec<EntryRecord>,
    pub bindings: Vec<BindingRecord>,
    /// The attribute section (`u32` words).
    pub attr_words: Vec<u32>,
}

pub fn dims4(dims: &[u32]) -> [u32; 4] {
    let mut d = [0; 4];
    d[..dims.len()].copy_from_slice(dims);
    d
}

pub fn elems(dims: &[u32]) -> u32 {
    dims.iter().product()
}

impl Builder {
    pub fn new(arena_elems: u32, persistent_elems: u32) -> Builder {
        Builder {
            arena_elems,
            persistent_elems,
            plan_id: 0x5eed_0001,
            // The precise profile, unless this build runs only the fast one.
            flags: if MathProfile::Precise.in_build() {
                0
            } else {
                MathProfile::Fast.flags()
            },
            ..Builder::default()
        }
    }

    pub fn tensor(&mut self, offset_elems: u32, dims: &[u32], kind: TensorKind) -> u32 {
        self.tensors.push(TensorRecord {
            offset_elems,
            rank: dims.len() as u8,
            kind: kind as u8,
            reserved: 0,
            dims: dims4(dims),
        });
        (self.tensors.len() - 1) as u32
    }

    pub fn instr(&mut self, op: Opcode, out: u32, args: &[u32], attr: u32) -> u32 {
        let mut a = [NO_ARG; 3];
        a[..args.len()].copy_from_slice(args);
        self.instrs.push(InstrRecord {
            opcode: op.to_u8(),
            n_args: args.len() as u8,
            flags: 0,
            out,
            args: a,
            attr_word: attr,
        });
        (self.instrs.len() - 1) as u32
    }

    pub fn entry(&mut self, name: &str, first_instr: u32, n_instrs: u32) -> u32 {
        self.entries.push(EntryRecord {
            name: encode_name(name).unwrap(),
            first_instr,
            n_instrs,
        });
        (self.entries.len() - 1) as u32
    }

    pub fn bind(&mut self, name: &str, kind: BindingKind, entry: u32, tensor: u32) {
        self.bindings.push(BindingRecord {
            name: encode_name(name).unwrap(),
            kind: kind as u8,
            reserved: [0; 3],
            entry,
            tensor,
        });
    }

    pub fn param(&mut self, name: &str, tensor: u32) {
        self.bind(name, BindingKind::Parameter, ALL_ENTRIES, tensor);
    }

    pub fn build(&self) -> Vec<u8> {
        let total = HEADER_BYTES
            + TENSOR_RECORD_BYTES * self.tensors.len()
            + INSTR_RECORD_BYTES * self.instrs.len()
            + ENTRY_RECORD_BYTES * self.entries.len()
            + BINDING_RECORD_BYTES * self.bindings.len()
            + 4 * self.attr_words.len();
        let mut b = vec![0u8; total];
        Header {
            magic: MAGIC,
            version: VERSION,
            header_bytes: HEADER_BYTES as u16,
            total_bytes: total as u32,
            crc32: 0,
            arena_elems: self.arena_elems,
            persistent_elems: self.persistent_elems,
            n_tensors: self.tensors.len() as u32,
            n_instrs: self.instrs.len() as u32,
            n_entries: self.entries.len() as u32,
            n_bindings: self.bindings.len() as u32,
            flags: self.flags,
            plan_id: self.plan_id,
            attr_words: self.attr_words.len() as u32,
        }
        .encode(&mut b);
        let mut at = HEADER_BYTES;
        for t in &self.tensors {
            t.encode(&mut b[at..]);
            at += TENSOR_RECORD_BYTES;
        }
        for i in &self.instrs {
            i.encode(&mut b[at..]);
            at += INSTR_RECORD_BYTES;
        }
        for e in &self.entries {
            e.encode(&mut b[at..]);
            at += ENTRY_RECORD_BYTES;
        }
        for x in &self.bindings {
            x.encode(&mut b[at..]);
            at += BINDING_RECORD_BYTES;
        }
        for w in &self.attr_words {
            b[at..at + 4].copy_from_slice(&w.to_le_bytes());
            at += 4;
        }
        assert_eq!(at, total);
        recrc(&mut b);
        b
    }

    /// The records of plan `bytes`: the inverse of [`Builder::build`] (which recomputes the
    /// sizes and the CRC, so they are not kept).
    ///
    /// # Panics
    /// When the bytes are shorter than their header's counts say: call it on plans
    /// `Plan::parse` accepted.
    pub fn decode(bytes: &[u8]) -> Builder {
        let h = Header::decode(bytes);
        let at = Sections::of(&h).unwrap();
        let records = |start: usize, n: u32, size: usize| {
            (0..n as usize).map(move |i| &bytes[start + size * i..start + size * (i + 1)])
        };
        Builder {
            arena_elems: h.arena_elems,
            persistent_elems: h.persistent_elems,
            plan_id: h.plan_id,
            flags: h.flags,
            tensors: records(at.tensors_at, h.n_tensors, TENSOR_RECORD_BYTES)
                .map(TensorRecord::decode)
                .collect(),
            instrs: records(at.instrs_at, h.n_instrs, INSTR_RECORD_BYTES)
                .map(InstrRecord::decode)
                .collect(),
            entries: records(at.entries_at, h.n_entries, ENTRY_RECORD_BYTES)
                .map(EntryRecord::decode)
                .collect(),
            bindings: records(at.bindings_at, h.n_bindings, BINDING_RECORD_BYTES)
                .map(BindingRecord::decode)
                .collect(),
            attr_words: records(at.attrs_at, h.attr_words, 4)
                .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
                .collect(),
        }
    }
}

/// x `[n]` input at 0; a chain of `len` members: r_i = neg(prev) in register slot `i % 4`, the
/// last member writing y `[n]` at `n_al` (output), every member but the last flagged
/// `FUSE_NEXT`.
pub fn neg_chain(n: u32, len: usize) -> Builder {
    use TensorKind::{Register as R, Scratch as S};
    let al = n.div_ceil(4) * 4;
    let mut b = Builder::new(2 * al, 0);
    let x = b.tensor(0, &[n], S);
    let mut prev = x;
    for i in 0..len {
        let out = if i + 1 == len {
            b.tensor(al, &[n], S)
        } else {
            b.tensor((i % 4) as u32, &[n], R)
        };
        b.instr(Opcode::Neg, out, &[prev], 0);
        prev = out;
    }
    for k in 0..len - 1 {
        b.instrs[k].flags = FUSE_NEXT;
    }
    b.entry("e", 0, len as u32);
    b.bind("x", BindingKind::Input, 0, x);
    b.bind("y", BindingKind::Output, 0, prev);
    b
}

/// Recomputes and stores the CRC (if the bytes hold a header).
pub fn recrc(b: &mut [u8]) {
    if let Some(c) = plan_crc(b) {
        b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&c.to_le_bytes());
    }
}

/// Byte offsets of the record arrays, from the header.
pub struct Offsets {
    pub tensors: usize,
    pub instrs: usize,
    pub entries: usize,
    pub bindings: usize,
}

pub fn offsets(b: &[u8]) -> Offsets {
    let h = Header::decode(b);
    let tensors = HEADER_BYTES;
    let instrs = tensors + TENSOR_RECORD_BYTES * h.n_tensors as usize;
    let entries = instrs + INSTR_RECORD_BYTES * h.n_instrs as usize;
    let bindings = entries + ENTRY_RECORD_BYTES * h.n_entries as usize;
    Offsets {
        tensors,
        instrs,
        entries,
        bindings,
    }
}

/// Edits the header, then recomputes the CRC.
pub fn with_header(mut b: Vec<u8>, f: impl FnOnce(&mut Header)) -> Vec<u8> {
    let mut h = Header::decode(&b);
    f(&mut h);
    h.encode(&mut b);
    recrc(&mut b);
    b
}

pub fn with_tensor(mut b: Vec<u8>, i: usize, f: impl FnOnce(&mut TensorRecord)) -> Vec<u8> {
    let at = offsets(&b).tensors + TENSOR_RECORD_BYTES * i;
    let mut r = TensorRecord::decode(&b[at..at + TENSOR_RECORD_BYTES]);
    f(&mut r);
    r.encode(&mut b[at..at + TENSOR_RECORD_BYTES]);
    recrc(&mut b);
    b
}

pub fn with_instr(mut b: Vec<u8>, i: usize, f: impl FnOnce(&mut InstrRecord)) -> Vec<u8> {
    let at = offsets(&b).instrs + INSTR_RECORD_BYTES * i;
    let mut r = InstrRecord::decode(&b[at..at + INSTR_RECORD_BYTES]);
    f(&mut r);
    r.encode(&mut b[at..at + INSTR_RECORD_BYTES]);
    recrc(&mut b);
    b
}

pub fn with_entry(mut b: Vec<u8>, i: usize, f: impl FnOnce(&mut EntryRecord)) -> Vec<u8> {
    let at = offsets(&b).entries + ENTRY_RECORD_BYTES * i;
    let mut r = EntryRecord::decode(&b[at..at + ENTRY_RECORD_BYTES]);
    f(&mut r);
    r.encode(&mut b[at..at + ENTRY_RECORD_BYTES]);
    recrc(&mut b);
    b
}

pub fn with_binding(mut b: Vec<u8>, i: usize, f: impl FnOnce(&mut BindingRecord)) -> Vec<u8> {
    let at = offsets(&b).bindings + BINDING_RECORD_BYTES * i;
    let mut r = BindingRecord::decode(&b[at..at + BINDING_RECORD_BYTES]);
    f(&mut r);
    r.encode(&mut b[at..at + BINDING_RECORD_BYTES]);
    recrc(&mut b);
    b
}

// ---------------------------------------------------------------------------------------------
// The running example: y = tanh(matmul(x, w) + broadcast(b)); train_step also does
// w = w - fill(0.125) * w, in place over w.

pub mod mlp {
    pub const W: u32 = 0;
    pub const B: u32 = 1;
    pub const X: u32 = 2;
    pub const XW: u32 = 3;
    pub const BB: u32 = 4;
    pub const S: u32 = 5;
    pub const Y: u32 = 6;
    pub const F: u32 = 7;
    pub const FW: u32 = 8;
    pub const W_NEW: u32 = 9;
    pub const LR: f32 = 0.125;
}

pub fn mlp_builder() -> Builder {
    use mlp::*;
    use TensorKind::{Persistent as P, Scratch as Sc};
    let mut b = Builder::new(72, 16);
    assert_eq!(b.tensor(0, &[3, 4], P), W);
    assert_eq!(b.tensor(12, &[4], P), B);
    assert_eq!(b.tensor(16, &[2, 3], Sc), X);
    assert_eq!(b.tensor(24, &[2, 4], Sc), XW);
    assert_eq!(b.tensor(32, &[2, 4], Sc), BB);
    assert_eq!(b.tensor(40, &[2, 4], Sc), S);
    assert_eq!(b.tensor(40, &[2, 4], Sc), Y);
    assert_eq!(b.tensor(48, &[3, 4], Sc), F);
    assert_eq!(b.tensor(60, &[3, 4], Sc), FW);
    assert_eq!(b.tensor(0, &[3, 4], P), W_NEW);
    b.instr(Opcode::MatMul, XW, &[X, W], 0);
    b.instr(Opcode::Broadcast, BB, &[B], 0);
    b.instr(Opcode::Add, S, &[XW, BB], 0);
    b.instr(Opcode::Tanh, Y, &[S], 0);
    b.instr(Opcode::Fill, F, &[], LR.to_bits());
    b.instr(Opcode::Mul, FW, &[F, W], 0);
    b.instr(Opcode::Sub, W_NEW, &[W, FW], 0);
    let fwd = b.entry("forward", 0, 4);
    let train = b.entry("train_step", 0, 7);
    b.param("w", W);
    b.param("b", B);
    b.bind("x", BindingKind::Input, fwd, X);
    b.bind("y", BindingKind::Output, fwd, Y);
    b.bind("x", BindingKind::Input, train, X);
    b.bind("y", BindingKind::Output, train, Y);
    b.bind("w", BindingKind::Update, train, W_NEW);
    b
}

pub fn mlp_plan() -> Vec<u8> {
    mlp_builder().build()
}

// ---------------------------------------------------------------------------------------------
// A host reference interpreter: every tensor its own `Vec`, keyed by tensor index, evaluated
// with `tapeplan_core::ops::eval`; no arena, no aliasing.

pub fn shape_of(r: &TensorRecord) -> Shape {
    Shape::from_u32(r.rank as usize, r.dims).unwrap()
}

/// Runs instructions `first..first + n` of `b` over `vals`, which holds the values of the
/// parameters and inputs by tensor index, and receives the defined ones.
pub fn reference(b: &Builder, first: usize, n: usize, vals: &mut HashMap<u32, Vec<f32>>) {
    let attr_section: Vec<u8> = b.attr_words.iter().flat_map(|w| w.to_le_bytes()).collect();
    for ins in &b.instrs[first..first + n] {
        let op = Opcode::from_u8(ins.opcode).unwrap();
        let out_shape = shape_of(&b.tensors[ins.out as usize]);
        let arity = op.arity();
        let args: Vec<Vec<f32>> = ins.args[..arity].iter().map(|a| vals[a].clone()).collect();
        let arg_refs: Vec<&[f32]> = args.iter().map(|v| v.as_slice()).collect();
        let shapes: Vec<Shape> = ins.args[..arity]
            .iter()
            .map(|&a| shape_of(&b.tensors[a as usize]))
            .collect();
        let mut out = vec![0.0; out_shape.elems()];
        eval(
            op,
            decode_attr(op, ins.attr_word, &attr_section, out_shape).unwrap(),
            MathProfile::from_flags(b.flags),
            &arg_refs,
            &shapes,
            &mut out,
        )
        .unwrap();
        vals.insert(ins.out, out);
    }
}

/// Bit patterns, with every NaN mapped to one class.
pub fn bits(v: &[f32]) -> Vec<u32> {
    v.iter()
        .map(|x| if x.is_nan() { 0x7fc0_0000 } else { x.to_bits() })
        .collect()
}

/// A deterministic stream of awkward floats.
pub fn floats(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            match s % 16 {
                0 => 0.0,
                1 => -0.0,
                2 => f32::MIN_POSITIVE / 4.0,
                3 => 2.5,
                4 => -1.5,
                _ => ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 6.0,
            }
        })
        .collect()
}

/// Runs every entry of a plan that validated, on an arena of exactly `arena_elems`, with
/// every parameter and input set from `floats`; results may be anything, but nothing panics.
pub fn run_everything(bytes: &[u8]) {
    let Ok(plan) = Plan::parse(bytes) else {
        return;
    };
    if plan.arena_elems() > 1 << 22 {
        return; // a valid but huge arena (a flipped size byte); not worth 16 MiB here
    }
    let mut arena = vec![0.5f32; plan.arena_elems()];
    let mut s = Session::bind(&plan, &mut arena).unwrap();
    let params: Vec<_> = plan.parameters().collect();
    for p in params {
        let v = floats(p.offset_elems as u64, p.elems);
        s.load_parameter(p.name, &v).unwrap();
    }
    let entries: Vec<EntryId> = plan.entries().collect();
    for e in entries {
        let inputs: Vec<_> = plan.inputs(e).collect();
        for i in inputs {
            let v = floats(i.offset_elems as u64 + 7, i.elems);
            s.set_input(e, i.name, &v).unwrap();
        }
        s.run(e).unwrap();
        let outs: Vec<_> = plan.outputs(e).collect();
        for o in outs {
            assert_eq!(s.output(e, o.name).unwrap().len(), o.elems);
        }
    }
}
