//! `tapeplan train`, `export` and `import` for any plan (issue 13's "CLI for any model"):
//! regression from a CSV with target columns and standardization, class names as labels, a
//! validation split, widths inferred from the data, no silent overwrite, model options beside a
//! plan refused, initial parameters from a file, key remaps.

use crate::common;

use common::{fails, ok, scratch_dir, tapeplan};
use safetensors::SafeTensors;

use tapeplan_planner::io::exchange::{export_safetensors, Param};
use tapeplan_planner::model::glorot_uniform;

/// A deterministic uniform number in `[-1, 1)` (a 32-bit LCG), exactly representable.
fn uniform(state: &mut u32) -> f32 {
    *state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
    ((*state >> 8) as f32 / (1u32 << 24) as f32) * 2.0 - 1.0
}

/// Rows `(x1, x2)` with `x1` in `[-1, 1)` and `x2` in `[2, 6)`: `n` of them.
fn features(n: usize) -> Vec<(f32, f32)> {
    let mut s = 7u32;
    (0..n)
        .map(|_| (uniform(&mut s), 4.0 + 2.0 * uniform(&mut s)))
        .collect()
}

/// The first tensor of a safetensors file named `name`, as `f32`s.
fn tensor(bytes: &[u8], name: &str) -> Vec<f32> {
    let st = SafeTensors::deserialize(bytes).unwrap();
    st.tensor(name)
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The number after `key` on the last line that has it.
fn last_value(out: &str, key: &str) -> f64 {
    let line = out.lines().rev().find(|l| l.contains(key)).unwrap();
    let rest = &line[line.find(key).unwrap() + key.len()..];
    rest.trim_start()
        .split(|c: char| c == ',' || c.is_whitespace())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_linear_regression_from_a_csv_learns_the_generating_weights() {
    let dir = scratch_dir("any-regression");
    // y = 2·x1 − x2 + 0.5 exactly; the target is the first column, named in a header.
    let mut csv = String::from("y,x1,x2\n");
    for (x1, x2) in features(400) {
        csv.push_str(&format!("{},{x1},{x2}\n", 2.0 * x1 - x2 + 0.5));
    }
    std::fs::write(dir.join("lin.csv"), &csv).unwrap();
    // A single dense layer (2 → 1), planned by `train` itself with MSE.
    let out = ok(
        &dir,
        &[
            "train",
            "--data",
            "lin.csv",
            "--target-columns",
            "y",
            "--loss",
            "mse",
            "--layers",
            "2,1",
            "--lr",
            "0.05",
            "--epochs",
            "400",
            "--val-fraction",
            "0.2",
            "--save-params",
            "lin.safetensors",
        ],
    );
    assert!(out.contains("planned 2-1"), "{out}");
    assert!(
        out.contains("256 train rows, 64 validation rows, 80 test rows"),
        "{out}"
    );
    assert!(out.contains("validation MSE: "), "{out}");
    let first_val = out
        .lines()
        .find(|l| l.contains("validation MSE: "))
        .map(|l| last_value(l, "validation MSE:"))
        .unwrap();
    let test_mse = last_value(&out, "test MSE:");
    assert!(test_mse < 1e-6 && test_mse < first_val / 1e3, "{out}");
    // PyTorch's layout: 0.weight [1, 2], 0.bias [1]; the generating weights, found.
    let st = std::fs::read(dir.join("lin.safetensors")).unwrap();
    let (w, b) = (tensor(&st, "0.weight"), tensor(&st, "0.bias"));
    assert!(
        (w[0] - 2.0).abs() < 1e-3 && (w[1] + 1.0).abs() < 1e-3,
        "{w:?}"
    );
    assert!((b[0] - 0.5).abs() < 1e-3, "{b:?}");
}

#[test]
fn standardization_is_fitted_on_the_training_split_saved_and_applied() {
    let dir = scratch_dir("any-standardize");
    let rows = features(320);
    let mut csv = String::new();
    for &(x1, x2) in &rows {
        csv.push_str(&format!("{x1},{x2},{}\n", 2.0 * x1 - x2 + 0.5));
    }
    std::fs::write(dir.join("lin.csv"), &csv).unwrap();
    ok(
        &dir,
        &[
            "plan", "--layers", "2,1", "--loss", "mse", "--lr", "0.05", "-o", "lin.plan",
        ],
    );
    // Every row trains (--train-fraction 1), so the fit is over all of them.
    let out = ok(
        &dir,
        &[
            "train",
            "lin.plan",
            "--data",
            "lin.csv",
            "--standardize",
            "--train-fraction",
            "1",
            "--epochs",
            "80",
            "--save-params",
            "p.safetensors",
        ],
    );
    assert!(out.contains("standardized 2 features"), "{out}");
    // The mean and population std of each column, in f64 by hand.
    let n = rows.len() as f64;
    let col = |k: usize| -> Vec<f64> {
        rows.iter()
            .map(|&(a, b)| f64::from(if k == 0 { a } else { b }))
            .collect()
    };
    let mean: Vec<f64> = (0..2).map(|k| col(k).iter().sum::<f64>() / n).collect();
    let std: Vec<f64> = (0..2)
        .map(|k| (col(k).iter().map(|x| (x - mean[k]).powi(2)).sum::<f64>() / n).sqrt())
        .collect();
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("lin.plan.standardize.json")).unwrap(),
    )
    .unwrap();
    for k in 0..2 {
        assert_eq!(json["mean"][k].as_f64().unwrap() as f32, mean[k] as f32);
        assert_eq!(json["std"][k].as_f64().unwrap() as f32, std[k] as f32);
    }
    // Trained on standardized features z = (x − mean) / std, the model is
    // y = 2·std1·z1 − std2·z2 + (0.5 + 2·mean1 − mean2).
    let st = std::fs::read(dir.join("p.safetensors")).unwrap();
    let (w, b) = (tensor(&st, "0.weight"), tensor(&st, "0.bias"));
    let expect_b = 0.5 + 2.0 * mean[0] - mean[1];
    assert!(
        (f64::from(w[0]) - 2.0 * std[0]).abs() < 1e-3,
        "{w:?} {std:?}"
    );
    assert!((f64::from(w[1]) + std[1]).abs() < 1e-3, "{w:?} {std:?}");
    assert!(
        (f64::from(b[0]) - expect_b).abs() < 1e-3,
        "{b:?} {expect_b}"
    );
}

