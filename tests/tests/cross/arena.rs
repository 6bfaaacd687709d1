//! An independent arena checker: it reads plan bytes with nothing but the format's field
//! splitters and checks, for random models, that every buffer lies inside the arena and is
//! aligned, that persistent and scratch tensors stay in their regions, and that no two
//! simultaneously live buffers overlap unless one is written in place over the other by an
//! elementwise instruction (or by `sgd_matmul` over its weight). Fused chains: registers are read only inside the chain that wrote
//! them, from a slot nothing overwrote in between, and the arena ranges a chain touches (one of
//! them written) are disjoint or the same range (disjoint for a broadcast's source). It shares no code with the planner's passes or
//! the runtime's validator.

use proptest::prelude::*;
use tapeplan_core::format::*;
use tapeplan_core::{OpClass, Opcode};
use tapeplan_planner::model::optim::Sgd;
use tapeplan_planner::model::TrainingJob;
use tapeplan_planner::model::{Activation, Loss, Mlp};

struct Decoded {
    header: Header,
    tensors: Vec<TensorRecord>,
    instrs: Vec<InstrRecord>,
    entries: Vec<EntryRecord>,
    bindings: Vec<BindingRecord>,
}

fn decode(bytes: &[u8]) -> Decoded {
    let header = Header::decode(bytes);
    let mut at = HEADER_BYTES;
    let mut next = |n: usize| {
        let s = &bytes[at..at + n];
        at += n;
        s
    };
    let tensors = (0..header.n_tensors)
        .map(|_| TensorRecord::decode(next(TENSOR_RECORD_BYTES)))
        .collect();
    let instrs = (0..header.n_instrs)
        .map(|_| InstrRecord::decode(next(INSTR_RECORD_BYTES)))
        .collect();
    let entries = (0..header.n_entries)
        .map(|_| EntryRecord::decode(next(ENTRY_RECORD_BYTES)))
        .collect();
    let bindings = (0..header.n_bindings)
        .map(|_| BindingRecord::decode(next(BINDING_RECORD_BYTES)))
        .collect();
    assert_eq!(at, bytes.len(), "records must fill the plan exactly");
    Decoded {
        header,
        tensors,
        instrs,
        entries,
        bindings,
    }
}

fn range(t: &TensorRecord) -> (usize, usize) {
    let elems: usize = t.dims[..t.rank as usize]
        .iter()
        .map(|&d| d as usize)
        .product();
    (t.offset_elems as usize, t.offset_elems as usize + elems)
}

