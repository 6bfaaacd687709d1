//! Binding a plan to the caller's arena and running its entries.

use tapeplan_core::format::{BindingKind, TensorKind};
use tapeplan_core::ops::elementwise::{binary_in_place, unary_in_place, InPlace};
use tapeplan_core::ops::{binary_fn, eval, unary_fn, Attr};
use tapeplan_core::{OpClass, Opcode, Shape, MAX_ARITY};

use crate::error::RunError;
use crate::plan::{Binding, EntryId, Plan, TensorView};

/// A plan bound to an arena the caller owns: load parameters, set inputs, run entries, read
/// outputs. Nothing is allocated; every read and write stays inside `arena[..arena_elems]`.
///
/// The arena's layout is the plan's: the persistent region `[0, persistent_elems)` holds the
/// parameters (and keeps them across runs); the rest is scratch that every run reuses, so set
/// an entry's inputs right before running it and read its outputs right after.
#[derive(Debug)]
pub struct Session<'p, 'a> {
    plan: &'p Plan<'p>,
    arena: &'a mut [f32],
}

impl<'p, 'a> Session<'p, 'a> {
    /// Binds `plan` to `arena`, leaving the arena's contents as they are, so parameters
    /// already in the persistent region (a previous session, a `static` buffer, a restored
    /// checkpoint) are kept. Elements past `arena_elems` are never touched.
    ///
    /// # Errors
    /// [`RunError::ArenaTooSmall`] when `arena.len() < plan.arena_elems()`.
    pub fn bind(plan: &'p Plan<'p>, arena: &'a mut [f32]) -> Result<Self, RunError> {
        let needed_elems = plan.arena_elems();
        if arena.len() < needed_elems {
            return Err(RunError::ArenaTooSmall {
                needed_elems,
                found_elems: arena.len(),
            });
        }
        Ok(Session { plan, arena })
    }

    /// Binds `plan` to `arena` and sets `arena[..arena_elems]` to `+0.0`: parameters, too.
    ///
    /// # Errors
    /// As [`Session::bind`].
    pub fn bind_zeroed(plan: &'p Plan<'p>, arena: &'a mut [f32]) -> Result<Self, RunError> {
        let s = Session::bind(plan, arena)?;
        let n = s.plan.arena_elems();
        if let Some(a) = s.arena.get_mut(..n) {
            a.fill(0.0);
        }
        Ok(s)
    }

    /// The plan.
    pub fn plan(&self) -> &'p Plan<'p> {
        self.plan
    }