/// Three well separated clusters with class names, in a scrambled order.
fn iris_like() -> String {
    let names = ["virginica", "setosa", "versicolor"];
    let centers = [(3.0f32, 3.0f32), (-3.0, 0.0), (3.0, -3.0)];
    let mut s = 11u32;
    let mut csv = String::from("a,b,species\n");
    for i in 0..300 {
        let k = (i * 7) % 3;
        let (cx, cy) = centers[k];
        csv.push_str(&format!(
            "{},{},{}\n",
            cx + uniform(&mut s),
            cy + uniform(&mut s),
            names[k]
        ));
    }
    csv
}

#[test]
fn class_names_are_labels_and_their_mapping_is_saved_beside_the_plan() {
    let dir = scratch_dir("any-classes");
    std::fs::write(dir.join("iris.csv"), iris_like()).unwrap();
    // Widths from the data: 2 features, 3 classes.
    let out = ok(
        &dir,
        &[
            "train",
            "--data",
            "iris.csv",
            "--epochs",
            "5",
            "--batch",
            "16",
            "--val-fraction",
            "0.25",
        ],
    );
    assert!(out.contains("planned 2-32-3"), "{out}");
    assert!(out.contains("validation accuracy: "), "{out}");
    assert!(last_value(&out, "test accuracy:") >= 0.95, "{out}");
    assert!(out.contains("test predictions, first 5: "), "{out}");
    let predictions = out
        .lines()
        .find(|l| l.contains("test predictions"))
        .unwrap();
    assert!(
        ["setosa (label", "versicolor (label", "virginica (label"]
            .iter()
            .any(|n| predictions.contains(n)),
        "{predictions}"
    );
    let classes = dir.join("model.plan.classes.json");
    assert_eq!(
        std::fs::read_to_string(&classes).unwrap(),
        r#"["setosa","versicolor","virginica"]"#
    );
    // Trained again, the saved mapping is the one used, whatever its order.
    std::fs::write(&classes, r#"["versicolor","virginica","setosa"]"#).unwrap();
    let out = ok(
        &dir,
        &["train", "model.plan", "--data", "iris.csv", "--epochs", "5"],
    );
    assert!(last_value(&out, "test accuracy:") >= 0.95, "{out}");
    assert_eq!(
        std::fs::read_to_string(&classes).unwrap(),
        r#"["versicolor","virginica","setosa"]"#
    );
    // A class the plan was not trained with is named.
    let mut extra = iris_like();
    extra.push_str("0.5,0.5,daisy\n");
    std::fs::write(dir.join("extra.csv"), extra).unwrap();
    let err = fails(&dir, &["train", "model.plan", "--data", "extra.csv"]);
    assert!(
        err.contains("row 302: class \"daisy\" is not one of the 3 classes"),
        "{err}"
    );
}

#[test]
fn train_never_overwrites_a_plan_and_refuses_model_options_beside_one() {
    let dir = scratch_dir("any-overwrite");
    std::fs::write(dir.join("iris.csv"), iris_like()).unwrap();
    let args = ["train", "--data", "iris.csv", "--epochs", "1"];
    ok(&dir, &args);
    let before = std::fs::read(dir.join("model.plan")).unwrap();
    let err = fails(&dir, &[&args[..], &["--layers", "2,8,3"]].concat());
    assert!(err.contains("model.plan exists"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(std::fs::read(dir.join("model.plan")).unwrap(), before);
    let out = ok(
        &dir,
        &[&args[..], &["--layers", "2,8,3", "--force"]].concat(),
    );
    assert!(out.contains("planned 2-8-3"), "{out}");
    assert_ne!(std::fs::read(dir.join("model.plan")).unwrap(), before);

    // Explicit widths that do not fit the data are refused before anything is written.
    std::fs::remove_file(dir.join("model.plan")).unwrap();
    let err = fails(&dir, &[&args[..], &["--layers", "4,8,3"]].concat());
    assert!(
        err.contains(
            "--layers 4,8,3 does not fit the data: its rows have 2 features and 3 classes"
        ),
        "{err}"
    );
    assert!(!dir.join("model.plan").exists());
    ok(&dir, &args);

    for (option, value) in [("--layers", "4,3,2"), ("--lr", "0.5"), ("--loss", "mse")] {
        let err = fails(
            &dir,
            &["train", "model.plan", "--data", "iris.csv", option, value],
        );
        assert!(
            err.contains("model.plan is already planned, so") && err.contains(option),
            "{option}: {err}"
        );
    }
}

/// The safetensors file (PyTorch names and layouts) of the MLP `widths`' Glorot draw of
/// `seed`, written by the library.
fn glorot_file(widths: &[usize], seed: u64) -> Vec<u8> {
    let mut shapes = Vec::new();
    for (k, w) in widths.windows(2).enumerate() {
        shapes.push((
            format!("w{}", k + 1),
            tapeplan_core::Shape::matrix(w[0], w[1]),
        ));
        shapes.push((format!("b{}", k + 1), tapeplan_core::Shape::vector(w[1])));
    }
    let params: Vec<Param> = shapes
        .iter()
        .zip(glorot_uniform(&shapes, seed))
        .map(|((name, shape), values)| Param {
            name: name.clone(),
            shape: *shape,
            values,
        })
        .collect();
    export_safetensors(&params, &[]).unwrap()
}

#[test]
fn init_loads_the_initial_parameters_bit_for_bit() {
    let dir = scratch_dir("any-init");
    ok(&dir, &["plan", "--layers", "64,16,10", "-o", "m.plan"]);
    let common = ["train", "m.plan", "--epochs", "1", "--seed", "7"];
    ok(
        &dir,
        &[&common[..], &["--save-params", "glorot.safetensors"]].concat(),
    );
    // The same Glorot draw, written by the library, given as --init: the same training.
    std::fs::write(dir.join("init.safetensors"), glorot_file(&[64, 16, 10], 7)).unwrap();
    let out = ok(
        &dir,
        &[
            &common[..],
            &[
                "--init",
                "init.safetensors",
                "--save-params",
                "from_init.safetensors",
            ],
        ]
        .concat(),
    );
    assert!(
        out.contains("initial parameters: init.safetensors"),
        "{out}"
    );
    assert_eq!(
        std::fs::read(dir.join("from_init.safetensors")).unwrap(),
        std::fs::read(dir.join("glorot.safetensors")).unwrap()
    );
    // A file of another shape is refused, naming the tensor.
    ok(&dir, &["plan", "--layers", "64,8,10", "-o", "other.plan"]);
    let err = fails(&dir, &["train", "other.plan", "--init", "init.safetensors"]);
    assert!(
        err.contains("tensor \"0.weight\" has shape [16, 64]"),
        "{err}"
    );
}

#[test]
fn export_and_import_rename_keys() {
    let dir = scratch_dir("any-rename");
    ok(&dir, &["plan", "--layers", "64,16,10", "-o", "m.plan"]);
    ok(
        &dir,
        &["train", "m.plan", "--epochs", "1", "--checkpoint", "c.ckpt"],
    );
    ok(
        &dir,
        &[
            "export",
            "m.plan",
            "--checkpoint",
            "c.ckpt",
            "-o",
            "plain.st",
        ],
    );
    ok(
        &dir,
        &[
            "export",
            "m.plan",
            "--checkpoint",
            "c.ckpt",
            "-o",
            "renamed.st",
            "--rename",
            "0=first",
            "--rename",
            "2.bias=head_bias",
        ],
    );
    let renamed = std::fs::read(dir.join("renamed.st")).unwrap();
    let st = SafeTensors::deserialize(&renamed).unwrap();
    let mut names = st.names();
    names.sort_unstable();
    assert_eq!(
        names,
        ["2.weight", "first.bias", "first.weight", "head_bias"]
    );
    let plain = std::fs::read(dir.join("plain.st")).unwrap();
    assert_eq!(tensor(&renamed, "first.weight"), tensor(&plain, "0.weight"));
    // Renamed back on import: the same checkpoint as the plain file's.
    ok(&dir, &["import", "plain.st", "m.plan", "-o", "plain.ckpt"]);
    ok(
        &dir,
        &[
            "import",
            "renamed.st",
            "m.plan",
            "-o",
            "back.ckpt",
            "--rename",
            "first=0",
            "--rename",
            "head_bias=2.bias",
        ],
    );
    assert_eq!(
        std::fs::read(dir.join("back.ckpt")).unwrap(),
        std::fs::read(dir.join("plain.ckpt")).unwrap()
    );
    // Without the rules the renamed file does not fit; a rule that matches nothing is named.
    let err = fails(&dir, &["import", "renamed.st", "m.plan", "-o", "x.ckpt"]);
    assert!(err.contains("no tensor \"0.weight\""), "{err}");
    let err = fails(
        &dir,
        &[
            "export",
            "m.plan",
            "--checkpoint",
            "c.ckpt",
            "-o",
            "y.st",
            "--rename",
            "fc=head",
        ],
    );
    assert!(
        err.contains("--rename fc=head: it matches no tensor name"),
        "{err}"
    );
    let err = fails(
        &dir,
        &[
            "export",
            "m.plan",
            "--checkpoint",
            "c.ckpt",
            "--rename",
            "nothing",
        ],
    );
    assert!(err.contains("is not FROM=TO"), "{err}");
}

/// FNV-1a 64 of `bytes` (offset basis 0xcbf29ce484222325, prime 0x100000001b3), written out
/// here so the run description's digest is checked against the published definition.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The transcript a device sends for `cfg`, made here by the `no_std` runtime (not the
/// oracle): every step's loss, every epoch's `f32` mean, the final parameters.
fn runtime_transcript(cfg: &tapeplan_planner::model::RunConfig) -> String {
    use tapeplan_planner::protocol::TranscriptWriter;
    let job = cfg.job().unwrap();
    let bytes = job.schedule.to_bytes();
    let mut model = tapeplan_planner::exec::RuntimeModel::new(&bytes).unwrap();
    let shapes = job.parameter_shapes();
    for ((name, _), v) in shapes.iter().zip(cfg.initial_parameters(&job).unwrap()) {
        model.load_parameter(name, &v).unwrap();
    }
    let train = cfg.training_set().unwrap();
    let mut out = TranscriptWriter::new(String::new());
    out.header().unwrap();
    out.config(&cfg.to_line()).unwrap();
    out.target("host runtime").unwrap();
    out.plan(model.plan().plan_id(), model.plan().arena_elems())
        .unwrap();
    out.data(cfg.data_digest(&train), train.len()).unwrap();
    let mut step = 0;
    for epoch in 0..cfg.epochs {
        let rows = train.subset(&cfg.epoch_order(epoch));
        let mut sum = 0.0f32;
        for (x, y) in rows.batches(cfg.batch) {
            let loss = model.train_step(x, &y).unwrap();
            step += 1;
            out.loss(step, loss).unwrap();
            sum += loss;
        }
        out.epoch(epoch + 1, sum / cfg.steps_per_epoch() as f32)
            .unwrap();
    }
    for (name, _) in &shapes {
        out.param(name, &model.parameter(name).unwrap()).unwrap();
    }
    out.digest().unwrap();
    out.end_ok().unwrap();
    out.into_inner()
}

#[test]
fn verify_checks_a_regression_run_on_a_csv_with_adam_and_an_init_file() {
    let dir = scratch_dir("any-verify");
    // Two targets: y1 = x1·x2 (nonlinear) and y2 = x1 − 0.5·x2, with x2 centred.
    let mut csv = String::from("x1,x2,y1,y2\n");
    for (x1, x2) in features(120) {
        csv.push_str(&format!(
            "{x1},{},{},{}\n",
            x2 - 4.0,
            x1 * (x2 - 4.0),
            x1 - 0.5 * (x2 - 4.0)
        ));
    }
    std::fs::write(dir.join("reg.csv"), &csv).unwrap();
    // Initial parameters from a file, as `export` writes them (PyTorch names and layouts).
    let init = glorot_file(&[2, 8, 2], 99);
    std::fs::write(dir.join("init.safetensors"), &init).unwrap();
    let run = format!(
        "# a regression run on a CSV\nmodel=2,8,2 activation=tanh loss=mse batch=8 lr=0.01 \
         seed=5 split_seed=3 samples=96 epochs=4 optimizer=adam\n\
         data={} data_digest={:016x}\ninit={} init_digest={:016x}\n",
        dir.join("reg.csv").display(),
        fnv1a64(csv.as_bytes()),
        dir.join("init.safetensors").display(),
        fnv1a64(&init),
    );
    std::fs::write(dir.join("reg.run"), &run).unwrap();
    let cfg = tapeplan_planner::model::RunConfig::parse(&run).unwrap();
    assert_eq!(
        tapeplan_planner::model::RunConfig::parse(&cfg.to_line()).unwrap(),
        cfg
    );
    let transcript = runtime_transcript(&cfg);
    std::fs::write(dir.join("device.transcript"), &transcript).unwrap();
    let out = ok(
        &dir,
        &["verify", "device.transcript", "--config", "reg.run"],
    );
    assert!(out.contains("bitwise: 48/48 steps identical"), "{out}");
    assert!(
        out.contains("parameters: 42/42 elements bitwise identical"),
        "{out}"
    );
    // The loss goes down: the run learns.
    let losses: Vec<f32> = transcript
        .lines()
        .filter_map(|l| l.strip_prefix("epoch "))
        .map(|l| f32::from_bits(u32::from_str_radix(l.split(' ').nth(1).unwrap(), 16).unwrap()))
        .collect();
    assert!(losses[3] < losses[0], "{losses:?}");

    // One flipped loss bit is found; another data file is a mismatch naming the digest.
    let flipped: String = transcript
        .lines()
        .map(|l| match l.strip_prefix("loss 5 ") {
            Some(hex) => format!("loss 5 {:08x}\n", u32::from_str_radix(hex, 16).unwrap() ^ 1),
            None => format!("{l}\n"),
        })
        .collect();
    std::fs::write(dir.join("flipped.transcript"), flipped).unwrap();
    let out = tapeplan(
        &dir,
        &["verify", "flipped.transcript", "--config", "reg.run"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("bitwise: 47/48 steps identical"),
        "{stdout}"
    );
    std::fs::write(dir.join("reg.csv"), csv.replace("x1,x2", "a,b")).unwrap();
    let err = fails(
        &dir,
        &["verify", "device.transcript", "--config", "reg.run"],
    );
    assert!(
        err.contains("another file than the run was made with"),
        "{err}"
    );
}

/// A plan recorded by hand (not the `--layers` MLP): `logits = x · fc.weight + head.bias`
/// under PyTorch-style names, softmax cross-entropy, SGD; its `init` entry writes `head.bias`
/// (0.25 each) but not `fc.weight`.
fn hand_recorded_plan(batch: usize) -> Vec<u8> {
    use tapeplan_core::{Recordable, Shape, Tape};
    use tapeplan_planner::model::optim::Optimizer;
    use tapeplan_planner::model::{loss_of, Loss};
    use tapeplan_planner::plan::{plan, EntrySpec, Root};
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::matrix(batch, 2));
    let labels = tape.input("labels", Shape::vector(batch));
    let w = tape.parameter("fc.weight", Shape::matrix(2, 3));
    let b = tape.parameter("head.bias", Shape::vector(3));
    let (logits, loss) = {
        let mut t = tape.trace();
        let xw = t.matmul(&x, &w).unwrap();
        let bb = t.broadcast(&b, Shape::matrix(batch, 3)).unwrap();
        let logits = t.add(&xw, &bb).unwrap();
        let loss = loss_of(&mut t, Loss::SoftmaxCrossEntropy, &logits, &labels).unwrap();
        (logits, loss)
    };
    let params = [w, b];
    let adjoints = tape.differentiate(loss, &params).unwrap();
    let grads: Vec<_> = params.iter().map(|p| adjoints.get(*p).copied()).collect();
    let (new_params, _) = Optimizer::sgd(0.5)
        .step(&mut tape.trace(), &params, &grads, &[])
        .unwrap();
    let mut train_roots = vec![Root::Output {
        name: "loss".into(),
        node: loss,
    }];
    for (p, v) in params.iter().zip(new_params) {
        train_roots.push(Root::Update {
            param: *p,
            value: v.unwrap(),
        });
    }
    let init_bias = tape.trace().fill(0.25, Shape::vector(3)).unwrap();
    let entries = [
        EntrySpec {
            name: "forward".into(),
            roots: vec![Root::Output {
                name: "logits".into(),
                node: logits,
            }],
            guarded: false,
        },
        EntrySpec {
            name: "train_step".into(),
            roots: train_roots,
            guarded: true,
        },
        EntrySpec {
            name: "init".into(),
            roots: vec![Root::Update {
                param: b,
                value: init_bias,
            }],
            guarded: false,
        },
    ];
    plan(&tape, &entries).unwrap().to_bytes()
}

#[test]
fn a_hand_recorded_plan_trains_from_init_and_exchanges_its_names_as_they_are() {
    let dir = scratch_dir("any-hand");
    std::fs::write(dir.join("iris.csv"), iris_like()).unwrap();
    std::fs::write(dir.join("hand.plan"), hand_recorded_plan(4)).unwrap();
    // Nothing gives fc.weight a value: the error names it (head.bias has one from `init`).
    let err = fails(&dir, &["train", "hand.plan", "--data", "iris.csv"]);
    assert!(
        err.contains("the plan's fc.weight needs an initial value") && err.contains("--init"),
        "{err}"
    );
    // From a file under the plan's own names (written as is: no MLP remap).
    let init = vec![
        Param {
            name: "fc.weight".into(),
            shape: tapeplan_core::Shape::matrix(2, 3),
            values: vec![0.1, -0.2, 0.05, 0.0, 0.15, -0.1],
        },
        Param {
            name: "head.bias".into(),
            shape: tapeplan_core::Shape::vector(3),
            values: vec![0.0; 3],
        },
    ];
    std::fs::write(dir.join("init.st"), export_safetensors(&init, &[]).unwrap()).unwrap();
    let out = ok(
        &dir,
        &[
            "train",
            "hand.plan",
            "--data",
            "iris.csv",
            "--init",
            "init.st",
            "--epochs",
            "5",
            "--checkpoint",
            "hand.ckpt",
            "--save-params",
            "trained.st",
        ],
    );
    assert!(last_value(&out, "test accuracy:") >= 0.95, "{out}");
    let trained = std::fs::read(dir.join("trained.st")).unwrap();
    let st = SafeTensors::deserialize(&trained).unwrap();
    let mut names = st.names();
    names.sort_unstable();
    assert_eq!(names, ["fc.weight", "head.bias"]);
    assert_eq!(st.tensor("fc.weight").unwrap().shape(), [2, 3]);
    // export → import with a key remap gives back the checkpoint's parameters.
    ok(
        &dir,
        &[
            "export",
            "hand.plan",
            "--checkpoint",
            "hand.ckpt",
            "-o",
            "out.st",
            "--rename",
            "fc=classifier",
        ],
    );
    let exported = std::fs::read(dir.join("out.st")).unwrap();
    assert_eq!(
        tensor(&exported, "classifier.weight"),
        tensor(&trained, "fc.weight")
    );
    ok(
        &dir,
        &[
            "import",
            "out.st",
            "hand.plan",
            "--base",
            "hand.ckpt",
            "-o",
            "back.ckpt",
            "--rename",
            "classifier=fc",
        ],
    );
    assert_eq!(
        std::fs::read(dir.join("back.ckpt")).unwrap(),
        std::fs::read(dir.join("hand.ckpt")).unwrap()
    );
}

/// A CNN run of the firmware's feature `cnn` (its rows stored as `f32` features), shortened:
/// the runtime's transcript must verify against the oracle through `tapeplan verify --config`
/// with `steps` steps and the parameter count `params`, carry the data line of the rows
/// computed here (FNV-1a 64 of the features, little-endian, then the labels), and fail
/// against the run `other` (another initialization or model).
fn verify_feature_cnn_run(scratch: &str, run: &str, steps: usize, params: usize, other: &str) {
    let dir = scratch_dir(scratch);
    std::fs::write(dir.join("cnn.run"), run).unwrap();
    let cfg = tapeplan_planner::model::RunConfig::parse(run).unwrap();
    let transcript = runtime_transcript(&cfg);
    std::fs::write(dir.join("device.transcript"), &transcript).unwrap();
    let out = ok(
        &dir,
        &["verify", "device.transcript", "--config", "cnn.run"],
    );
    assert!(
        out.contains(&format!("bitwise: {steps}/{steps} steps identical")),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "parameters: {params}/{params} elements bitwise identical"
        )),
        "{out}"
    );
    let train = cfg.training_set().unwrap();
    let mut bytes: Vec<u8> = Vec::new();
    for i in 0..train.len() {
        bytes.extend(train.row(i).0.iter().flat_map(|v| v.to_le_bytes()));
    }
    bytes.extend((0..train.len()).map(|i| train.row(i).1));
    let data_line = format!("data {:016x} {}", fnv1a64(&bytes), train.len());
    assert!(transcript.contains(&data_line), "{data_line}\n{transcript}");
    std::fs::write(dir.join("other.run"), other).unwrap();
    let e = fails(
        &dir,
        &["verify", "device.transcript", "--config", "other.run"],
    );
    assert!(e.contains("expected"), "{e}");
}

#[test]
fn verify_checks_a_digits_cnn_run_trained_by_the_runtime() {
    // The firmware's digits CNN runs (`model=digits_cnn[:C1,C2]`, Adam); 4·1·9 + 4,
    // 8·4·9 + 8, 32·10 + 10 parameters. Other channels are another model.
    let run = "model=digits_cnn:4,8 activation=relu loss=ce batch=4 lr=0.003 seed=42 \
               split_seed=0\nsamples=16 epochs=2 optimizer=adam\n";
    let other = run.replace("4,8", "4,6");
    verify_feature_cnn_run("digits-cnn-verify", run, 8, 666, &other);
}

#[test]
fn verify_checks_an_mnist1d_cnn_run_trained_by_the_runtime() {
    // The firmware's CNN run (`model=mnist1d_cnn data=mnist1d`, Adam); 25·1·5 + 25, twice
    // 25·25·3 + 25, 125·10 + 10 parameters. Another seed is another initialization.
    let run = "model=mnist1d_cnn activation=relu loss=ce batch=10 lr=0.01 seed=42 split_seed=0\n\
               samples=40 epochs=2 optimizer=adam data=mnist1d\n";
    let other = run.replace("seed=42", "seed=7");
    verify_feature_cnn_run("cnn-verify", run, 8, 5210, &other);
}
