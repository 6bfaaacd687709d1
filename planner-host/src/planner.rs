//! The planning passes, each a small function over the tape: prune to the roots' ancestors,
//! schedule, liveness, in-place grouping, offset assignment (greedy by size), and the memory
//! report. Their product is a [`Plan`]: entries sharing one arena and one persistent region.

use std::collections::BTreeMap;

use tapeplan_core::format::{TensorKind, ALIGN_ELEMS, MAX_CHAIN_INSTRS, MAX_REGISTERS};
use tapeplan_core::{MathProfile, NodeId, OpClass, Opcode, Shape, Tape, TapeError};

/// What an entry must produce.
#[derive(Clone, Debug)]
pub enum Root {
    /// A value the caller reads after the entry.
    Output {
        /// The binding's name.
        name: String,
        /// The node.
        node: NodeId,
    },
    /// The new value of a parameter, written in place over it.
    Update {
        /// The parameter leaf.
        param: NodeId,
        /// Its new value.
        value: NodeId,
    },
}

/// An entry to plan: a name and its roots.
#[derive(Clone, Debug)]
pub struct EntrySpec {
    /// The entry's name (`forward`, `train_step`, …), at most 24 bytes.
    pub name: String,
    /// What it produces.
    pub roots: Vec<Root>,
    /// Commit updates only when every output and update is finite: updates are computed into
    /// scratch and the runtime copies them over the parameters after checking them (see
    /// `docs/plan-format.md`, guarded entries). Without it, updates are written in place.
    pub guarded: bool,
}

/// Why a tape could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A handle or shape problem in the tape.
    #[error("tape: {0}")]
    Tape(#[from] TapeError),
    /// An update whose parameter is still read after the update is computed, or that is not an
    /// elementwise function of it; it cannot be written in place.
    #[error("entry {entry}: the update of parameter {param} cannot be written in place ({why})")]
    UpdateNotInPlace {
        /// The entry.
        entry: String,
        /// The parameter's name.
        param: String,
        /// What is wrong.
        why: &'static str,
    },
    /// A root of the wrong kind (an update of a non-parameter, an output that is a parameter).
    #[error("entry {entry}: bad root: {why}")]
    BadRoot {
        /// The entry.
        entry: String,
        /// What is wrong.
        why: String,
    },
    /// A name that does not fit the plan format (empty, over 24 bytes, or containing NUL).
    #[error("name {0:?} does not fit the plan format (1 to 24 bytes, no NUL)")]
    BadName(String),
    /// The arena would exceed the format's `u32` element offsets.
    #[error("the arena would exceed 2^32 elements")]
    TooLarge,
}

/// A planned tensor: where it lives and what shape it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// Offset in the arena, in elements.
    pub offset_elems: usize,
    /// Shape.
    pub shape: Shape,
    /// Region.
    pub kind: TensorKind,
}

/// A planned instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Instr {
    /// The opcode.
    pub op: Opcode,
    /// The output tensor.
    pub out: u32,
    /// The argument tensors, `op.arity()` of them.
    pub args: [u32; 3],
    /// The attribute (its bytes are written by `tapeplan_core::format::encode_attr`).
    pub attr: tapeplan_core::Attr,
    /// The tape node this instruction computes.
    pub node: usize,
    /// This instruction and the next are one fused chain (the format's `FUSE_NEXT`).
    pub fuse_next: bool,
}

/// How to plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// Fuse elementwise chains (see [`fuse`]): values that live only between neighbouring
    /// elementwise instructions of one shape become registers, out of the arena. On by default;
    /// the bits are the same either way (a test checks). Never costs memory: an entry whose
    /// fused schedule would need more scratch than its unfused one is planned unfused.
    pub fuse: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions { fuse: true }
    }
}

