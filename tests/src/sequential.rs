//! The one sequential reference interpreter of plans: the meaning `docs/plan-format.md` gives an
//! entry, its instructions run one after another over whole tensors (a fused chain's registers
//! kept beside the arena, whole, by tensor index), then the guarded commit. The runtime runs
//! chains a tile at a time; every plan it accepts must leave the arena as this does. Both
//! fusion-hostile suites hold the runtime to it: `fusion_hostile::` over planned and mutated
//! plans (their bytes read back with [`Builder::decode`]), `fusion_hostile_chains::` over
//! hand-built and random chains. It reads the plan's records, not a planner `Schedule` (that is
//! `Schedule::run_host`), so it sees exactly what the runtime decodes.

use std::collections::HashMap;

use tapeplan_core::format::{decode_attr, BindingKind, BindingRecord, TensorKind};
use tapeplan_core::ops::eval;
use tapeplan_core::{MathProfile, Opcode};

use crate::builder::{shape_of, Builder};

/// Runs entry `entry` of plan `b` over `arena` (indexed by `offset_elems`, at least the plan's
/// `arena_elems` long): each instruction in turn evaluated by its reference kernel
/// (`tapeplan_core::ops::eval`, in the math profile the header's flags record) from whole
/// argument tensors, its output written whole, to the arena or to the register of its tensor
/// index. Then, if the entry is guarded (an update binding on a scratch tensor), the commit: when
/// every output and update of the entry is finite, each update is copied over its parameter.
///
/// # Errors
/// `Err(binding)` when a guarded entry refuses to commit: `binding` indexes the first binding
/// record (in record order) of kind output or update of this entry holding a non-finite
/// element, the binding the runtime's `ExecError::NonFinite` names. The arena then holds what
/// the instructions wrote, and no parameter changed.
///
/// # Panics
/// When an instruction's opcode, attribute or operands are not ones the runtime accepts (a
/// register read before it is written, a tensor outside `arena`): call it on validated plans.
pub fn run_entry(b: &Builder, entry: usize, arena: &mut [f32]) -> Result<(), u32> {
    let rec = b.entries[entry];
    let math = MathProfile::from_flags(b.flags);
    let attrs: Vec<u8> = b.attr_words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let register = TensorKind::Register as u8;
    let mut regs: HashMap<u32, Vec<f32>> = HashMap::new();
    let first = rec.first_instr as usize;
    for ins in &b.instrs[first..first + rec.n_instrs as usize] {
        let op = Opcode::from_u8(ins.opcode).unwrap();
        let mut args = Vec::new();
        let mut shapes = Vec::new();
        for &a in &ins.args[..op.arity()] {
            let t = &b.tensors[a as usize];
            let s = shape_of(t);
            shapes.push(s);
            args.push(if t.kind == register {
                regs[&a].clone()
            } else {
                let o = t.offset_elems as usize;
                arena[o..o + s.elems()].to_vec()
            });
        }
        let t = &b.tensors[ins.out as usize];
        let s = shape_of(t);
        let mut out = vec![0.0; s.elems()];
        let refs: Vec<&[f32]> = args.iter().map(Vec::as_slice).collect();
        eval(
            op,
            decode_attr(op, ins.attr_word, &attrs, s).unwrap(),
            math,
            &refs,
            &shapes,
            &mut out,
        )
        .unwrap();
        if t.kind == register {
            regs.insert(ins.out, out);
        } else {
            let o = t.offset_elems as usize;
            arena[o..o + out.len()].copy_from_slice(&out);
        }
    }
    let mine = |x: &BindingRecord, k: BindingKind| x.entry == entry as u32 && x.kind == k as u8;
    let updates = || b.bindings.iter().filter(|x| mine(x, BindingKind::Update));
    let scratch = TensorKind::Scratch as u8;
    if !updates().any(|u| b.tensors[u.tensor as usize].kind == scratch) {
        return Ok(());
    }
    let range = |t: u32| {
        let x = &b.tensors[t as usize];
        let o = x.offset_elems as usize;
        o..o + shape_of(x).elems()
    };
    for (i, x) in b.bindings.iter().enumerate() {
        let checked = mine(x, BindingKind::Output) || mine(x, BindingKind::Update);
        if checked && arena[range(x.tensor)].iter().any(|v| !v.is_finite()) {
            return Err(i as u32);
        }
    }
    for u in updates() {
        let p = b
            .bindings
            .iter()
            .find(|p| p.kind == BindingKind::Parameter as u8 && p.name == u.name)
            .unwrap();
        let to = range(p.tensor).start;
        arena.copy_within(range(u.tensor), to);
    }
    Ok(())
}
