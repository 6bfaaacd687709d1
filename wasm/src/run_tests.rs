//! Host tests of [`TrainRun`]: the browser's run of a plan on a CSV against the same run made
//! of the planner's own pieces (its CSV table reader, seeded split, standardizer, Glorot
//! initialization, `train_epochs` and the runtime model `tapeplan train` drives): the same
//! losses bit for bit, the same epoch lines, the same parameter digest.

use tapeplan_planner::exec::runtime::RuntimeModel;
use tapeplan_planner::exec::training::{train_epochs, EpochOrder, EpochSummary, Flow, Step};
use tapeplan_planner::exec::training::{StepOutcome, TrainObserver};
use tapeplan_planner::exec::TrainError;
use tapeplan_planner::io::table::{load_table_bytes, Standardizer, TableSpec, Task};
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{glorot_uniform, Activation, Loss, Mlp, TrainingJob};
use tapeplan_runtime::protocol::{parameter_digest, SplitMix64};

use super::{Metrics, RunOptions, Table, TrainRun};

/// A metrics line as `tapeplan train` prints it.
fn shown(m: Metrics) -> String {
    match m {
        Metrics::Accuracy { correct, rows } => {
            format!("accuracy: {:.3}", correct as f32 / rows as f32)
        }
        Metrics::Regression { mse, mae } => {
            let show = |v: f64| {
                if v != 0.0 && v.abs() < 1e-3 {
                    format!("{v:.4e}")
                } else {
                    format!("{v:.6}")
                }
            };
            format!("MSE: {}, MAE: {}", show(mse), show(mae))
        }
    }
}

/// The run's report in `tapeplan train`'s words (what the page's `reportLines` writes).
fn report(run: &TrainRun) -> Vec<String> {
    let mut lines = run.header();
    for (k, e) in run.epoch_reports().iter().enumerate() {
        let mut line = format!("epoch {:>3}: mean loss {:.6}", k + 1, e.mean_loss);
        if let Some(m) = e.validation {
            line += &format!(", validation {}", shown(m));
        }
        lines.push(line);
    }
    lines.extend(run.test_metrics().map(|m| format!("test {}", shown(m))));
    lines
}

/// A CSV of `rows` rows: a header, `features` features, and a label column of class names
/// (`"cat"`, `"ant"`, `"bee"`: sorted, class 0 is `ant`) or `targets` float targets.
fn csv(rows: usize, features: usize, targets: Option<usize>, seed: u64) -> String {
    let mut rng = SplitMix64::new(seed);
    let mut out = String::new();
    let names: Vec<String> = (0..features)
        .map(|j| format!("f{j}"))
        .chain((0..targets.unwrap_or(1)).map(|k| format!("t{k}")))
        .collect();
    out.push_str(&names.join(","));
    out.push('\n');
    for r in 0..rows {
        let class = r % 3;
        let mut fields: Vec<String> = (0..features)
            .map(|j| {
                let signal = if j % 3 == class { 1.5 } else { 0.0 };
                format!("{:.4}", signal + 2.0 * rng.next_f32() - 1.0)
            })
            .collect();
        match targets {
            None => fields.push(["cat", "ant", "bee"][class].into()),
            Some(n) => {
                for k in 0..n {
                    fields.push(format!("{:.3}", (class + k) as f32 * 0.5 - 0.25));
                }
            }
        }
        out.push_str(&fields.join(" , "));
        out.push('\n');
    }
    out
}

fn mlp_plan(sizes: &[usize], loss: Loss, batch: usize) -> Vec<u8> {
    let mlp = Mlp {
        sizes: sizes.to_vec(),
        activation: Activation::Tanh,
    };
    TrainingJob::for_model(&mlp.model(0.0, 0))
        .loss(loss)
        .optimizer(Optimizer::adam(0.01))
        .batch(batch)
        .build()
        .unwrap()
        .schedule
        .to_bytes()
}

/// The CSV as `tapeplan train` reads it (the planner's reader), as the page's reader hands it
/// to a [`TrainRun`].
fn table(text: &str, task: &Task) -> Table {
    let spec = TableSpec {
        task: task.clone(),
        target_columns: Vec::new(),
    };
    let t = load_table_bytes(text.as_bytes(), &spec).unwrap();
    let d = t.dataset;
    let regression = d.n_targets() > 0;
    Table {
        features: d.features.clone(),
        targets: if regression {
            d.targets().to_vec()
        } else {
            d.labels.iter().map(|&l| f32::from(l)).collect()
        },
        n_features: d.n_features(),
        target_width: if regression { d.n_targets() } else { 1 },
        class_names: t.class_names.unwrap_or_default(),
    }
}