/// What an entry needs in memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryReport {
    /// The whole arena (persistent region plus the largest scratch need over all entries).
    pub arena_bytes: usize,
    /// The persistent region (parameters).
    pub persistent_bytes: usize,
    /// This entry's use: the persistent region plus its scratch high-water mark.
    pub entry_bytes: usize,
    /// The liveness lower bound for this schedule: the persistent region plus the maximum, over
    /// the schedule's steps, of the bytes of buffers live at that step (after in-place merging).
    /// No offset assignment for this schedule can use less.
    pub lower_bound_bytes: usize,
    /// What a retain-everything posture holds: the persistent region plus every value of the
    /// entry in its own buffer, never reused (what an engine reverse scan that keeps all
    /// intermediates for the backward walk needs).
    pub retain_everything_bytes: usize,
}

/// A planned entry.
#[derive(Clone, Debug)]
pub struct PlannedEntry {
    /// Its name.
    pub name: String,
    /// Its instructions, in schedule order.
    pub instrs: Vec<Instr>,
    /// Input bindings: name and tensor.
    pub inputs: Vec<(String, u32)>,
    /// Output bindings.
    pub outputs: Vec<(String, u32)>,
    /// Update bindings: the parameter's name and the new value's tensor.
    pub updates: Vec<(String, u32)>,
    /// Its memory report.
    pub report: MemoryReport,
}

/// A plan: every entry's schedule over one arena.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Every tensor.
    pub tensors: Vec<TensorInfo>,
    /// Parameters: name, tensor, and the leaf in the tape.
    pub parameters: Vec<(String, u32, NodeId)>,
    /// The entries.
    pub entries: Vec<PlannedEntry>,
    /// The arena, in elements.
    pub arena_elems: usize,
    /// The persistent region `[0, persistent_elems)`.
    pub persistent_elems: usize,
    /// The math profile every reader runs the plan under (header flag bit 0). [`plan`] answers
    /// `precise`; whoever folded constants under another profile sets it.
    pub math: MathProfile,
}

fn align(n: usize) -> usize {
    n.div_ceil(ALIGN_ELEMS) * ALIGN_ELEMS
}

fn check_name(name: &str) -> Result<(), PlanError> {
    tapeplan_core::format::encode_name(name)
        .map(|_| ())
        .ok_or_else(|| PlanError::BadName(name.to_string()))
}

/// Pass 1: the nodes `roots` depend on (themselves included), as a mask over the tape.
pub fn prune(tape: &Tape, roots: &[usize]) -> Vec<bool> {
    let mut live = vec![false; tape.len()];
    let mut stack: Vec<usize> = roots.to_vec();
    while let Some(i) = stack.pop() {
        if live[i] {
            continue;
        }
        live[i] = true;
        stack.extend(tape.nodes()[i].arg_indices().iter().map(|&a| a as usize));
    }
    live
}

/// Pass 2: the schedule, a topological order of the live non-leaf nodes. The tape's own order is
/// topological (a node is recorded after its arguments) and keeps each parameter's update after
/// every other read of it, because updates are recorded last.
pub fn schedule(tape: &Tape, live: &[bool]) -> Vec<usize> {
    (0..tape.len())
        .filter(|&i| live[i] && !matches!(tape.nodes()[i].op, Opcode::Input | Opcode::Parameter))
        .collect()
}

/// A buffer: one or more values that share memory through in-place instructions.
#[derive(Clone, Copy, Debug)]
struct Group {
    start: isize,
    end: isize,
    elems: usize,
}

/// Pass 3: liveness. For each node of the entry, `(def, end)` in schedule positions: `def` is
/// −1 for leaves; `end` is the last position that reads it, `len` for roots that outlive the
/// entry, or `def` when nothing reads it.
pub fn liveness(
    tape: &Tape,
    order: &[usize],
    leaves: &[usize],
    outlive: &[usize],
) -> BTreeMap<usize, (isize, isize)> {
    let mut iv: BTreeMap<usize, (isize, isize)> = BTreeMap::new();
    for &l in leaves {
        iv.insert(l, (-1, -1));
    }
    for (pos, &n) in order.iter().enumerate() {
        let pos = pos as isize;
        iv.insert(n, (pos, pos));
        for &a in tape.nodes()[n].arg_indices() {
            if let Some(e) = iv.get_mut(&(a as usize)) {
                e.1 = e.1.max(pos);
            }
        }
    }
    for &r in outlive {
        if let Some(e) = iv.get_mut(&r) {
            e.1 = order.len() as isize;
        }
    }
    iv
}

