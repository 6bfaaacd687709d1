//! `tapeplan eval` and `tapeplan export --transcript`: evaluation agrees exactly with what
//! `train` reports for the same parameters, with a device transcript's final parameters and
//! with an independent f64 forward pass; bad input is refused naming what is wrong, and loses
//! nothing.

use std::path::Path;

use crate::common::{device_transcript, fails, ok, plan_run, scratch_dir};
use safetensors::SafeTensors;

use tapeplan_planner::io::data;

/// The line of `out` starting with `prefix`.
fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{out}"))
}

/// `eval … --json`, parsed.
fn eval_json(dir: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["eval"];
    all.extend_from_slice(args);
    all.push("--json");
    serde_json::from_str(ok(dir, &all).trim()).unwrap()
}

/// A tensor of a safetensors file as `f64`s.
fn tensor(st: &SafeTensors<'_>, name: &str) -> (Vec<usize>, Vec<f64>) {
    let t = st.tensor(name).unwrap();
    let v = t
        .data()
        .chunks_exact(4)
        .map(|b| f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        .collect();
    (t.shape().to_vec(), v)
}

/// An independent forward pass of the exported 64-16-10 tanh MLP (PyTorch's layout: `k.weight`
/// `[out, in]`, `y = x Wᵀ + b`) in f64 over `set`: correct predictions and mean softmax
/// cross-entropy.
fn f64_forward(st_bytes: &[u8], set: &data::Dataset) -> (usize, f64) {
    let st = SafeTensors::deserialize(st_bytes).unwrap();
    let layers = [
        (tensor(&st, "0.weight"), tensor(&st, "0.bias")),
        (tensor(&st, "2.weight"), tensor(&st, "2.bias")),
    ];
    let d_in = set.n_features();
    let (mut correct, mut ce) = (0usize, 0.0f64);
    for (r, &label) in set.labels.iter().enumerate() {
        let mut h: Vec<f64> = set.features[r * d_in..(r + 1) * d_in]
            .iter()
            .map(|&v| f64::from(v))
            .collect();
        for (k, ((ws, w), (_, b))) in layers.iter().enumerate() {
            let (out, inp) = (ws[0], ws[1]);
            assert_eq!(inp, h.len());
            h = (0..out)
                .map(|o| {
                    let z = b[o] + (0..inp).map(|i| w[o * inp + i] * h[i]).sum::<f64>();
                    if k + 1 < layers.len() {
                        z.tanh()
                    } else {
                        z
                    }
                })
                .collect();
        }
        let max = h.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let best = h.iter().position(|&v| v == max).unwrap();
        if best == usize::from(label) {
            correct += 1;
        }
        let lse = h.iter().map(|v| (v - max).exp()).sum::<f64>().ln() + max;
        ce += lse - h[usize::from(label)];
    }
    (correct, ce / set.len() as f64)
}

#[test]
fn eval_agrees_with_train_a_device_transcript_and_an_independent_forward_pass() {
    let dir = scratch_dir("eval-agrees");
    ok(&dir, &["plan", "--layers", "64,16,10", "-o", "m.plan"]);
    let trained = ok(
        &dir,
        &[
            "train",
            "m.plan",
            "--epochs",
            "2",
            "--seed",
            "42",
            "--save-params",
            "p.safetensors",
            "--checkpoint",
            "c.ckpt",
        ],
    );
    let train_accuracy = line(&trained, "test accuracy: ");
    let train_digest = line(&trained, "parameter digest: ");

    // The same parameters from either file: train's accuracy line and digest, exactly.
    for source in [["--params", "p.safetensors"], ["--checkpoint", "c.ckpt"]] {
        let out = ok(&dir, &["eval", "m.plan", source[0], source[1]]);
        let eval_line = line(&out, "test accuracy: ");
        assert!(
            eval_line.starts_with(&format!("{train_accuracy} (")),
            "train: {train_accuracy}\neval: {eval_line}"
        );
        // SGD keeps no state: train's digest of the whole region is the model's.
        assert!(
            line(&out, "model digest: ").starts_with(&train_digest.replace("parameter", "model")),
            "{out}"
        );
    }
    let from_ckpt = eval_json(&dir, &["m.plan", "--checkpoint", "c.ckpt"]);
    assert_eq!(from_ckpt["rows"], 360);
    assert_eq!(from_ckpt["split"], "test");
    let correct = from_ckpt["correct"].as_u64().unwrap();
    assert_eq!(
        format!("test accuracy: {:.3}", correct as f32 / 360.0),
        train_accuracy
    );

    // The device's run of the same job (the transcript the host runtime sends for it, as a device
    // sends it): its final parameters are train's, so eval reports the same figures.
    let run = plan_run(&dir, "m.plan", "seed=42 split_seed=0 samples=1437 epochs=2");
    let transcript = device_transcript(&dir, &run);
    std::fs::write(dir.join("dev.transcript"), &transcript).unwrap();
    let digest_line = transcript
        .lines()
        .find_map(|l| l.strip_prefix("digest "))
        .unwrap();
    assert_eq!(train_digest, format!("parameter digest: 0x{digest_line}"));
    let from_device = eval_json(&dir, &["m.plan", "--transcript", "dev.transcript"]);
    assert_eq!(from_device["model_digest"], digest_line);
    assert_eq!(from_device["correct"], from_ckpt["correct"]);
    assert_eq!(
        from_device["mean_cross_entropy"],
        from_ckpt["mean_cross_entropy"]
    );
    assert_eq!(from_device["parameters"]["kind"], "transcript");

    // Exported to safetensors under PyTorch's names: the same parameters again.
    let out = ok(
        &dir,
        &[
            "export",
            "m.plan",
            "--transcript",
            "dev.transcript",
            "-o",
            "dev.safetensors",
        ],
    );
    assert!(out.contains(&format!("0x{digest_line}, checked")), "{out}");
    let exported = eval_json(&dir, &["m.plan", "--params", "dev.safetensors"]);
    assert_eq!(exported["model_digest"], digest_line);
    assert_eq!(exported["correct"], from_ckpt["correct"]);

    // An independent forward pass (f64, PyTorch's layout, its own softmax) of the exported file
    // over the same held-out rows.
    let (_, test) = data::digits()
        .unwrap()
        .split_seeded(0, data::DIGITS_TRAIN_ROWS);
    let (f64_correct, f64_ce) =
        f64_forward(&std::fs::read(dir.join("dev.safetensors")).unwrap(), &test);
    assert_eq!(f64_correct as u64, correct);
    let ce = from_ckpt["mean_cross_entropy"].as_f64().unwrap();
    assert!(
        (ce - f64_ce).abs() <= 1e-5 * f64_ce,
        "eval's mean cross-entropy {ce}, the f64 pass's {f64_ce}"
    );

    // The other splits: train + test = all, row for row.
    let tr = eval_json(
        &dir,
        &["m.plan", "--checkpoint", "c.ckpt", "--split", "train"],
    );
    let all = eval_json(
        &dir,
        &["m.plan", "--checkpoint", "c.ckpt", "--split", "all"],
    );
    assert_eq!(tr["rows"], 1437);
    assert_eq!(all["rows"], 1797);
    assert_eq!(
        tr["correct"].as_u64().unwrap() + correct,
        all["correct"].as_u64().unwrap()
    );
}

/// A CSV of `y = 0.5 a − 0.25 b` (a regression set) over a small grid.
fn regression_csv() -> String {
    let mut csv = String::from("a,b,y\n");
    for i in 0..200 {
        let a = (i % 20) as f32 / 10.0 - 1.0;
        let b = (i / 20) as f32 / 5.0 - 1.0;
        csv.push_str(&format!("{a},{b},{}\n", 0.5 * a - 0.25 * b));
    }
    csv
}

#[test]
fn eval_of_a_regression_csv_reports_train_s_mse_and_mae() {
    let dir = scratch_dir("eval-regression");
    std::fs::write(dir.join("r.csv"), regression_csv()).unwrap();
    let trained = ok(
        &dir,
        &[
            "train",
            "--data",
            "r.csv",
            "--loss",
            "mse",
            "--layers",
            "2,8,1",
            "--batch",
            "8",
            "--epochs",
            "3",
            "--save-params",
            "p.safetensors",
        ],
    );
    let out = ok(
        &dir,
        &[
            "eval",
            "model.plan",
            "--data",
            "r.csv",
            "--params",
            "p.safetensors",
        ],
    );
    assert_eq!(line(&out, "test MSE: "), line(&trained, "test MSE: "));
    let j = eval_json(
        &dir,
        &["model.plan", "--data", "r.csv", "--params", "p.safetensors"],
    );
    assert_eq!(j["task"], "regression");
    assert_eq!(j["rows"], 40);
    let (mse, mae) = (j["mse"].as_f64().unwrap(), j["mae"].as_f64().unwrap());
    assert!(
        mse > 0.0 && mae > 0.0 && mae * mae <= mse * (1.0 + 1e-9),
        "{j}"
    );
    // A classification data set for a regression plan.
    let err = fails(&dir, &["eval", "model.plan", "--params", "p.safetensors"]);
    assert!(
        err.contains("regression plan") && err.contains("--data"),
        "{err}"
    );
}

/// A plan with a `train_step` and no `forward` entry.
fn plan_without_forward() -> Vec<u8> {
    use tapeplan_core::{Recordable, Shape, Tape};
    use tapeplan_planner::model::optim::Optimizer;
    use tapeplan_planner::model::{loss_of, Loss};
    use tapeplan_planner::plan::{plan, EntrySpec, Root};
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::matrix(4, 64));
    let labels = tape.input("labels", Shape::vector(4));
    let w = tape.parameter("fc.weight", Shape::matrix(64, 10));
    let loss = {
        let mut t = tape.trace();
        let logits = t.matmul(&x, &w).unwrap();
        loss_of(&mut t, Loss::SoftmaxCrossEntropy, &logits, &labels).unwrap()
    };
    let g = tape.differentiate(loss, &[w]).unwrap().get(w).copied();
    let (new, _) = Optimizer::sgd(0.1)
        .step(&mut tape.trace(), &[w], &[g], &[])
        .unwrap();
    let roots = vec![
        Root::Output {
            name: "loss".into(),
            node: loss,
        },
        Root::Update {
            param: w,
            value: new[0].unwrap(),
        },
    ];
    let entries = [EntrySpec {
        name: "train_step".into(),
        roots,
        guarded: false,
    }];
    plan(&tape, &entries).unwrap().to_bytes()
}