    /// Gives the arena back.
    pub fn into_arena(self) -> &'a mut [f32] {
        self.arena
    }

    /// The whole persistent region `[0, persistent_elems)`: every parameter at its
    /// [`Binding::range`]. Hash it for a digest, copy it for a checkpoint.
    pub fn persistent(&self) -> &[f32] {
        self.arena
            .get(..self.plan.persistent_elems())
            .unwrap_or(&[])
    }

    /// The persistent region, writable: restore a checkpoint by copying it back.
    pub fn persistent_mut(&mut self) -> &mut [f32] {
        let n = self.plan.persistent_elems();
        self.arena.get_mut(..n).unwrap_or(&mut [])
    }

    fn slice(&self, b: &Binding<'_>) -> &[f32] {
        self.arena.get(b.range()).unwrap_or(&[])
    }

    fn slice_mut(&mut self, b: &Binding<'_>) -> &mut [f32] {
        self.arena.get_mut(b.range()).unwrap_or(&mut [])
    }

    fn check_entry(&self, entry: EntryId) -> Result<(), RunError> {
        if entry.index() < self.plan.n_entries() {
            Ok(())
        } else {
            Err(RunError::UnknownEntry { entry: entry.0 })
        }
    }

    fn copy_in(dst: &mut [f32], values: &[f32]) -> Result<(), RunError> {
        if dst.len() != values.len() {
            return Err(RunError::LengthMismatch {
                expected_elems: dst.len(),
                found_elems: values.len(),
            });
        }
        dst.copy_from_slice(values);
        Ok(())
    }

    fn param(&self, name: &str) -> Result<Binding<'p>, RunError> {
        self.plan.parameter(name).ok_or(RunError::UnknownName {
            kind: BindingKind::Parameter,
        })
    }

    /// Copies a parameter's values (row-major, `shape.elems()` of them) into the arena.
    ///
    /// # Errors
    /// [`RunError::UnknownName`] for no such parameter; [`RunError::LengthMismatch`] when
    /// `values.len()` is not its element count.
    pub fn load_parameter(&mut self, name: &str, values: &[f32]) -> Result<(), RunError> {
        let b = self.param(name)?;
        Self::copy_in(self.slice_mut(&b), values)
    }

    /// A parameter's current values.
    ///
    /// # Errors
    /// [`RunError::UnknownName`] for no such parameter.
    pub fn parameter(&self, name: &str) -> Result<&[f32], RunError> {
        let b = self.param(name)?;
        Ok(self.slice(&b))
    }

    /// A parameter's values, writable in place.
    ///
    /// # Errors
    /// [`RunError::UnknownName`] for no such parameter.
    pub fn parameter_mut(&mut self, name: &str) -> Result<&mut [f32], RunError> {
        let b = self.param(name)?;
        Ok(self.slice_mut(&b))
    }

    fn input_binding(&self, entry: EntryId, name: &str) -> Result<Binding<'p>, RunError> {
        self.check_entry(entry)?;
        self.plan.input(entry, name).ok_or(RunError::UnknownName {
            kind: BindingKind::Input,
        })
    }

    /// Copies an input's values into the arena. Inputs live in scratch, which every run
    /// reuses: set all of an entry's inputs right before running it.
    ///
    /// # Errors
    /// [`RunError::UnknownEntry`], [`RunError::UnknownName`] for no such input of `entry`,
    /// [`RunError::LengthMismatch`] when `values.len()` is not its element count.
    pub fn set_input(
        &mut self,
        entry: EntryId,
        name: &str,
        values: &[f32],
    ) -> Result<(), RunError> {
        let b = self.input_binding(entry, name)?;
        Self::copy_in(self.slice_mut(&b), values)
    }

    /// An input's buffer, to fill in place instead of copying.
    ///
    /// # Errors
    /// [`RunError::UnknownEntry`], [`RunError::UnknownName`] for no such input of `entry`.
    pub fn input_mut(&mut self, entry: EntryId, name: &str) -> Result<&mut [f32], RunError> {
        let b = self.input_binding(entry, name)?;
        Ok(self.slice_mut(&b))
    }

    /// An output's values, as the last run of `entry` left them (meaningful only until another
    /// entry runs, or inputs are set, since outputs may live in scratch).
    ///
    /// # Errors
    /// [`RunError::UnknownEntry`], [`RunError::UnknownName`] for no such output of `entry`.
    pub fn output(&self, entry: EntryId, name: &str) -> Result<&[f32], RunError> {
        self.check_entry(entry)?;
        let b = self.plan.output(entry, name).ok_or(RunError::UnknownName {
            kind: BindingKind::Output,
        })?;
        Ok(self.slice(&b))
    }

    /// Runs an entry's instructions in order, each with its reference kernel from
    /// `tapeplan_core::ops` (so the bits are the oracle's). In-place updates are written over
    /// their parameters as they run; a guarded entry's updates are committed at the end, and
    /// only when every output and update is finite.
    ///
    /// # Errors
    /// [`RunError::UnknownEntry`]; [`RunError::Inconsistent`] or [`RunError::Kernel`] only if
    /// the plan's records contradict themselves, which validation rules out.
    pub fn run(&mut self, entry: EntryId) -> Result<(), RunError> {
        self.check_entry(entry)?;
        let range = self
            .plan
            .entry_range(entry)
            .ok_or(RunError::UnknownEntry { entry: entry.0 })?;
        let plan = self.plan;
        let arena = self
            .arena
            .get_mut(..plan.arena_elems())
            .ok_or(RunError::ArenaTooSmall {
                needed_elems: plan.arena_elems(),
                found_elems: 0,
            })?;
        for k in range {
            step(plan, arena, k)?;
        }
        commit(plan, arena, entry)
    }
}

