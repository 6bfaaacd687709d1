//! `tapeplan describe`: list a plan file, or a model's recorded tape (and with
//! `--error-report`, every node's rounding error).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use tapeplan_planner::io::data;
use tapeplan_planner::io::inspect::PlanInfo;
use tapeplan_planner::model::{glorot_uniform, Loss, TrainingJob};
use tapeplan_planner::protocol::SplitMix64;

use super::args::ModelArgs;
use super::{not_a_checkpoint, planning_options_need_no_plan};

/// `tapeplan describe [PLAN] [--tape [--error-report]] [model options]`.
///
/// # Errors
/// Conflicting options, an unreadable or rejected plan, planning errors.
pub fn describe(
    plan: Option<PathBuf>,
    tape: bool,
    error_report: bool,
    model: &ModelArgs,
) -> Result<ExitCode> {
    if let Some(p) = &plan {
        planning_options_need_no_plan(model, p)?;
    }
    if tape && plan.is_some() {
        bail!("give either a .plan file or --tape (which lists the tape of the model options), not both");
    }
    if tape && error_report {
        return error_report_of(&model.job()?);
    }
    if tape {
        let job = model.job()?;
        print!(
            "{}",
            tapeplan_core::describe(
                &job.tape,
                &[
                    (job.gradient_start, "the gradient, recorded over the loss"),
                    (
                        job.update_start,
                        "the optimizer update, recorded over the gradient"
                    ),
                ]
            )
        );
        println!(
            "(the tape is profile-free; planned with these options it runs under math {})",
            job.schedule.math.name()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let Some(path) = plan else {
        bail!("give a .plan file, or --tape with model options");
    };
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    not_a_checkpoint(&path, &bytes)?;
    tapeplan_runtime::Plan::parse_alloc(&bytes)
        .map_err(|e| anyhow::anyhow!("{}: plan rejected: {e}", path.display()))?;
    print!("{}", PlanInfo::decode(&bytes).listing());
    Ok(ExitCode::SUCCESS)
}

/// `tapeplan describe --tape --error-report`: every node's f32 rounding error against f64.
fn error_report_of(job: &TrainingJob) -> Result<ExitCode> {
    use tapeplan_core::Tensor;
    let x_leaf = *job
        .inputs
        .first()
        .ok_or_else(|| anyhow::anyhow!("the model has no input"))?;
    let x_shape = job.tape.shape(x_leaf)?;
    let t_shape = job.tape.shape(job.target)?;
    let (batch, d_in) = (x_shape.dim(0).unwrap_or(0), x_shape.dim(1).unwrap_or(0));
    let mut rng = SplitMix64::new(7);
    let x: Vec<f32> = if d_in == data::DIGITS_FEATURES {
        let digits = data::digits()?;
        (0..batch)
            .flat_map(|r| digits.row(r % digits.len()).0.to_vec())
            .collect()
    } else {
        (0..x_shape.elems()).map(|_| rng.next_f32()).collect()
    };
    let classes = job.output_shape()?.dim(1).unwrap_or(1);
    let target: Vec<f32> = match job.loss {
        Some(Loss::SoftmaxCrossEntropy) => (0..batch).map(|r| (r % classes) as f32).collect(),
        _ => (0..t_shape.elems()).map(|_| rng.next_f32()).collect(),
    };
    let mut leaves = vec![
        (x_leaf, Tensor::new(x_shape, x)?),
        (job.target, Tensor::new(t_shape, target)?),
    ];
    let shapes = job.parameter_shapes();
    for ((p, (_, s)), v) in job
        .params
        .iter()
        .zip(&shapes)
        .zip(glorot_uniform(&shapes, 42))
    {
        leaves.push((*p, Tensor::new(*s, v)?));
    }
    for (leaf, spec) in job.state.iter().zip(&job.state_specs) {
        leaves.push((
            *leaf,
            Tensor::new(spec.shape, vec![spec.init; spec.shape.elems()])?,
        ));
    }
    let last = job.tape.id(job.tape.len() - 1)?;
    let errors = tapeplan_planner::exec::precision::rounding_errors_with(
        &job.tape, &leaves, last, job.math, job.arith,
    )?;
    println!(
        "rounding error of every node in f32 (math {}, arith {}), against the same tape in f64",
        job.math, job.arith
    );
    println!(
        "{:>5}  {:<14} {:>12} {:>12}",
        "node", "opcode", "max abs", "max rel"
    );
    let (mut worst_abs, mut worst_rel) = (0.0f64, 0.0f64);
    for e in &errors {
        let op = job.tape.nodes()[e.node.index()].op;
        println!(
            "{:>5}  {:<14} {:>12.3e} {:>12.3e}",
            e.node.index(),
            op.name(),
            e.max_abs,
            e.max_rel
        );
        worst_abs = worst_abs.max(e.max_abs);
        worst_rel = worst_rel.max(e.max_rel);
    }
    let loss = errors.iter().find(|e| e.node == job.loss_node);
    if let Some(l) = loss {
        println!("loss: max abs {:.3e}, max rel {:.3e}", l.max_abs, l.max_rel);
    }
    println!("all nodes: max abs {worst_abs:.3e}, max rel {worst_rel:.3e}");
    Ok(ExitCode::SUCCESS)
}