#[test]
fn bad_input_is_refused_naming_what_is_wrong_and_loses_nothing() {
    let dir = scratch_dir("eval-refused");
    ok(&dir, &["plan", "--layers", "64,16,10", "-o", "m.plan"]);
    ok(&dir, &["plan", "--layers", "64,12,10", "-o", "other.plan"]);
    ok(
        &dir,
        &[
            "train",
            "m.plan",
            "--epochs",
            "1",
            "--save-params",
            "p.safetensors",
            "--checkpoint",
            "c.ckpt",
        ],
    );
    // Rows of another width than the plan's x.
    let err = fails(
        &dir,
        &[
            "eval",
            "m.plan",
            "--params",
            "p.safetensors",
            "--data",
            "mnist1d",
        ],
    );
    assert!(
        err.contains("40 features per row") && err.contains("[32, 64]"),
        "{err}"
    );
    // A parameter missing from the file: named.
    let bytes = std::fs::read(dir.join("p.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let kept: Vec<(String, safetensors::tensor::TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .filter(|(n, _)| n != "2.bias")
        .collect();
    std::fs::write(
        dir.join("partial.safetensors"),
        safetensors::serialize(kept, None).unwrap(),
    )
    .unwrap();
    let err = fails(&dir, &["eval", "m.plan", "--params", "partial.safetensors"]);
    assert!(err.contains("2.bias"), "{err}");
    // A plan without `forward`.
    std::fs::write(dir.join("noforward.plan"), plan_without_forward()).unwrap();
    let err = fails(
        &dir,
        &["eval", "noforward.plan", "--params", "p.safetensors"],
    );
    assert!(
        err.contains("no `forward` entry") && err.contains("train_step"),
        "{err}"
    );
    // A checkpoint of another plan.
    let err = fails(&dir, &["eval", "other.plan", "--checkpoint", "c.ckpt"]);
    assert!(err.contains("is a checkpoint of plan"), "{err}");
    // The checkpoint where the plan goes.
    let err = fails(&dir, &["eval", "c.ckpt", "--params", "p.safetensors"]);
    assert!(err.contains("is a checkpoint"), "{err}");

    // Transcripts: a device's run of m.plan.
    let run = plan_run(&dir, "m.plan", "seed=1 split_seed=0 samples=64 epochs=1");
    let good = device_transcript(&dir, &run);
    std::fs::write(dir.join("keep.safetensors"), b"an earlier export").unwrap();
    let cases = [
        (good.replace("end ok\n", ""), "truncated"),
        (
            {
                // One parameter element changed: the digest line no longer matches.
                let at = good.find("\nparam ").unwrap() + 1;
                let end = at + good[at..].find('\n').unwrap();
                let mut l: Vec<String> = good[at..end].split(' ').map(String::from).collect();
                l[3] = if l[3] == "00000000" {
                    "3f800000"
                } else {
                    "00000000"
                }
                .into();
                format!("{}{}{}", &good[..at], l.join(" "), &good[end..])
            },
            "damaged",
        ),
        (
            good.lines()
                .filter(|l| !l.starts_with("param "))
                .map(|l| format!("{l}\n"))
                .collect(),
            "no `param` lines",
        ),
    ];
    for (text, expected) in &cases {
        std::fs::write(dir.join("bad.transcript"), text).unwrap();
        let err = fails(&dir, &["eval", "m.plan", "--transcript", "bad.transcript"]);
        assert!(err.contains(expected), "{expected}: {err}");
        let err = fails(
            &dir,
            &[
                "export",
                "m.plan",
                "--transcript",
                "bad.transcript",
                "-o",
                "keep.safetensors",
            ],
        );
        assert!(err.contains(expected), "{expected}: {err}");
        assert_eq!(
            std::fs::read(dir.join("keep.safetensors")).unwrap(),
            b"an earlier export"
        );
    }
    // The device ran another plan.
    std::fs::write(dir.join("dev.transcript"), &good).unwrap();
    let err = fails(
        &dir,
        &["eval", "other.plan", "--transcript", "dev.transcript"],
    );
    assert!(err.contains("the device ran plan"), "{err}");
    let err = fails(
        &dir,
        &[
            "export",
            "other.plan",
            "--transcript",
            "dev.transcript",
            "-o",
            "keep.safetensors",
        ],
    );
    assert!(err.contains("the device ran plan"), "{err}");
    assert_eq!(
        std::fs::read(dir.join("keep.safetensors")).unwrap(),
        b"an earlier export"
    );
    // Nothing to evaluate with.
    let err = fails(&dir, &["eval", "m.plan"]);
    assert!(
        err.contains("--checkpoint") && err.contains("--transcript"),
        "{err}"
    );
}

#[test]
fn a_device_s_adam_run_evaluates_as_train_s_checkpoint_of_it() {
    // Adam keeps moments in the persistent region: the device sends only the model's tensors,
    // and eval's model digest is its `digest` line.
    let dir = scratch_dir("eval-adam");
    ok(
        &dir,
        &[
            "plan",
            "--layers",
            "64,16,10",
            "--optimizer",
            "adam",
            "--lr",
            "0.01",
            "-o",
            "m.plan",
        ],
    );
    let run = plan_run(&dir, "m.plan", "seed=42 split_seed=0 samples=1437 epochs=1");
    let transcript = device_transcript(&dir, &run);
    std::fs::write(dir.join("dev.transcript"), &transcript).unwrap();
    ok(
        &dir,
        &[
            "train",
            "m.plan",
            "--epochs",
            "1",
            "--seed",
            "42",
            "--checkpoint",
            "c.ckpt",
        ],
    );
    let device = eval_json(&dir, &["m.plan", "--transcript", "dev.transcript"]);
    let host = eval_json(&dir, &["m.plan", "--checkpoint", "c.ckpt"]);
    let digest_line = transcript
        .lines()
        .find_map(|l| l.strip_prefix("digest "))
        .unwrap();
    assert_eq!(device["model_digest"], digest_line);
    assert_eq!(host["model_digest"], digest_line);
    assert_eq!(device["correct"], host["correct"]);
    assert_eq!(device["mean_cross_entropy"], host["mean_cross_entropy"]);
}