/// Fused chains of one entry: which schedule positions run as one chain, and which values
/// live only in register slots.
#[derive(Clone, Debug, Default)]
pub struct Fusion {
    /// Per schedule position, the position of the first instruction of its chain (itself when
    /// it is in none): the step at which liveness sees the whole chain.
    pub step: Vec<usize>,
    /// Per schedule position, whether the next position belongs to the same chain.
    pub fuse_next: Vec<bool>,
    /// Values held in register slots (node → slot), never in the arena.
    pub registers: BTreeMap<usize, usize>,
}

/// Pass 3b: fusion. A value becomes a register when it is neither an output nor an update, and
/// every position from its definition to its last read holds an elementwise instruction, a
/// `fill` or a `broadcast` of its shape (and no broadcast reads it): then those positions run
/// as one chain, a tile at a time, and the value never needs arena memory. Overlapping
/// intervals merge into one chain (at most `MAX_CHAIN_INSTRS` long); registers get slots
/// greedily in definition order (a slot is free once its value's last read is at or before the
/// new value's definition); a value that finds no free slot stays in the arena. Liveness then
/// sees each chain as one step (`step`), which keeps the arena ranges of a chain disjoint or
/// identical, as the format requires.
pub fn fuse(
    tape: &Tape,
    order: &[usize],
    iv: &BTreeMap<usize, (isize, isize)>,
    roots: &[usize],
) -> Fusion {
    let nodes = tape.nodes();
    let n = order.len();
    let fusable = |pos: usize| {
        let op = nodes[order[pos]].op;
        op.class() == OpClass::Elementwise || matches!(op, Opcode::Fill | Opcode::Broadcast)
    };
    // A broadcast reads its source away from the tile: the source stays in the arena.
    let read_by_broadcast = |v: usize, from: usize, to: usize| {
        (from..=to).any(|p| {
            let n = &nodes[order[p]];
            n.op == Opcode::Broadcast && n.arg_indices().contains(&(v as u32))
        })
    };
    // Candidate intervals, in definition order, merged into chains.
    let mut chains: Vec<(usize, usize)> = Vec::new();
    let mut candidates: Vec<(usize, usize, usize)> = Vec::new(); // (def, last read, node)
    for (pos, &v) in order.iter().enumerate() {
        if roots.contains(&v) || !fusable(pos) {
            continue;
        }
        let end = iv[&v].1;
        if end <= pos as isize || end >= n as isize {
            continue;
        }
        let end = end as usize;
        let shape = nodes[v].shape;
        if !(pos..=end).all(|p| fusable(p) && nodes[order[p]].shape == shape)
            || read_by_broadcast(v, pos, end)
        {
            continue;
        }
        let (lo, hi) = match chains.last() {
            Some(&(a, b)) if pos <= b => (a, b.max(end)),
            _ => (pos, end),
        };
        if hi - lo + 1 > MAX_CHAIN_INSTRS {
            continue;
        }
        match chains.last_mut() {
            Some(c) if pos <= c.1 => *c = (lo, hi),
            _ => chains.push((lo, hi)),
        }
        candidates.push((pos, end, v));
    }
    let mut fusion = Fusion {
        step: (0..n).collect(),
        fuse_next: vec![false; n],
        registers: BTreeMap::new(),
    };
    for &(lo, hi) in &chains {
        for p in lo..=hi {
            fusion.step[p] = lo;
            fusion.fuse_next[p] = p < hi;
        }
        // Slots: (last read, node) of each slot's current holder.
        let mut slots: Vec<Option<usize>> = vec![None; MAX_REGISTERS];
        for &(def, end, v) in candidates.iter().filter(|c| lo <= c.0 && c.0 <= hi) {
            let free = slots.iter().position(|s| s.is_none_or(|last| last <= def));
            if let Some(k) = free {
                slots[k] = Some(end);
                fusion.registers.insert(v, k);
            }
        }
    }
    fusion
}