/// Collects what `tapeplan train` prints per epoch.
struct Collect {
    losses: Vec<f32>,
    epochs: Vec<String>,
}

impl TrainObserver for Collect {
    type Error = TrainError;

    fn step(&mut self, _: &mut RuntimeModel<'_>, step: Step<'_>) -> Result<Flow, TrainError> {
        if let StepOutcome::Loss(l) = step.outcome {
            self.losses.push(l);
        }
        Ok(Flow::Continue)
    }

    fn epoch_end(
        &mut self,
        _: &mut RuntimeModel<'_>,
        s: &EpochSummary,
    ) -> Result<Flow, TrainError> {
        self.epochs.push(format!(
            "epoch {:>3}: mean loss {:.6}",
            s.epoch + 1,
            s.mean_loss
        ));
        Ok(Flow::Continue)
    }
}

/// The host's run (`tapeplan train PLAN --data CSV` without `--init`, validation and test
/// metrics aside): its losses, epoch lines and parameter digest.
fn host_run(plan: &[u8], text: &str, task: Task, o: RunOptions) -> (Vec<f32>, Vec<String>, String) {
    let spec = TableSpec {
        task,
        target_columns: Vec::new(),
    };
    let mut dataset = load_table_bytes(text.as_bytes(), &spec).unwrap().dataset;
    for v in &mut dataset.features {
        *v *= o.scale;
    }
    let n_train = ((dataset.len() as f64 * o.train_fraction).round() as usize).min(dataset.len());
    let n_val = ((n_train as f64) * o.val_fraction).round() as usize;
    let (train, mut test) = dataset.split_seeded(o.split_seed, n_train);
    let (mut train, mut val) = train.split_at(train.len() - n_val);
    if o.standardize {
        let s = Standardizer::fit(&train);
        for set in [&mut train, &mut val, &mut test] {
            s.apply(set);
        }
    }
    let mut model = RuntimeModel::new(plan).unwrap();
    let p = *model.plan();
    let shapes: Vec<(String, tapeplan_runtime::Shape)> = p
        .parameters()
        .filter(|b| !b.name.contains('.'))
        .map(|b| (b.name.to_string(), b.shape))
        .collect();
    for ((name, _), v) in shapes.iter().zip(glorot_uniform(&shapes, o.seed)) {
        model.load_parameter(name, &v).unwrap();
    }
    let batch = p
        .input(p.entry("train_step").unwrap(), "x")
        .unwrap()
        .shape
        .dims()[0];
    let mut c = Collect {
        losses: Vec::new(),
        epochs: Vec::new(),
    };
    let order = EpochOrder {
        seed: o.seed,
        batch,
    };
    train_epochs(&mut model, &train, order, 0..o.epochs, &mut c).unwrap();
    let digest = format!("0x{:016x}", parameter_digest(&p, model.persistent()));
    (c.losses, c.epochs, digest)
}

fn browser_run(plan: &[u8], text: &str, task: &Task, o: RunOptions) -> TrainRun {
    let mut run = TrainRun::create(plan, table(text, task), o).unwrap();
    run.glorot().unwrap();
    // Uneven slices, as frames would take them.
    while run.advance(7).unwrap() > 0 {}
    assert!(run.done());
    run
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|f| f.to_bits()).collect()
}

