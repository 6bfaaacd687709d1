//! The bit-preserving planner passes (constant folding, common-subexpression elimination):
//! a plan's results are bit-identical with the passes on and off, over whole training runs.
//! Run with `--nocapture` to see the instruction counts and memory reports before and after.

use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{glorot_uniform, Activation, Loss, Mlp};
use tapeplan_planner::model::{JobOptions, TrainingJob};
use tapeplan_planner::plan::rewrite::Passes;
use tapeplan_planner::protocol::SplitMix64;

fn run(
    sizes: &[usize],
    opt: Optimizer,
    dropout: f32,
    passes: Passes,
) -> (Vec<u32>, Vec<f32>, String) {
    let mlp = Mlp {
        sizes: sizes.to_vec(),
        activation: Activation::Tanh,
    };
    let options = JobOptions {
        guarded: true,
        dropout,
        seed: 3,
        passes,
        ..Default::default()
    };
    let job = TrainingJob::build_with(mlp, Loss::SoftmaxCrossEntropy, opt, 8, options).unwrap();
    let train = job.schedule.entry("train_step").unwrap();
    let summary = format!(
        "{:>3} train_step instructions, entry {} B, lower bound {} B, arena {} B ({:?})",
        train.instrs.len(),
        train.report.entry_bytes,
        train.report.lower_bound_bytes,
        train.report.arena_bytes,
        job.rewrite_stats
    );
    let bytes = job.schedule.to_bytes();
    let mut model = RuntimeModel::new(&bytes).unwrap();
    let shapes = job.parameter_shapes();
    for ((n, _), v) in shapes.iter().zip(glorot_uniform(&shapes, 11)) {
        model.load_parameter(n, &v).unwrap();
    }
    let mut rng = SplitMix64::new(5);
    let (d_in, classes) = (sizes[0], *sizes.last().unwrap());
    let mut losses = Vec::new();
    for _ in 0..15 {
        let x: Vec<f32> = (0..8 * d_in).map(|_| rng.next_f32()).collect();
        let y: Vec<f32> = (0..8).map(|_| rng.below(classes) as f32).collect();
        losses.push(model.train_step(&x, &y).unwrap().to_bits());
    }
    (losses, model.persistent().to_vec(), summary)
}

#[test]
fn passes_on_and_off_give_the_same_bits() {
    for (sizes, opt, dropout) in [
        (vec![64, 32, 10], Optimizer::sgd(0.1), 0.0),
        (vec![20, 16, 16, 5], Optimizer::adam(0.01), 0.0),
        (
            vec![12, 8, 4],
            Optimizer::Momentum {
                lr: 0.05,
                momentum: 0.9,
                nesterov: true,
            },
            0.2,
        ),
    ] {
        let (l_off, p_off, s_off) = run(&sizes, opt, dropout, Passes::NONE);
        let (l_on, p_on, s_on) = run(&sizes, opt, dropout, Passes::ALL);
        println!("{sizes:?} {}:\n  off: {s_off}\n  on:  {s_on}", opt.name());
        assert_eq!(l_off, l_on, "{sizes:?}: losses");
        let same = p_off
            .iter()
            .zip(&p_on)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(
            same && p_off.len() == p_on.len(),
            "{sizes:?}: persistent region"
        );
    }
}
