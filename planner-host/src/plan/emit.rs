//! Pass: emit. An entry's values become tensors (scratch buffers at their offsets, registers in
//! their slots, in-place updates over their parameters) and its nodes become instructions.

use std::collections::BTreeMap;

use tapeplan_core::format::{TensorKind, NO_ARG};
use tapeplan_core::Tape;

use crate::plan::fusion::Fusion;
use crate::plan::in_place::Buffers;
use crate::plan::persistent::Persistent;
use crate::plan::roots::EntryRoots;
use crate::plan::{Instr, TensorInfo};

/// An entry's instructions and bindings, over the schedule's tensors.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Emitted {
    /// The instructions, in schedule order.
    pub instrs: Vec<Instr>,
    /// Each node the entry reads or writes → its tensor.
    pub tensor_of: BTreeMap<usize, u32>,
    /// Update bindings: the parameter's name and the new value's tensor.
    pub updates: Vec<(String, u32)>,
}

/// Appends the entry's tensors to `tensors` and answers its instructions. `live` is the entry's
/// prune mask, `offsets` each buffer's offset in the scratch region (after the persistent
/// region), `guarded` whether updates are committed by the runtime (scratch) rather than written
/// in place (a second, persistent tensor over the parameter's memory).
#[allow(clippy::too_many_arguments)]
pub fn emit(
    tape: &Tape,
    guarded: bool,
    order: &[usize],
    live: &[bool],
    roots: &EntryRoots,
    buffers: &Buffers,
    offsets: &[usize],
    fusion: &Fusion,
    persistent: &Persistent,
    param_name: &dyn Fn(usize) -> String,
    tensors: &mut Vec<TensorInfo>,
) -> Emitted {
    let nodes = tape.nodes();
    let mut tensor_of: BTreeMap<usize, u32> = BTreeMap::new();
    for (&n, &g) in &buffers.buffer_of {
        tensor_of.insert(n, tensors.len() as u32);
        tensors.push(TensorInfo {
            offset_elems: persistent.elems + offsets[g],
            shape: nodes[n].shape,
            kind: TensorKind::Scratch,
        });
    }
    for (&n, &slot) in &fusion.registers {
        tensor_of.insert(n, tensors.len() as u32);
        tensors.push(TensorInfo {
            offset_elems: slot,
            shape: nodes[n].shape,
            kind: TensorKind::Register,
        });
    }
    let mut updates = Vec::new();
    for (&v, &p) in &roots.update_of {
        if guarded {
            updates.push((param_name(p), tensor_of[&v]));
            continue;
        }
        let pt = persistent.param_tensor[&p];
        tensor_of.insert(v, tensors.len() as u32);
        updates.push((param_name(p), tensors.len() as u32));
        tensors.push(TensorInfo {
            kind: TensorKind::Persistent,
            ..tensors[pt as usize]
        });
    }
    for (&p, &t) in &persistent.param_tensor {
        if live[p] {
            tensor_of.insert(p, t);
        }
    }
    let mut instrs = Vec::with_capacity(order.len());
    for (pos, &n) in order.iter().enumerate() {
        let node = &nodes[n];
        let mut args = [NO_ARG; 3];
        for (k, &a) in node.arg_indices().iter().enumerate() {
            args[k] = tensor_of[&(a as usize)];
        }
        instrs.push(Instr {
            op: node.op,
            out: tensor_of[&n],
            args,
            attr: node.attr,
            node: n,
            fuse_next: fusion.fuse_next[pos],
        });
    }
    Emitted {
        instrs,
        tensor_of,
        updates,
    }
}