/// Checks one plan; answers a description of the first violation.
fn check(bytes: &[u8]) -> Result<(), String> {
    let d = decode(bytes);
    let arena = d.header.arena_elems as usize;
    let persistent = d.header.persistent_elems as usize;
    let register = |t: u32| d.tensors[t as usize].kind == TensorKind::Register as u8;
    for (i, t) in d.tensors.iter().enumerate() {
        if t.kind == TensorKind::Register as u8 {
            if t.offset_elems as usize >= MAX_REGISTERS {
                return Err(format!("register {i} in slot {}", t.offset_elems));
            }
            continue;
        }
        let (lo, hi) = range(t);
        if lo % ALIGN_ELEMS != 0 {
            return Err(format!("tensor {i} misaligned at {lo}"));
        }
        if hi > arena {
            return Err(format!(
                "tensor {i} [{lo}, {hi}) outside the arena of {arena}"
            ));
        }
        let in_persistent = hi <= persistent;
        let is_persistent = t.kind == TensorKind::Persistent as u8;
        if is_persistent != in_persistent || (!is_persistent && lo < persistent) {
            return Err(format!("tensor {i} [{lo}, {hi}) in the wrong region"));
        }
    }
    for (ei, e) in d.entries.iter().enumerate() {
        let instrs = &d.instrs[e.first_instr as usize..(e.first_instr + e.n_instrs) as usize];
        let n = instrs.len() as isize;
        // Live intervals [def, end] of every tensor the entry touches.
        let mut iv: std::collections::BTreeMap<u32, (isize, isize)> = Default::default();
        for b in &d.bindings {
            let kind = BindingKind::from_u8(b.kind).unwrap();
            let mine = b.entry == ei as u32 || b.entry == ALL_ENTRIES;
            if mine && matches!(kind, BindingKind::Input | BindingKind::Parameter) {
                iv.insert(b.tensor, (-1, -1));
            }
        }
        for (pos, ins) in instrs.iter().enumerate() {
            let pos = pos as isize;
            for &a in &ins.args[..ins.n_args as usize] {
                let e = iv
                    .get_mut(&a)
                    .ok_or(format!("entry {ei}: tensor {a} read before written"))?;
                e.1 = e.1.max(pos);
            }
            if iv.insert(ins.out, (pos, pos)).is_some() {
                return Err(format!("entry {ei}: tensor {} written twice", ins.out));
            }
        }
        for b in &d.bindings {
            let kind = BindingKind::from_u8(b.kind).unwrap();
            if b.entry == ei as u32 && matches!(kind, BindingKind::Output | BindingKind::Update) {
                iv.get_mut(&b.tensor).ok_or("output never written")?.1 = n;
            }
        }
        // Chains: a run of instructions joined by FUSE_NEXT.
        let mut slots = [u32::MAX; MAX_REGISTERS];
        // (tensor, written, read away from the tile: a broadcast's source)
        let mut touched: Vec<(u32, bool, bool)> = Vec::new();
        for (pos, ins) in instrs.iter().enumerate() {
            let in_chain =
                ins.flags & FUSE_NEXT != 0 || (pos > 0 && instrs[pos - 1].flags & FUSE_NEXT != 0);
            if pos == 0 || instrs[pos - 1].flags & FUSE_NEXT == 0 {
                slots = [u32::MAX; MAX_REGISTERS];
                touched.clear();
            }
            for &a in &ins.args[..ins.n_args as usize] {
                if register(a) {
                    let slot = d.tensors[a as usize].offset_elems as usize;
                    if !in_chain || slots[slot] != a {
                        return Err(format!(
                            "entry {ei}: register {a} read at {pos} is not in its slot"
                        ));
                    }
                } else if in_chain {
                    touched.push((a, false, ins.opcode == Opcode::Broadcast.to_u8()));
                }
            }
            if register(ins.out) {
                if !in_chain {
                    return Err(format!("entry {ei}: register {} outside a chain", ins.out));
                }
                slots[d.tensors[ins.out as usize].offset_elems as usize] = ins.out;
            } else if in_chain {
                touched.push((ins.out, true, false));
            }
            if in_chain && ins.flags & FUSE_NEXT == 0 {
                for (x, &(ta, wa, sa)) in touched.iter().enumerate() {
                    for &(tb, wb, sb) in &touched[x + 1..] {
                        let (ra, rb) = (
                            range(&d.tensors[ta as usize]),
                            range(&d.tensors[tb as usize]),
                        );
                        if (wa || wb) && ra.0 < rb.1 && rb.0 < ra.1 && (ra != rb || sa || sb) {
                            return Err(format!("entry {ei}: chain ending at {pos} touches {ta} {ra:?} and {tb} {rb:?}"));
                        }
                    }
                }
            }
        }
        let ts: Vec<(u32, (isize, isize))> =
            iv.into_iter().filter(|&(t, _)| !register(t)).collect();
        for (x, &(ta, (da, ea))) in ts.iter().enumerate() {
            for &(tb, (db, eb)) in &ts[x + 1..] {
                let (ra, rb) = (
                    range(&d.tensors[ta as usize]),
                    range(&d.tensors[tb as usize]),
                );
                let mem = ra.0 < rb.1 && rb.0 < ra.1;
                let time = da <= eb && db <= ea;
                if !(mem && time) {
                    continue;
                }
                // The one exception: written in place, exactly over an argument dying there.
                let in_place =
                    |(d1, e1): (isize, isize), t1: u32, (d2, _): (isize, isize), t2: u32| {
                        e1 == d2 && d2 >= 0 && d1 < d2 && ra == rb && {
                            let ins = &instrs[d2 as usize];
                            let args = &ins.args[..ins.n_args as usize];
                            let op = Opcode::from_u8(ins.opcode).unwrap();
                            // Elementwise: over any argument; `sgd_matmul`: over its weight
                            // (argument 0), which must not also be a product operand.
                            let over = if op == Opcode::SgdMatMul {
                                args[0] == t1 && !args[1..].contains(&t1)
                            } else {
                                args.contains(&t1) && op.class() == OpClass::Elementwise
                            };
                            ins.out == t2 && over
                        }
                    };
                if !(in_place((da, ea), ta, (db, eb), tb) || in_place((db, eb), tb, (da, ea), ta)) {
                    return Err(format!(
                        "entry {ei}: tensors {ta} {ra:?} live [{da}, {ea}] and {tb} {rb:?} live [{db}, {eb}] overlap"
                    ));
                }
            }
        }
    }
    Ok(())
}

