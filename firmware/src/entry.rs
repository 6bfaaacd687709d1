//! Running one entry of a plan that is not training, step after step: the smallest hook for a
//! workload such as a Hessian-vector product (the cross-target matrix's `hvp` row,
//! `tapeplan_planner::model::hvp`). Each step fills every input of the entry from one seeded
//! stream, runs the entry, and sends the digest of its outputs as the step's `state` line;
//! the host computes the same digests with its oracle and compares them line by line.

use embedded_io::Write;
use tapeplan_runtime::protocol::{Fnv1a64, SplitMix64};
use tapeplan_runtime::{Limits, Ops, Plan, Scratch, Session};

use crate::link::Transcript;
use crate::train::{load_initial, Failure};

/// What [`run_entry`] runs.
#[derive(Clone, Copy, Debug)]
pub struct EntryRun<'a> {
    /// The plan's bytes.
    pub plan: &'a [u8],
    /// What runs it, for the transcript's `target` line.
    pub target: &'a str,
    /// The entry to run.
    pub entry: &'static str,
    /// The persistent tensors' initial values, little-endian `f32`, concatenated in `params`
    /// order.
    pub init: &'a [u8],
    /// The persistent tensors: name and element count, in the order of `init`.
    pub params: &'a [(&'static str, usize)],
    /// Runs of the entry (one `state` line each).
    pub steps: usize,
    /// The seed of the inputs' stream ([`SplitMix64`]).
    pub seed: u64,
    /// Validation caps ([`Limits::DEFAULT`] for a plan from outside).
    pub limits: Limits,
}

/// Runs `run.entry` `run.steps` times and writes a transcript: the header, `target`, `plan`,
/// then per step `state STEP DIGEST`, the FNV-1a 64 digest of the entry's outputs (in the
/// plan's binding order, [`Fnv1a64::f32s`]) after the step. Before each step every input of
/// the entry, in binding order, is filled from `SplitMix64::new(run.seed)` (one stream over all
/// steps): each value `2u - 1` for the stream's next `u` in `[0, 1)`. The caller ends the
/// transcript. Answers the steps run.
///
/// # Shapes
/// `arena: [plan.arena_elems()]` at least.
///
/// # Errors
/// [`Failure`]: a rejected plan, a runtime error, a missing entry
/// ([`Failure::Missing`]), initial values that do not fit, a link error.
pub fn run_entry<O: Ops, const TENSORS: usize, const LINE: usize, W: Write>(
    out: &mut Transcript<'_, W, LINE>,
    run: &EntryRun<'_>,
    arena: &mut [f32],
) -> Result<usize, Failure<W::Error>> {
    let link = Failure::Link;
    out.header().map_err(link)?;
    out.target(run.target).map_err(link)?;
    let mut scratch = Scratch::<TENSORS>::new();
    let plan = Plan::parse_selective::<O, TENSORS>(run.plan, &run.limits, &mut scratch)?;
    out.plan(plan.plan_id(), plan.arena_elems()).map_err(link)?;
    let entry = plan
        .entry(run.entry)
        .ok_or(Failure::Missing("entry", run.entry))?;
    let mut s = Session::bind_selective::<O>(&plan, arena)?;
    load_initial(&mut s, run.init, run.params)?;
    let mut stream = SplitMix64::new(run.seed);
    for step in 1..=run.steps {
        for b in plan.inputs(entry) {
            let dst = s.input_mut(entry, b.name)?;
            for d in dst.iter_mut() {
                *d = stream.next_f32() * 2.0 - 1.0;
            }
        }
        s.run(entry)?;
        let mut h = Fnv1a64::new();
        for b in plan.outputs(entry) {
            h.f32s(s.output(entry, b.name)?);
        }
        out.state(step, h.finish()).map_err(link)?;
    }
    Ok(run.steps)
}
