//! Binding a plan to the caller's arena and running its entries.

use tapeplan_core::format::BindingKind;
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
    /// `tapeplan_core::ops` (so the bits are the oracle's). Updates are written in place over
    /// their parameters.
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
        Ok(())
    }
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
    let same =
        |v: &Option<TensorView>| v.is_some_and(|v| v.offset == out.offset && v.end == out.end);

    if op.class() == OpClass::Elementwise {
        if let (Some(f), [a0, _]) = (unary_fn(op), &views) {
            if same(a0) {
                unary_in_place(f, arena.get_mut(out.offset..out.end).ok_or(bad)?);
                return Ok(());
            }
        }
        if let (Some(f), [a0, a1]) = (binary_fn(op), &views) {
            let which = match (same(a0), same(a1)) {
                (true, true) => Some((InPlace::Both, a1)),
                (true, false) => Some((InPlace::Lhs, a1)),
                (false, true) => Some((InPlace::Rhs, a0)),
                (false, false) => None,
            };
            if let Some((which, other)) = which {
                let (left, rest) = arena.split_at_mut_checked(out.offset).ok_or(bad)?;
                let (buf, right) = rest.split_at_mut_checked(out.elems).ok_or(bad)?;
                let other = match (which, other) {
                    (InPlace::Both, _) => &[][..],
                    (_, Some(v)) => pick(left, right, out.end, v).ok_or(bad)?,
                    (_, None) => return Err(bad),
                };
                binary_in_place(f, buf, other, which);
                return Ok(());
            }
        }
    }

    let (left, rest) = arena.split_at_mut_checked(out.offset).ok_or(bad)?;
    let (buf, right) = rest.split_at_mut_checked(out.elems).ok_or(bad)?;
    let mut args: [&[f32]; MAX_ARITY] = [&[], &[]];
    for (slot, v) in args.iter_mut().zip(&views).take(arity) {
        let v = v.as_ref().ok_or(bad)?;
        *slot = pick(left, right, out.end, v).ok_or(bad)?;
    }
    let attr = Attr::from_parts(op, rec.attr, out.shape);
    let args = args.get(..arity).ok_or(bad)?;
    let shapes = shapes.get(..arity).ok_or(bad)?;
    eval(op, attr, args, shapes, buf).map_err(|error| RunError::Kernel { instr, error })
}