#[test]
fn the_checker_catches_an_overlap() {
    let job = TrainingJob::build(
        Mlp {
            sizes: vec![4, 3, 2],
            activation: Activation::Tanh,
        },
        Loss::SoftmaxCrossEntropy,
        Sgd { lr: 0.1 },
        2,
    )
    .unwrap();
    let mut plan = job.schedule.clone();
    check(&plan.to_bytes()).unwrap();
    // Move every scratch tensor to the scratch base: simultaneously live buffers now collide.
    let base = plan.persistent_elems;
    for t in &mut plan.tensors {
        if t.kind == TensorKind::Scratch {
            t.offset_elems = base;
        }
    }
    assert!(check(&plan.to_bytes()).unwrap_err().contains("overlap"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn planned_arenas_are_sound(
        widths in proptest::collection::vec(1usize..24, 2..5),
        batch in 1usize..12,
        relu in any::<bool>(),
        mse in any::<bool>(),
    ) {
        let job = TrainingJob::build(
            Mlp { sizes: widths, activation: if relu { Activation::Relu } else { Activation::Tanh } },
            if mse { Loss::MeanSquaredError } else { Loss::SoftmaxCrossEntropy },
            Sgd { lr: 0.05 },
            batch,
        ).unwrap();
        let bytes = job.schedule.to_bytes();
        prop_assert_eq!(check(&bytes), Ok(()));
        tapeplan_runtime::Plan::parse(&bytes).unwrap();
        for e in &job.schedule.entries {
            let r = e.report;
            prop_assert!(r.lower_bound_bytes <= r.entry_bytes);
            prop_assert!(r.entry_bytes <= r.arena_bytes);
            prop_assert!(r.entry_bytes <= r.retain_everything_bytes + 4 * 4 * e.instrs.len());
        }
    }
}

/// The runtime's default work cap ([`tapeplan_runtime::Limits::derived_work_cap`], issue 16,
/// hole 2) admits the planner's models with room to spare: the W1–W3 benchmark models and a
/// wide one, whose entries' work stays a hundred times below `64 · plan_bytes · arena_elems`.
#[test]
fn default_work_cap_admits_planned_models() {
    let models: [(&[usize], Activation, usize); 4] = [
        (&[64, 32, 10], Activation::Tanh, 32),
        (&[784, 128, 10], Activation::Relu, 64),
        (&[2, 16, 16, 1], Activation::Tanh, 1),
        (&[1024, 1024, 1024, 10], Activation::Relu, 256),
    ];
    for (sizes, activation, batch) in models {
        let mut worst = 0f64;
        let job = TrainingJob::build(
            Mlp {
                sizes: sizes.to_vec(),
                activation,
            },
            Loss::SoftmaxCrossEntropy,
            Sgd { lr: 0.05 },
            batch,
        )
        .unwrap();
        let bytes = job.schedule.to_bytes();
        let plan = tapeplan_runtime::Plan::parse(&bytes).unwrap();
        let cap = tapeplan_runtime::Limits::derived_work_cap(bytes.len(), plan.arena_elems());
        for e in plan.entries() {
            let fraction = plan.entry_work(e) as f64 / cap as f64;
            assert!(fraction < 1e-2, "{sizes:?}: {fraction}");
            worst = worst.max(fraction);
        }
        println!("{sizes:?} batch {batch}: largest entry work / derived cap {worst:.2e}");
    }
}
