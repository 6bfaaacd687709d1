//! A translated ONNX graph ([`crate::model::onnx::Translation`]) run forward by both readings:
//! the oracle ([`tapeplan_core::Run`]) and the `no_std` runtime from the bytes of a plan with
//! one `forward` entry. The ONNX conformance step compares them bit for bit, then each with
//! ONNX's expected outputs.

use std::collections::BTreeMap;

use tapeplan_core::{MathProfile, Run, Tensor};
use tapeplan_runtime::{Plan as RtPlan, Session};

use crate::model::onnx::Translation;
use crate::plan::{plan, EntrySpec, Root};

/// The entry's name.
pub const ENTRY: &str = "forward";

/// Why a forward run failed.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// An input the tape reads was not given, or has the wrong number of elements.
    #[error("input {0:?}: {1}")]
    Input(String, String),
    /// The oracle failed.
    #[error("oracle: {0}")]
    Oracle(#[from] tapeplan_core::TapeError),
    /// The tape could not be planned.
    #[error("planning: {0}")]
    Planning(#[from] crate::PlanningError),
    /// The runtime refused the bytes or failed to run them.
    #[error("runtime: {0}")]
    Runtime(String),
}

/// The graph outputs as each reading computed them, in the graph's order.
#[derive(Clone, Debug)]
pub struct ForwardOutputs {
    /// The oracle's.
    pub oracle: Vec<Vec<f32>>,
    /// The runtime's (from the serialized plan).
    pub runtime: Vec<Vec<f32>>,
    /// The plan's arena, in `f32` elements.
    pub arena_elems: usize,
    /// The serialized plan the runtime ran (one entry, [`ENTRY`]; outputs bound as
    /// [`output_binding`]), for running it again elsewhere (another catalog, another target).
    pub plan: Vec<u8>,
}

/// The binding name of output `k`.
pub fn output_binding(k: usize) -> String {
    format!("out{k}")
}

/// Runs `t` forward under the `precise` math profile with the graph inputs `inputs` (by ONNX
/// name, `f32` row-major; masks as `0`/`1`) and the translation's parameters at their initial
/// values, through the oracle and through the runtime.
///
/// # Errors
/// [`ForwardError`].
pub fn run_forward(
    t: &Translation,
    inputs: &BTreeMap<String, Vec<f32>>,
) -> Result<ForwardOutputs, ForwardError> {
    let value_of = |name: &str, elems: usize| -> Result<&Vec<f32>, ForwardError> {
        let v = inputs
            .get(name)
            .ok_or_else(|| ForwardError::Input(name.into(), "not given".into()))?;
        if v.len() != elems {
            return Err(ForwardError::Input(
                name.into(),
                format!("{} elements, the shape holds {elems}", v.len()),
            ));
        }
        Ok(v)
    };
    // The oracle.
    let mut run = Run::with_math(&t.tape, MathProfile::Precise);
    for i in &t.inputs {
        let v = value_of(&i.onnx_name, i.shape.elems())?;
        run.set(i.node, Tensor::new(i.shape, v.clone())?)?;
    }
    for p in &t.parameters {
        run.set(p.node, Tensor::new(p.shape, p.value.clone())?)?;
    }
    run.forward()?;
    let oracle = t
        .outputs
        .iter()
        .map(|o| {
            run.value(o.node)
                .map(|v| v.data.clone())
                .ok_or(tapeplan_core::TapeError::UnknownNode {
                    index: o.node.index(),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;

    // The runtime, from the plan's bytes.
    let roots = t
        .outputs
        .iter()
        .enumerate()
        .map(|(k, o)| Root::Output {
            name: output_binding(k),
            node: o.node,
        })
        .collect();
    let schedule = plan(
        &t.tape,
        &[EntrySpec {
            name: ENTRY.into(),
            roots,
            guarded: false,
        }],
    )?;
    let bytes = schedule.to_bytes();
    let rt = |e: &dyn std::fmt::Display| ForwardError::Runtime(e.to_string());
    let parsed = RtPlan::parse_alloc(&bytes).map_err(|e| rt(&e))?;
    let entry = parsed
        .entry(ENTRY)
        .ok_or_else(|| ForwardError::Runtime("no forward entry".into()))?;
    let arena_elems = parsed.arena_elems();
    let mut arena = vec![0.0f32; arena_elems];
    let mut session = Session::bind(&parsed, &mut arena).map_err(|e| rt(&e))?;
    for p in &t.parameters {
        // A parameter no output reads is pruned from the plan: nothing to load.
        if parsed.parameter(&p.tape_name).is_some() {
            session
                .load_parameter(&p.tape_name, &p.value)
                .map_err(|e| rt(&e))?;
        }
    }
    for i in &t.inputs {
        let v = value_of(&i.onnx_name, i.shape.elems())?;
        // An input no output reads is pruned from the entry: nothing to set.
        if parsed.input(entry, &i.tape_name).is_some() {
            session
                .set_input(entry, &i.tape_name, v)
                .map_err(|e| rt(&e))?;
        }
    }
    session.run(entry).map_err(|e| rt(&e))?;
    let runtime = (0..t.outputs.len())
        .map(|k| {
            session
                .output(entry, &output_binding(k))
                .map(<[f32]>::to_vec)
                .map_err(|e| rt(&e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ForwardOutputs {
        oracle,
        runtime,
        arena_elems,
        plan: bytes,
    })
}