/// The end of a guarded entry (one whose updates live in scratch): when every output and update
/// is finite, copy each update over its parameter; otherwise write nothing and say which value
/// was not finite. An entry with in-place updates (or none) has nothing to commit.
fn commit(plan: &Plan<'_>, arena: &mut [f32], entry: EntryId) -> Result<(), RunError> {
    // The validator's test: an update in the scratch region is guarded (and then all are).
    let guarded = plan
        .updates(entry)
        .any(|u| u.tensor_kind == TensorKind::Scratch);
    if !guarded {
        return Ok(());
    }
    let bad = RunError::Inconsistent { instr: u32::MAX };
    for b in 0..plan.n_bindings() {
        let Some(binding) = plan.binding(b) else {
            continue;
        };
        if binding.entry != Some(entry)
            || !matches!(binding.kind, BindingKind::Output | BindingKind::Update)
        {
            continue;
        }
        let values = arena.get(binding.range()).ok_or(bad)?;
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            return Err(RunError::NonFinite {
                entry: u32::try_from(entry.index()).unwrap_or(u32::MAX),
                binding: u32::try_from(b).unwrap_or(u32::MAX),
                element: u32::try_from(i).unwrap_or(u32::MAX),
            });
        }
    }
    for u in plan.updates(entry) {
        let p = plan.parameter(u.name).ok_or(bad)?;
        if u.range().end > arena.len() || p.range().end > arena.len() || p.elems != u.elems {
            return Err(bad);
        }
        arena.copy_within(u.range(), p.offset_elems);
    }
    Ok(())
}

/// An argument's slice from the parts of the arena left and right of the output
/// `[out_start, out_end)`; `None` when it straddles the output.
fn pick<'s>(
    left: &'s [f32],
    right: &'s [f32],
    out_end: usize,
    v: &TensorView,
) -> Option<&'s [f32]> {
    if v.elems == 0 {
        return Some(&[]);
    }
    if v.end <= left.len() {
        left.get(v.offset..v.end)
    } else if v.offset >= out_end {
        right.get(v.offset.checked_sub(out_end)?..v.end.checked_sub(out_end)?)
    } else {
        None
    }
}

/// Runs instruction `k` over `arena`.
fn step(plan: &Plan<'_>, arena: &mut [f32], k: usize) -> Result<(), RunError> {
    let instr = u32::try_from(k).unwrap_or(u32::MAX);
    let bad = RunError::Inconsistent { instr };
    let rec = plan.instr_record(k).ok_or(bad)?;
    let op = Opcode::from_u8(rec.opcode).ok_or(bad)?;
    let arity = op.arity();
    let out = plan.tensor_view(rec.out).ok_or(bad)?;
    if out.elems == 0 {
        // Nothing to write; skipping also spares loops over empty extents.
        return Ok(());
    }
    let mut views = [None::<TensorView>; MAX_ARITY];
    let mut shapes = [Shape::SCALAR; MAX_ARITY];
    for ((&a, v), s) in rec.args.iter().zip(&mut views).zip(&mut shapes).take(arity) {
        let t = plan.tensor_view(a).ok_or(bad)?;
        *v = Some(t);
        *s = t.shape;
    }
    let same = |v: Option<&Option<TensorView>>| {
        v.is_some_and(|v| v.is_some_and(|v| v.offset == out.offset && v.end == out.end))
    };
    let views = views.get(..arity).ok_or(bad)?;
    let shapes = shapes.get(..arity).ok_or(bad)?;

    if op.class() == OpClass::Elementwise && views.iter().any(|v| same(Some(v))) {
        let (a0, a1) = (views.first(), views.get(1));
        if let (Some(f), 1) = (unary_fn(op), arity) {
            unary_in_place(f, arena.get_mut(out.offset..out.end).ok_or(bad)?);
            return Ok(());
        }
        if let (Some(f), 2) = (binary_fn(op), arity) {
            let (which, other) = match (same(a0), same(a1)) {
                (true, true) => (InPlace::Both, None),
                (true, false) => (InPlace::Lhs, a1),
                (_, _) => (InPlace::Rhs, a0),
            };
            let (left, rest) = arena.split_at_mut_checked(out.offset).ok_or(bad)?;
            let (buf, right) = rest.split_at_mut_checked(out.elems).ok_or(bad)?;
            let other = match other {
                None => &[][..],
                Some(v) => pick(left, right, out.end, v.as_ref().ok_or(bad)?).ok_or(bad)?,
            };
            binary_in_place(f, buf, other, which);
            return Ok(());
        }
        // Any other elementwise opcode in place: through the reference kernel, a chunk at a
        // time from copies (elementwise, so chunking cannot change a bit).
        return elementwise_chunked(op, rec.attr, views, arena, &out, instr);
    }

    let (left, rest) = arena.split_at_mut_checked(out.offset).ok_or(bad)?;
    let (buf, right) = rest.split_at_mut_checked(out.elems).ok_or(bad)?;
    let mut args: [&[f32]; MAX_ARITY] = [&[]; MAX_ARITY];
    for (slot, v) in args.iter_mut().zip(views) {
        let v = v.as_ref().ok_or(bad)?;
        *slot = pick(left, right, out.end, v).ok_or(bad)?;
    }
    let attr = Attr::from_parts(op, rec.attr, out.shape);
    let args = args.get(..arity).ok_or(bad)?;
    eval(op, attr, args, shapes, buf).map_err(|error| RunError::Kernel { instr, error })
}

