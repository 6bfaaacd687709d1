//! Pass: in-place grouping. An entry's scratch values are put in buffers; an elementwise
//! instruction joins the buffer of an argument that dies at it and has its size, and an update
//! is written over its parameter when nothing reads the parameter after it.

use std::collections::BTreeMap;

use tapeplan_core::{OpClass, Opcode, Tape};

use crate::plan::check_name;
use crate::plan::fusion::Fusion;
use crate::plan::liveness::Intervals;
use crate::plan::roots::EntryRoots;
use crate::plan::{EntrySpec, PlanningError};

/// A buffer: one or more values that share memory through in-place instructions, live from step
/// `start` to step `end` (liveness steps: a fused chain is one step; −1 is before the entry).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    /// The first step it is live at.
    pub start: isize,
    /// The last step it is live at.
    pub end: isize,
    /// Its size, in elements.
    pub elems: usize,
}

/// An entry's scratch values in buffers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Buffers {
    /// The buffers.
    pub buffers: Vec<Buffer>,
    /// Each scratch value (node) → its buffer. Registers and in-place updates have none.
    pub buffer_of: BTreeMap<usize, usize>,
    /// The input bindings: name and leaf, in tape order.
    pub inputs: Vec<(String, usize)>,
}

/// Groups the values of one entry (`order`, its `leaves`, their intervals `iv`) into buffers.
/// Updates of an unguarded entry are written in place over their parameter and get no buffer;
/// a guarded entry's updates are ordinary scratch values that outlive it (the runtime commits
/// them). Values in `fusion`'s registers get no buffer. `param_name` names a parameter node for
/// errors.
///
/// # Errors
/// [`PlanningError::BadName`] for an input name the format cannot hold;
/// [`PlanningError::UpdateNotInPlace`] for an update whose parameter is read after it, or last
/// read by an instruction that is not elementwise over it.
#[allow(clippy::too_many_arguments)]
pub fn group(
    tape: &Tape,
    spec: &EntrySpec,
    roots: &EntryRoots,
    order: &[usize],
    leaves: &[usize],
    iv: &Intervals,
    fusion: &Fusion,
    param_name: &dyn Fn(usize) -> String,
) -> Result<Buffers, PlanningError> {
    let nodes = tape.nodes();
    let step = |p: isize| fusion.step_of(p);
    let mut groups: Vec<Buffer> = Vec::new();
    let mut group_of: BTreeMap<usize, usize> = BTreeMap::new();
    // Per buffer, the value that last took it.
    let mut tail: Vec<usize> = Vec::new();
    let mut inputs = Vec::new();
    for &l in leaves {
        if nodes[l].op == Opcode::Input {
            let name = nodes[l].name.clone().unwrap_or_else(|| format!("in{l}"));
            check_name(&name)?;
            inputs.push((name, l));
            group_of.insert(l, groups.len());
            tail.push(l);
            groups.push(Buffer {
                start: -1,
                end: step(iv[&l].1),
                elems: nodes[l].shape.elems(),
            });
        }
    }
    for (pos, &n) in order.iter().enumerate() {
        let pos = pos as isize;
        let node = &nodes[n];
        let (def, end) = iv[&n];
        // In place over the parameter, unless the entry is guarded (then updates are ordinary
        // scratch values that outlive the entry, committed by the runtime).
        if let Some(&p) = roots.update_of.get(&n).filter(|_| !spec.guarded) {
            let p_end = iv.get(&p).map(|x| x.1).unwrap_or(-1);
            if p_end > pos {
                return Err(PlanningError::UpdateNotInPlace {
                    entry: spec.name.clone(),
                    param: param_name(p),
                    why: "the parameter is read after its update",
                });
            }
            // The last read is this instruction, at positions its opcode may write over (any
            // of an elementwise opcode's; `sgd_matmul`'s weight).
            let args = node.arg_indices();
            if p_end == pos
                && (!args.contains(&(p as u32))
                    || args
                        .iter()
                        .enumerate()
                        .any(|(k, &a)| a == p as u32 && !node.op.writes_over_arg(k)))
            {
                return Err(PlanningError::UpdateNotInPlace {
                    entry: spec.name.clone(),
                    param: param_name(p),
                    why: "the update's last read of the parameter is not elementwise",
                });
            }
            continue;
        }
        if fusion.registers.contains_key(&n) {
            continue;
        }
        // Join the buffer of an argument that dies here; in a chain, of an argument of any
        // member from the chain's start up to here that died by now (the chain's arena ranges
        // may coincide: a tile at a time, each element is read before it is written).
        let lo = step(pos);
        let mut joined = None;
        if node.op.class() == OpClass::Elementwise || lo < pos {
            let mut args = Vec::new();
            for p in (lo..=pos).rev() {
                let member = &nodes[order[p as usize]];
                // Never over a broadcast's source: it is read away from the tile.
                if member.op == Opcode::Broadcast {
                    continue;
                }
                args.extend(member.arg_indices().iter().map(|&a| a as usize));
            }
            for a in args {
                if let Some(&g) = group_of.get(&a) {
                    let is_input = nodes[a].op == Opcode::Input;
                    let died = (lo..=pos).contains(&iv[&a].1);
                    if !is_input && died && tail[g] == a && groups[g].elems == node.shape.elems() {
                        joined = Some(g);
                        break;
                    }
                }
            }
        }
        match joined {
            Some(g) => {
                groups[g].end = step(end);
                group_of.insert(n, g);
                tail[g] = n;
            }
            None => {
                group_of.insert(n, groups.len());
                tail.push(n);
                groups.push(Buffer {
                    start: step(def),
                    end: step(end),
                    elems: node.shape.elems(),
                });
            }
        }
    }
    Ok(Buffers {
        buffers: groups,
        buffer_of: group_of,
        inputs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::liveness::liveness;
    use crate::plan::order::{leaves, tape_order};
    use crate::plan::prune::prune;
    use crate::plan::roots::entry_roots;
    use crate::plan::Root;
    use tapeplan_core::{NodeId, Recordable, Shape};

    /// Groups `spec` over `tape` unfused, as the planner would.
    fn buffers_of(tape: &Tape, spec: &EntrySpec) -> Result<Buffers, PlanningError> {
        let roots = entry_roots(tape, spec)?;
        let live = prune(tape, &roots.nodes);
        let order = tape_order(tape, &live);
        let leaves = leaves(tape, &live);
        let iv = liveness(tape, &order, &leaves, &roots.nodes);
        let fusion = Fusion::none(order.len());
        group(tape, spec, &roots, &order, &leaves, &iv, &fusion, &|p| {
            format!("p{p}")
        })
    }

    fn entry(roots: Vec<Root>) -> EntrySpec {
        EntrySpec {
            name: "e".into(),
            roots,
            guarded: false,
        }
    }

    fn out(node: NodeId) -> Root {
        Root::Output {
            name: "y".into(),
            node,
        }
    }

    #[test]
    fn an_elementwise_instruction_reuses_a_dying_argument() {
        let mut tape = Tape::new();
        let x = tape.input("x", Shape::vector(4));
        let (a, b, c, d) = {
            let mut t = tape.trace();
            let a = t.exp(&x).unwrap(); // not over `x`: inputs are the caller's
            let b = t.neg(&a).unwrap(); // `a` dies here: same buffer
            let c = t.tanh(&b).unwrap(); // and again
            let d = t.sum_all(&c).unwrap(); // not elementwise: its own buffer
            (a, b, c, d)
        };
        let g = buffers_of(&tape, &entry(vec![out(d)])).unwrap();
        let of = |n: NodeId| g.buffer_of[&n.index()];
        assert_eq!(g.inputs, vec![("x".to_string(), x.index())]);
        assert_ne!(of(x), of(a));
        assert_eq!(of(a), of(b));
        assert_eq!(of(b), of(c));
        assert_ne!(of(c), of(d));
        assert_eq!(g.buffers[of(a)].start, 0);
    }

    #[test]
    fn an_update_is_written_over_its_parameter_only_when_nothing_reads_it_after() {
        let mut tape = Tape::new();
        let w = tape.parameter("w", Shape::vector(3));
        let (new_w, late) = {
            let mut t = tape.trace();
            let new_w = t.neg(&w).unwrap();
            let late = t.exp(&w).unwrap(); // reads `w` after its update
            (new_w, late)
        };
        let update = Root::Update {
            param: w,
            value: new_w,
        };
        let g = buffers_of(&tape, &entry(vec![update.clone()])).unwrap();
        assert!(!g.buffer_of.contains_key(&new_w.index()), "written over w");
        let e = buffers_of(&tape, &entry(vec![update.clone(), out(late)])).unwrap_err();
        assert!(matches!(e, PlanningError::UpdateNotInPlace { .. }), "{e}");
        // Guarded, the update is scratch the runtime commits: no constraint.
        let guarded = EntrySpec {
            guarded: true,
            ..entry(vec![update, out(late)])
        };
        let g = buffers_of(&tape, &guarded).unwrap();
        assert!(g.buffer_of.contains_key(&new_w.index()));
    }
}
