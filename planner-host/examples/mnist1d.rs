//! MNIST-1D's CNN (Greydanus, "Scaling Down Deep Learning", 2020) built with the layer API,
//! planned, and trained through the `no_std` runtime on the host, checked bit for bit against
//! an oracle, then evaluated on the test split.
//!
//! ```sh
//! cargo run --release -p tapeplan-planner --example mnist1d            # 8001 steps
//! cargo run --release -p tapeplan-planner --example mnist1d -- 300     # a prefix of the schedule
//! cargo run --release -p tapeplan-planner --example mnist1d -- --write-init init42.safetensors
//! ```
//!
//! `--write-init PATH` writes the initial parameters (seed [`SEED`], or `--seed N`) as a
//! safetensors file under their `state_dict` names and PyTorch layouts and trains nothing:
//! `scripts/mnist1d_jax.py --init PATH` trains the same initial parameters in JAX.
//!
//! The paper's setup (its repository's `models.py` `ConvBase` and `train.py`): three `Conv1d`
//! with 25 channels (kernel 5 then 3, 3; stride 2, padding 1), ReLU after each, a linear head on
//! the flattened 25 × 5 features; cross-entropy; Adam with learning rate 1e-2, PyTorch's betas
//! and epsilon, weight decay 0; batch 100; batch `k` is rows `(100 k) mod 4000` to `+ 100` of
//! the training split, in order; 8001 steps. Initialization is PyTorch's default, from the
//! layer API's seeded stream with seed [`SEED`], fixed before any run. The test accuracy is
//! measured once, after the last step: no selection on the test split.
//!
//! The steps are the paper repository's: its `notebooks/train.py` (`get_model_args`) sets
//! `total_steps: 8000` and trains `for step in range(total_steps+1)`, 8001 steps, evaluating
//! at the end (greydanus/mnist1d at 9e531f7; the `mnist1d` package on PyPI ships the data
//! code only). This example ran 6000 steps until 2026-12-02.
//!
//! Measured (2026-12-02, `cargo run --release -p tapeplan-planner --example mnist1d`):
//! 8001/8001 steps bit-identical, test accuracy **91.7 %** (train 100 %, batch loss 0.0000 at
//! four decimals from step 6000 on), final digest `17fd6060b4d4b12e`; 1558 s wall on a loaded
//! 2-core machine. That is below the paper's 94 % for this one seed, fixed beforehand and not
//! changed after: the paper's figure is a typical seed, not every seed. `scripts/mnist1d_jax.py`, the same
//! protocol written independently in JAX, gives at 8001 steps 94.3, 94.6, 93.4, 93.6, 92.8,
//! 94.2, 93.8 and 93.3 % for seeds 0 to 7 (mean 93.75 %, three of eight at 94 % or more); at
//! 6000 steps it gave 94.5, 95.0, 91.7, 94.9, 92.8, 93.8, 93.8 and 94.3 % (mean 93.85 %), and
//! this example 92.2 % (digest `36bb420b83282ea0`).
//!
//! Seed 42's shortfall is its initial draw, not the training (checked 2026-12-02): from this
//! example's own initial parameters (`--write-init`, then `scripts/mnist1d_jax.py --init`),
//! JAX in `f32` reaches 92.4 % at 8001 steps (92.3–92.4 % at every 250th step from 6001 on)
//! and JAX in `f64` (`JAX_ENABLE_X64=1`, data and parameters widened) 91.8 %: this example's
//! 91.7 % lies within what rounding alone moves the same start by. Over seeds 0–7 of this
//! initializer JAX `f32` gives 91.8, 92.4, 94.2, 94.3, 92.3, 93.8, 93.1 and 93.9 % (mean
//! 93.2 %; numpy's draws above: 93.75 %), two of eight at 94 % or more.
//!
//! The paper repository's own run of this model agrees (checked 2026-12-03): its
//! `notebooks/mnist1d-classification.ipynb` (greydanus/mnist1d at 7878d96) trains `ConvBase`
//! with `get_model_args()` (seed 42 through `set_seed`, PyTorch's initializer, 6000 steps) on
//! the repository's frozen `mnist1d_data.pkl` and its saved output prints test accuracy 87.9,
//! 90.8, 90.6, 92.2, 91.9 and **92.3 %** at steps 1000 to 6000. That frozen file equals the
//! bundled `data/mnist1d.csv.gz` (every label; inputs within 3.9e-7, the `f32` rounding of the
//! CSV). The README table's 94 % is therefore not what the paper's code gives at every seed:
//! its own seed-42 run ends at 92.3 %, this example's seed-42 run at 91.7 %.
//!
//! The model becomes a [`TrainingJob`] (the general job over any [`tapeplan_planner::model::Model`]); the
//! [`Oracle`] trains the same job without its schedule (core's tape interpreter for the loss,
//! its engine reverse scan for the gradient, the optimizer's update body computed directly); the
//! runtime runs the planned `train_step`. Every step, the loss, every parameter and every piece
//! of optimizer state of the runtime must equal the oracle's bit for bit.

use std::time::Instant;

mod support;

use anyhow::{bail, Context, Result};
use tapeplan_planner::exec::oracle::Oracle;
use tapeplan_planner::exec::runtime::RuntimeModel;
use tapeplan_planner::io::data::mnist1d;
use tapeplan_planner::io::exchange::{export_safetensors, Param};
use tapeplan_planner::model::nn::Sequential;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::run::mnist1d_cnn;
use tapeplan_planner::model::{Loss, TrainingJob};
use tapeplan_planner::protocol::digest_f32;

