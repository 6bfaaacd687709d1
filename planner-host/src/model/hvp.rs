//! The cross-target matrix's Hessian-vector product workload (issue 14; `cargo xtask matrix`,
//! `docs/cross-target-matrix.md`): a plan whose one entry, [`HVP_ENTRY`], computes the product
//! of the Hessian of W3's loss (the MLP 2-16-16-1, tanh, squared error) with respect to its
//! parameters with a direction `v`, by reverse mode over the recorded gradient (Pearlmutter,
//! "Fast exact multiplication by the Hessian", 1994): `Hv = ∇_θ ⟨∇_θ L(θ), v⟩`.
//!
//! The entry is not training: it updates nothing. A device runs it [`HVP_STEPS`] times with
//! every input (`x`, `y`, and `v.<param>` for every parameter) drawn from one seeded stream in
//! the plan's binding order ([`fill_inputs`]: `SplitMix64(seed)`, each value `2u - 1` for `u`
//! uniform in `[0, 1)`), and sends after each run the digest of every output in binding order
//! (`tapeplan_firmware::entry`). [`HvpWorkload::expected_digests`] computes the same digests
//! with the tape interpreter (the reference kernels), the oracle every target is checked
//! against.

use tapeplan_core::{NodeId, Recordable, Run, Shape, Tape, Tensor};
use tapeplan_runtime::protocol::{Fnv1a64, SplitMix64, INPUT_X, INPUT_Y};
use tapeplan_runtime::Plan;

use crate::model::mlp::{glorot_uniform, record_loss, Activation, Loss, Mlp};
use crate::plan::{plan_with, EntrySpec, FusionPolicy, PlanOptions, PlanningError, Root};

/// The entry's name.
pub const HVP_ENTRY: &str = "hvp";
/// The MLP's widths: W3's.
pub const HVP_SIZES: [usize; 4] = [2, 16, 16, 1];
/// Rows of `x` and `y` per run.
pub const HVP_BATCH: usize = 4;
/// Runs of the entry a device makes (one digest each).
pub const HVP_STEPS: usize = 256;
/// The seed of the initial parameters' Glorot draw and of the inputs' stream.
pub const HVP_SEED: u64 = 42;

/// The workload: its tape, its plan's bytes (unfused, so the firmware's runtime without
/// fused chains runs it), and the parameters' names, shapes and initial values.
pub struct HvpWorkload {
    /// The recorded loss, gradient and Hessian-vector product.
    pub tape: Tape,
    /// The plan's bytes.
    pub plan: Vec<u8>,
    /// The parameters' names and shapes, in [`Mlp::parameter_shapes`] order.
    pub params: Vec<(String, Shape)>,
    /// Their initial values (Glorot, [`HVP_SEED`]).
    pub init: Vec<Vec<f32>>,
    /// The parameters' tape nodes, in `params` order.
    param_nodes: Vec<NodeId>,
    /// The entry's inputs: name and tape node.
    inputs: Vec<(String, NodeId)>,
    /// The entry's outputs: name and tape node.
    outputs: Vec<(String, NodeId)>,
}

/// A workload that cannot be recorded or checked, as the planning error of its entry.
fn invalid(why: impl Into<String>) -> PlanningError {
    PlanningError::BadRoot {
        entry: HVP_ENTRY.into(),
        why: why.into(),
    }
}