#[test]
fn a_classification_run_equals_the_host_s_bit_for_bit() {
    let plan = mlp_plan(&[6, 8, 3], Loss::SoftmaxCrossEntropy, 8);
    let text = csv(150, 6, None, 1);
    let o = RunOptions {
        epochs: 3,
        seed: 5,
        split_seed: 2,
        val_fraction: 0.2,
        scale: 0.5,
        standardize: true,
        ..RunOptions::default()
    };
    let task = Task::Classification { classes: None };
    let run = browser_run(&plan, &text, &task, o);
    let (losses, epochs, digest) = host_run(&plan, &text, task, o);
    // 150 rows: 120 train, of them 24 validation; 96 rows = 12 steps of 8 per epoch.
    assert_eq!(run.steps_per_epoch(), 12);
    assert_eq!(losses.len(), 36);
    assert_eq!(bits(&run.losses), bits(&losses));
    assert_eq!(run.parameter_digest(), digest);
    assert_eq!(run.trainer.parameter_digest(), digest);
    let log = report(&run).join("\n");
    assert!(
        log.starts_with(
            "training for 3 epochs: 96 train rows, 24 validation rows, 30 test rows, batch 8"
        ),
        "{log}"
    );
    assert!(
        log.contains("3 class names (class k is the k-th): ant, bee, cat"),
        "{log}"
    );
    for e in &epochs {
        assert!(
            log.contains(&format!("{e}, validation accuracy: ")),
            "{e} in {log}"
        );
    }
    assert!(log.contains("\ntest accuracy: "), "{log}");

    // The loss went down: the features carry the class.
    assert!(losses[30..].iter().sum::<f32>() < losses[..6].iter().sum::<f32>());
}

#[test]
fn a_regression_run_equals_the_host_s_bit_for_bit() {
    let plan = mlp_plan(&[4, 5, 2], Loss::MeanSquaredError, 4);
    let text = csv(41, 4, Some(2), 9);
    let o = RunOptions {
        epochs: 2,
        ..RunOptions::default()
    };
    let task = Task::Regression { n_targets: 2 };
    let run = browser_run(&plan, &text, &task, o);
    let (losses, _, digest) = host_run(&plan, &text, task, o);
    // 41 rows: round(32.8) = 33 train rows, 8 steps of 4 (one row left out) per epoch.
    assert_eq!(losses.len(), 16);
    assert_eq!(bits(&run.losses), bits(&losses));
    assert_eq!(run.parameter_digest(), digest);
    let log = report(&run);
    assert!(log.iter().any(|l| l.starts_with("test MSE: ")), "{log:?}");
}

#[test]
fn a_run_that_does_not_fit_its_plan_is_an_error_naming_why() {
    let plan = mlp_plan(&[6, 8, 3], Loss::SoftmaxCrossEntropy, 8);
    let labels = Task::Classification { classes: None };
    let err = |text: &str, o: RunOptions| {
        let t = table(text, &labels);
        TrainRun::create(&plan, t, o).err().unwrap().to_string()
    };
    let o = RunOptions::default();
    assert_eq!(
        err(&csv(40, 5, None, 1), o),
        "the data has 5 features per row; the plan's input x is [8, 6] (6 per row)"
    );
    let wide = "1,2,3,4,5,6,3\n".repeat(20);
    assert_eq!(
        err(&wide, o),
        "data row 1 has label 3, but the plan has 3 classes (0..2)"
    );
    assert_eq!(
        err(&csv(9, 6, None, 1), o),
        "the training split has 7 rows, fewer than one batch of 8"
    );
    assert_eq!(
        err(&csv(40, 6, None, 1), RunOptions { epochs: 0, ..o }),
        "epochs must be at least 1"
    );
    let regression = table("1,2,3,4,5,6,0.5,1.5\n", &Task::Regression { n_targets: 2 });
    assert_eq!(
        TrainRun::create(&plan, regression, o)
            .err()
            .unwrap()
            .to_string(),
        "the table has 2 target values per row; the plan's train_step takes 1"
    );
    assert_eq!(super::target_width(&plan).unwrap(), 0);
    let mse = mlp_plan(&[4, 5, 2], Loss::MeanSquaredError, 4);
    assert_eq!(super::target_width(&mse).unwrap(), 2);
    assert!(super::target_width(b"not a plan").is_err());
    // A parameter the file does not give stops the first step.
    let t = table(&csv(40, 6, None, 1), &labels);
    let mut run = TrainRun::create(&plan, t, o).unwrap();
    assert_eq!(run.tensor_names(), ["w1", "b1", "w2", "b2"]);
    run.load_parameter("w1", &[0.5; 48]).unwrap();
    assert!(run
        .advance(1)
        .unwrap_err()
        .to_string()
        .starts_with("the plan's b1 has no initial value"));
    assert!(run
        .load_parameter("b1", &[f32::NAN; 8])
        .unwrap_err()
        .to_string()
        .contains("non-finite"));
}