/// Elements per chunk of [`elementwise_chunked`] (its stack copies are `MAX_ARITY` of these).
const CHUNK_ELEMS: usize = 64;

/// An elementwise instruction whose output shares its range with arguments, for opcodes
/// without a scalar function: each chunk of every argument is copied to the stack, then the
/// reference kernel writes the output chunk. Elementwise kernels compute each element from
/// the same-index argument elements only, so the bits are those of one whole-buffer call.
fn elementwise_chunked(
    op: Opcode,
    attr_bits: u32,
    views: &[Option<TensorView>],
    arena: &mut [f32],
    out: &TensorView,
    instr: u32,
) -> Result<(), RunError> {
    let bad = RunError::Inconsistent { instr };
    let mut copies = [[0.0f32; CHUNK_ELEMS]; MAX_ARITY];
    let mut start = 0usize;
    while start < out.elems {
        let len = (out.elems.saturating_sub(start)).min(CHUNK_ELEMS);
        let shape = Shape::new(&[len]).map_err(|e| RunError::Kernel {
            instr,
            error: e.into(),
        })?;
        for (copy, v) in copies.iter_mut().zip(views) {
            let v = v.as_ref().ok_or(bad)?;
            let from = v.offset.checked_add(start).ok_or(bad)?;
            let src = arena
                .get(from..from.checked_add(len).ok_or(bad)?)
                .ok_or(bad)?;
            copy.get_mut(..len).ok_or(bad)?.copy_from_slice(src);
        }
        let mut args: [&[f32]; MAX_ARITY] = [&[]; MAX_ARITY];
        for (slot, copy) in args.iter_mut().zip(&copies) {
            *slot = copy.get(..len).ok_or(bad)?;
        }
        let shapes = [shape; MAX_ARITY];
        let arity = views.len();
        let from = out.offset.checked_add(start).ok_or(bad)?;
        let dst = arena
            .get_mut(from..from.checked_add(len).ok_or(bad)?)
            .ok_or(bad)?;
        eval(
            op,
            Attr::from_parts(op, attr_bits, shape),
            args.get(..arity).ok_or(bad)?,
            shapes.get(..arity).ok_or(bad)?,
            dst,
        )
        .map_err(|error| RunError::Kernel { instr, error })?;
        start = start.saturating_add(len);
    }
    Ok(())
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::arithmetic_side_effects
)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;
    use tapeplan_core::format::TensorKind;

    fn view(offset: usize, elems: usize) -> TensorView {
        TensorView {
            offset,
            elems,
            end: offset + elems,
            shape: Shape::new(&[elems]).unwrap(),
            kind: TensorKind::Scratch,
        }
    }

    #[test]
    fn chunked_in_place_matches_whole_buffer_kernels() {
        let n = 150; // more than two chunks, not a multiple of one
        let mut arena = [0.0f32; 304];
        for (i, x) in arena.iter_mut().enumerate() {
            *x = (i as f32 * 0.37).sin() * 3.0;
        }
        let (a, b) = (view(0, n), view(152, n));
        for (op, views) in [
            (Opcode::Div, &[Some(a), Some(b)][..]),
            (Opcode::Sub, &[Some(b), Some(a)][..]),
            (Opcode::Mul, &[Some(a), Some(a)][..]),
            (Opcode::Tanh, &[Some(a)][..]),
        ] {
            let mut expect = [0.0f32; 150];
            let args: [&[f32]; 2] = [&arena[0..n], &arena[152..152 + n]];
            let args: Vec<&[f32]> = views
                .iter()
                .map(|v| args[usize::from(v.unwrap().offset != 0)])
                .collect();
            let shapes = [a.shape; 2];
            eval(op, Attr::NONE, &args, &shapes[..views.len()], &mut expect).unwrap();
            elementwise_chunked(op, 0, views, &mut arena, &a, 0).unwrap();
            let got: Vec<u32> = arena[..n].iter().map(|x| x.to_bits()).collect();
            let want: Vec<u32> = expect.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, want, "{op}");
        }
    }
}