/// Pass 5: offsets for buffers, greedy: buffers in a priority order, each at the lowest aligned
/// offset that does not collide with an already placed buffer live at the same time. Three
/// orders are tried — by size (largest first), by size × lifetime, by definition — and the one
/// with the lowest high-water mark kept (the first on ties). Answers offsets relative to the
/// scratch base and the high-water mark, in elements.
fn assign_offsets(groups: &[Group]) -> (Vec<usize>, usize) {
    let by = |key: &dyn Fn(usize) -> (std::cmp::Reverse<usize>, isize)| {
        let mut order: Vec<usize> = (0..groups.len()).collect();
        order.sort_by_key(|&g| (key(g), g));
        assign_in_order(groups, &order)
    };
    let size = |g: usize| align(groups[g].elems);
    let life = |g: usize| (groups[g].end - groups[g].start + 1).max(1) as usize;
    let candidates = [
        by(&|g| (std::cmp::Reverse(size(g)), groups[g].start)),
        by(&|g| (std::cmp::Reverse(size(g) * life(g)), groups[g].start)),
        by(&|g| (std::cmp::Reverse(0), groups[g].start)),
    ];
    let best = candidates
        .iter()
        .enumerate()
        .min_by_key(|(i, c)| (c.1, *i))
        .map_or(0, |(i, _)| i);
    candidates.into_iter().nth(best).unwrap_or_default()
}

/// Greedy placement of `groups` in `order` (see [`assign_offsets`]).
fn assign_in_order(groups: &[Group], order: &[usize]) -> (Vec<usize>, usize) {
    let mut offsets = vec![0usize; groups.len()];
    let mut placed: Vec<usize> = Vec::new();
    let mut high = 0usize;
    for &g in order {
        let me = groups[g];
        let size = align(me.elems);
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter(|&&p| groups[p].start <= me.end && me.start <= groups[p].end)
            .map(|&p| (offsets[p], offsets[p] + align(groups[p].elems)))
            .collect();
        busy.sort();
        let mut at = 0usize;
        for (lo, hi) in busy {
            if at + size <= lo {
                break;
            }
            at = at.max(hi);
        }
        offsets[g] = at;
        high = high.max(at + size);
        placed.push(g);
    }
    (offsets, high)
}

/// Plans `entries` over `tape`: one arena, the parameters every entry names in a persistent
/// region at its start (in tape order), each entry's scratch after it.
///
/// # Errors
/// [`PlanError`] for bad roots or names, or an update that cannot be written in place.
pub fn plan(tape: &Tape, entries: &[EntrySpec]) -> Result<Plan, PlanError> {
    plan_with(tape, entries, PlanOptions::default())
}

/// [`plan`] with explicit [`PlanOptions`].
///
/// # Errors
/// As [`plan`].
pub fn plan_with(
    tape: &Tape,
    entries: &[EntrySpec],
    options: PlanOptions,
) -> Result<Plan, PlanError> {
    let nodes = tape.nodes();
    // The persistent region: every parameter any entry reaches, in tape order.
    let mut all_roots = Vec::new();
    for e in entries {
        for r in &e.roots {
            match r {
                Root::Output { node, .. } => all_roots.push(tape.check(*node)?),
                Root::Update { param, value } => {
                    all_roots.push(tape.check(*param)?);
                    all_roots.push(tape.check(*value)?);
                }
            }
        }
    }
    let reach = prune(tape, &all_roots);
    let mut tensors: Vec<TensorInfo> = Vec::new();
    let mut parameters = Vec::new();
    let mut param_tensor: BTreeMap<usize, u32> = BTreeMap::new();
    let mut persistent_elems = 0usize;
    for (i, n) in nodes.iter().enumerate() {
        if reach[i] && n.op == Opcode::Parameter {
            let name = n.name.clone().unwrap_or_else(|| format!("p{i}"));
            check_name(&name)?;
            param_tensor.insert(i, tensors.len() as u32);
            parameters.push((name, tensors.len() as u32, tape.id(i)?));
            tensors.push(TensorInfo {
                offset_elems: persistent_elems,
                shape: n.shape,
                kind: TensorKind::Persistent,
            });
            persistent_elems += align(n.shape.elems());
        }
    }
    let mut planned = Vec::new();
    for spec in entries {
        // Each attempt plans into its own copy of the tensor list; the kept one replaces it.
        let attempt = |options: PlanOptions| {
            let mut t = tensors.clone();
            let e = plan_entry(
                tape,
                spec,
                &mut t,
                &param_tensor,
                &parameters,
                persistent_elems,
                options,
            )?;
            Ok::<_, PlanError>((t, e))
        };
        let (mut kept_tensors, mut kept) = attempt(options)?;
        // Fusion never costs memory: an entry whose fused schedule needs more scratch than its
        // unfused one (the greedy offsets can land either way) is planned unfused.
        if options.fuse {
            let (plain_tensors, plain) = attempt(PlanOptions { fuse: false })?;
            if plain.1 < kept.1 {
                (kept_tensors, kept) = (plain_tensors, plain);
            }
        }
        tensors = kept_tensors;
        planned.push(kept);
    }
    let scratch_high = planned.iter().map(|(_, h)| *h).max().unwrap_or(0);
    let arena_elems = persistent_elems + scratch_high;
    if arena_elems > u32::MAX as usize || tensors.len() > u32::MAX as usize {
        return Err(PlanError::TooLarge);
    }
    let entries = planned
        .into_iter()
        .map(|(mut e, _)| {
            e.report.arena_bytes = arena_elems * 4;
            e
        })
        .collect();
    Ok(Plan {
        tensors,
        parameters,
        entries,
        arena_elems,
        persistent_elems,
        math: MathProfile::Precise,
    })
}