/// The initialization seed, fixed before the first run.
const SEED: u64 = 42;
/// The paper's batch size.
const BATCH: usize = 100;
/// The paper repository's number of steps: its `notebooks/train.py` sets `total_steps: 8000`
/// and steps `for step in range(total_steps+1)`, 8001 steps.
const STEPS: usize = 8001;
/// The paper's learning rate.
const LR: f32 = 1e-2;
/// Samples per signal.
const LENGTH: usize = 40;
/// Rows of the training split (the rest is the test split).
const TRAIN_ROWS: usize = 4000;

/// The paper's `ConvBase`, in the layer API (the library's, which `model=mnist1d_cnn` runs name).
fn cnn(seed: u64) -> Sequential {
    mnist1d_cnn(seed)
}

/// The command line: `[STEPS] [--seed N] [--write-init PATH]`.
struct Args {
    steps: usize,
    seed: u64,
    write_init: Option<String>,
}

fn args() -> Result<Args> {
    let mut out = Args {
        steps: STEPS,
        seed: SEED,
        write_init: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seed" => {
                let v = it.next().context("--seed needs a value")?;
                out.seed = v
                    .parse()
                    .with_context(|| format!("--seed: {v:?} is not an integer"))?;
            }
            "--write-init" => {
                out.write_init = Some(it.next().context("--write-init needs a path")?);
            }
            _ => {
                out.steps = a
                    .parse()
                    .with_context(|| format!("steps: {a:?} is not a count"))?;
            }
        }
    }
    Ok(out)
}

fn main() -> Result<()> {
    let Args {
        steps,
        seed,
        write_init,
    } = args()?;
    let all = mnist1d().context("loading the embedded MNIST-1D set")?;
    if all.len() != 5000 || all.n_features() != LENGTH {
        bail!("the MNIST-1D set holds {} rows, expected 5000", all.len());
    }
    let train = all.subset(&(0..TRAIN_ROWS).collect::<Vec<_>>());
    let test = all.subset(&(TRAIN_ROWS..all.len()).collect::<Vec<_>>());

    let model = cnn(seed);
    let t0 = Instant::now();
    let job = TrainingJob::for_model(&model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(Optimizer::adam(LR))
        .batch(BATCH)
        .build()?;
    if let Some(path) = write_init {
        let params: Vec<Param> = job
            .parameters
            .iter()
            .map(|s| Param {
                name: s.name.clone(),
                shape: s.shape,
                values: s.init.clone(),
            })
            .collect();
        let bytes = export_safetensors(&params, &[("tapeplan.seed", seed.to_string())])?;
        std::fs::write(&path, bytes).with_context(|| format!("writing {path}"))?;
        println!("wrote {path}: the initial parameters of seed {seed}");
        return Ok(());
    }
    let bytes = job.schedule.to_bytes();
    let n_params: usize = job.parameters.iter().map(|s| s.init.len()).sum();
    let mut rt = RuntimeModel::new(&bytes)?;
    for s in &job.parameters {
        rt.load_parameter(&s.name, &s.init)?;
    }
    println!(
        "mnist1d: CNN {n_params} parameters; plan {} B, arena {} B; planned in {:.2} s",
        bytes.len(),
        rt.arena_bytes(),
        t0.elapsed().as_secs_f64()
    );
    let mut oracle = Oracle::with_initial_parameters(&job)?;
    let names: Vec<String> = job.parameters.iter().map(|s| s.name.clone()).collect();
    let state_names: Vec<String> = job.state_specs.iter().map(|s| s.name.clone()).collect();

    let t0 = Instant::now();
    let mut checked = 0usize;
    for step in 0..steps {
        let start = (step * BATCH) % train.len();
        let (x, labels) = support::batch_rows(&train, start, BATCH);
        let loss_rt = rt.train_step(&x, &labels)?;
        let loss_or = oracle.step(&x, &labels)?;
        support::check_step(
            &mut rt,
            &oracle,
            &names,
            &state_names,
            step,
            (loss_rt, loss_or),
        )?;
        checked += 1;
        if (step + 1) % 500 == 0 || step + 1 == steps {
            println!(
                "step {:>5}  loss {loss_rt:.4}  ({:.1} s)",
                step + 1,
                t0.elapsed().as_secs_f64()
            );
        }
    }
    let mut params = Vec::new();
    for s in &job.parameters {
        params.extend(rt.parameter(&s.name)?);
    }
    let test_x: Vec<f32> = (0..test.len())
        .flat_map(|i| test.row(i).0.to_vec())
        .collect();
    let test_labels: Vec<u8> = (0..test.len()).map(|i| test.row(i).1).collect();
    let acc = rt.accuracy(&test_x, &test_labels, LENGTH, BATCH)?;
    let train_x: Vec<f32> = (0..train.len())
        .flat_map(|i| train.row(i).0.to_vec())
        .collect();
    let train_labels: Vec<u8> = (0..train.len()).map(|i| train.row(i).1).collect();
    let train_acc = rt.accuracy(&train_x, &train_labels, LENGTH, BATCH)?;
    println!("bitwise: {checked}/{steps} steps identical (runtime vs oracle: loss, parameters, optimizer state)");
    println!(
        "train accuracy {:.1} % ({} rows)",
        100.0 * train_acc,
        train.len()
    );
    println!("test accuracy {:.1} % ({} rows)", 100.0 * acc, test.len());
    println!(
        "digest {:016x} (FNV-1a of the final parameters' bits, state_dict order)",
        digest_f32(&params)
    );
    Ok(())
}