/// Records and plans the workload.
///
/// # Errors
/// [`PlanningError`] while recording or planning.
pub fn hvp_workload() -> Result<HvpWorkload, PlanningError> {
    let mlp = Mlp {
        sizes: HVP_SIZES.to_vec(),
        activation: Activation::Tanh,
    };
    let mut tape = Tape::new();
    let (data, param_nodes, _, loss) =
        record_loss(&mut tape, &mlp, Loss::MeanSquaredError, HVP_BATCH)?;
    let params = mlp.parameter_shapes();
    let grads = tape.differentiate(loss, &param_nodes)?;
    let directions: Vec<NodeId> = params
        .iter()
        .map(|(name, shape)| tape.input(&format!("v.{name}"), *shape))
        .collect();
    // ⟨∇L, v⟩, summed over the parameters.
    let inner = {
        let mut t = tape.trace();
        let mut acc: Option<NodeId> = None;
        for (p, v) in param_nodes.iter().zip(&directions) {
            let g = *grads
                .get(*p)
                .ok_or_else(|| invalid(format!("the loss does not reach parameter {p:?}")))?;
            let gv = t.mul(&g, v)?;
            let s = t.sum_all(&gv)?;
            acc = Some(match acc {
                None => s,
                Some(a) => t.add(&a, &s)?,
            });
        }
        acc.ok_or_else(|| invalid("an MLP without parameters"))?
    };
    let hv = tape.differentiate(inner, &param_nodes)?;
    let mut inputs = vec![
        (INPUT_X.to_owned(), data.x),
        (INPUT_Y.to_owned(), data.target),
    ];
    inputs.extend(
        params
            .iter()
            .zip(&directions)
            .map(|((name, _), v)| (format!("v.{name}"), *v)),
    );
    let outputs: Vec<(String, NodeId)> = params
        .iter()
        .zip(&param_nodes)
        .map(|((name, _), p)| {
            hv.get(*p)
                .map(|n| (format!("hv.{name}"), *n))
                .ok_or_else(|| invalid(format!("no Hv for {name}")))
        })
        .collect::<Result<_, _>>()?;
    let schedule = plan_with(
        &tape,
        &[EntrySpec {
            name: HVP_ENTRY.into(),
            roots: outputs
                .iter()
                .map(|(name, node)| Root::Output {
                    name: name.clone(),
                    node: *node,
                })
                .collect(),
            guarded: false,
        }],
        PlanOptions {
            fusion: FusionPolicy::Off,
            ..PlanOptions::default()
        },
    )?;
    let init = glorot_uniform(&params, HVP_SEED);
    Ok(HvpWorkload {
        tape,
        plan: schedule.to_bytes(),
        params,
        init,
        param_nodes,
        inputs,
        outputs,
    })
}

/// Fills an entry's inputs for one run from `stream`, in the plan's binding order: each value
/// `2u - 1`, `u` the stream's next `f32` in `[0, 1)`. `write(name, values)` receives each.
pub fn fill_inputs(
    plan: &Plan<'_>,
    entry: tapeplan_runtime::EntryId,
    stream: &mut SplitMix64,
    mut write: impl FnMut(&str, Vec<f32>),
) {
    for b in plan.inputs(entry) {
        let values: Vec<f32> = (0..b.range().len())
            .map(|_| stream.next_f32() * 2.0 - 1.0)
            .collect();
        write(b.name, values);
    }
}

impl HvpWorkload {
    /// The initial parameters, little-endian `f32`, concatenated in `params` order (what a
    /// device embeds).
    pub fn init_bytes(&self) -> Vec<u8> {
        self.init
            .iter()
            .flatten()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    /// The digest of the entry's outputs (FNV-1a 64 of their values, binding order) after each
    /// of `steps` runs, computed by the tape interpreter (the reference kernels) from the same
    /// inputs a device draws: the oracle's.
    ///
    /// # Errors
    /// [`PlanningError`] if the plan does not parse or the interpreter fails.
    pub fn expected_digests(&self, steps: usize) -> Result<Vec<u64>, PlanningError> {
        let plan = Plan::parse(&self.plan)
            .map_err(|e| invalid(format!("the HVP plan is rejected: {e}")))?;
        let entry = plan
            .entry(HVP_ENTRY)
            .ok_or_else(|| invalid("the HVP plan has no hvp entry"))?;
        let mut stream = SplitMix64::new(HVP_SEED);
        let mut digests = Vec::with_capacity(steps);
        for _ in 0..steps {
            let mut run = Run::new(&self.tape);
            for (((_, shape), node), init) in
                self.params.iter().zip(&self.param_nodes).zip(&self.init)
            {
                run.set(*node, Tensor::new(*shape, init.clone())?)?;
            }
            let mut inputs: Vec<(String, Vec<f32>)> = Vec::new();
            fill_inputs(&plan, entry, &mut stream, |name, v| {
                inputs.push((name.to_owned(), v));
            });
            for (name, values) in inputs {
                let node = self
                    .inputs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, node)| *node)
                    .ok_or_else(|| invalid(format!("no tape input {name}")))?;
                let shape = self.tape.shape(node)?;
                run.set(node, Tensor::new(shape, values)?)?;
            }
            run.forward()?;
            let mut h = Fnv1a64::new();
            for b in plan.outputs(entry) {
                let node = self
                    .outputs
                    .iter()
                    .find(|(n, _)| n == b.name)
                    .map(|(_, node)| *node)
                    .ok_or_else(|| invalid(format!("no output {}", b.name)))?;
                let value = run
                    .value(node)
                    .ok_or_else(|| invalid(format!("{} not computed", b.name)))?;
                h.f32s(&value.data);
            }
            digests.push(h.finish());
        }
        Ok(digests)
    }
}