fn plan_entry(
    tape: &Tape,
    spec: &EntrySpec,
    tensors: &mut Vec<TensorInfo>,
    param_tensor: &BTreeMap<usize, u32>,
    parameters: &[(String, u32, NodeId)],
    persistent_elems: usize,
    options: PlanOptions,
) -> Result<(PlannedEntry, usize), PlanError> {
    let nodes = tape.nodes();
    check_name(&spec.name)?;
    let bad = |why: String| PlanError::BadRoot {
        entry: spec.name.clone(),
        why,
    };
    let mut roots = Vec::new();
    let mut update_of: BTreeMap<usize, usize> = BTreeMap::new(); // value node -> param node
    let mut outputs = Vec::new();
    for r in &spec.roots {
        match r {
            Root::Output { name, node } => {
                check_name(name)?;
                let i = tape.check(*node)?;
                if matches!(nodes[i].op, Opcode::Parameter | Opcode::Input) {
                    return Err(bad(format!("output {name} is a leaf; read it directly")));
                }
                roots.push(i);
                outputs.push((name.clone(), i));
            }
            Root::Update { param, value } => {
                let (p, v) = (tape.check(*param)?, tape.check(*value)?);
                if nodes[p].op != Opcode::Parameter {
                    return Err(bad(format!("update target {p} is not a parameter")));
                }
                if nodes[v].shape != nodes[p].shape || update_of.insert(v, p).is_some() {
                    return Err(bad(format!("update value {v} does not fit parameter {p}")));
                }
                if matches!(nodes[v].op, Opcode::Parameter | Opcode::Input) {
                    return Err(bad(format!("update value {v} is a leaf")));
                }
                roots.push(v);
            }
        }
    }
    let live = prune(tape, &roots);
    let order = schedule(tape, &live);
    let leaves: Vec<usize> = (0..tape.len())
        .filter(|&i| live[i] && matches!(nodes[i].op, Opcode::Input | Opcode::Parameter))
        .collect();
    let iv = liveness(tape, &order, &leaves, &roots);
    let fusion = if options.fuse {
        fuse(tape, &order, &iv, &roots)
    } else {
        Fusion {
            step: (0..order.len()).collect(),
            fuse_next: vec![false; order.len()],
            registers: BTreeMap::new(),
        }
    };
    // A position as liveness sees it: a chain is one step.
    let step = |p: isize| {
        usize::try_from(p)
            .ok()
            .and_then(|p| fusion.step.get(p))
            .map_or(p, |&s| s as isize)
    };
    let param_name = |p: usize| {
        parameters
            .iter()
            .find(|(_, t, _)| Some(t) == param_tensor.get(&p))
            .map(|(n, _, _)| n.clone())
            .unwrap_or_default()
    };

    // Pass 4: in-place grouping. Scratch values are put in buffers; an elementwise instruction
    // joins the buffer of an argument that dies at it and has its size.
    let mut groups: Vec<Group> = Vec::new();
    let mut group_of: BTreeMap<usize, usize> = BTreeMap::new();
    // Per buffer, the value that last took it.
    let mut tail: Vec<usize> = Vec::new();
    let mut inputs = Vec::new();
    for &l in &leaves {
        if nodes[l].op == Opcode::Input {
            let name = nodes[l].name.clone().unwrap_or_else(|| format!("in{l}"));
            check_name(&name)?;
            inputs.push((name, l));
            group_of.insert(l, groups.len());
            tail.push(l);
            groups.push(Group {
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
        if let Some(&p) = update_of.get(&n).filter(|_| !spec.guarded) {
            let p_end = iv.get(&p).map(|x| x.1).unwrap_or(-1);
            if p_end > pos {
                return Err(PlanError::UpdateNotInPlace {
                    entry: spec.name.clone(),
                    param: param_name(p),
                    why: "the parameter is read after its update",
                });
            }
            if p_end == pos
                && (node.op.class() != OpClass::Elementwise
                    || !node.arg_indices().contains(&(p as u32)))
            {
                return Err(PlanError::UpdateNotInPlace {
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
                groups.push(Group {
                    start: step(def),
                    end: step(end),
                    elems: node.shape.elems(),
                });
            }
        }
    }

    // The liveness lower bound over buffers, and the retain-everything figure.
    let steps = order.len() as isize;
    let peak_elems = (-1..=steps)
        .map(|t| {
            groups
                .iter()
                .filter(|g| g.start <= t && t <= g.end)
                .map(|g| g.elems)
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0);
    let all_values: usize = group_of
        .keys()
        .chain(fusion.registers.keys())
        .map(|&n| nodes[n].shape.elems())
        .sum();

    let (offsets, high) = assign_offsets(&groups);

    // Tensors and instructions.
    let mut tensor_of: BTreeMap<usize, u32> = BTreeMap::new();
    for (&n, &g) in &group_of {
        tensor_of.insert(n, tensors.len() as u32);
        tensors.push(TensorInfo {
            offset_elems: persistent_elems + offsets[g],
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
    for (&v, &p) in &update_of {
        if spec.guarded {
            updates.push((param_name(p), tensor_of[&v]));
            continue;
        }
        let pt = param_tensor[&p];
        tensor_of.insert(v, tensors.len() as u32);
        updates.push((param_name(p), tensors.len() as u32));
        tensors.push(TensorInfo {
            kind: TensorKind::Persistent,
            ..tensors[pt as usize]
        });
    }
    for (&p, &t) in param_tensor {
        if live[p] {
            tensor_of.insert(p, t);
        }
    }
    let mut instrs = Vec::with_capacity(order.len());
    for (pos, &n) in order.iter().enumerate() {
        let node = &nodes[n];
        let mut args = [tapeplan_core::format::NO_ARG; 3];
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
    let persistent_bytes = persistent_elems * 4;
    let entry = PlannedEntry {
        name: spec.name.clone(),
        instrs,
        inputs: inputs
            .into_iter()
            .map(|(name, l)| (name, tensor_of[&l]))
            .collect(),
        outputs: outputs
            .into_iter()
            .map(|(name, n)| (name, tensor_of[&n]))
            .collect(),
        updates,
        report: MemoryReport {
            arena_bytes: 0,
            persistent_bytes,
            entry_bytes: persistent_bytes + high * 4,
            lower_bound_bytes: persistent_bytes + peak_elems * 4,
            retain_everything_bytes: persistent_bytes + all_values * 4,
        },
    };
    Ok((entry, high))
}

impl Plan {
    /// The entry named `name`.
    pub fn entry(&self, name: &str) -> Option<&PlannedEntry> {
        self.entries.iter().find(|e| e.name == name)
    }
}
