//! `tapeplan plan --onnx`: the five test models planned from the command line, their initial
//! parameters written beside the plan, trainable subsets, and an unsupported operator's error.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use crate::common;

use std::path::PathBuf;

use common::{ok, scratch_dir, tapeplan};
use prost::Message;
use tapeplan_planner::model::onnx::proto::ModelProto;
use tapeplan_planner::model::onnx::OnnxModel;
use tapeplan_planner::model::Model;
use tapeplan_runtime::Plan;

fn model_path(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/onnx")
        .join(format!("{name}.onnx"))
        .display()
        .to_string()
}

#[test]
fn plan_onnx_writes_a_plan_and_its_initial_parameters() {
    let dir = scratch_dir("plan-onnx");
    for name in ["mlp", "cnn1d", "cnn2d_bn", "dwsep", "text"] {
        let path = model_path(name);
        let out = format!("{name}.plan");
        let stdout = ok(
            &dir,
            &[
                "plan",
                "--onnx",
                &path,
                "--batch",
                "8",
                "--optimizer",
                "adam",
                "-o",
                &out,
            ],
        );
        assert!(stdout.contains("train_step"), "{stdout}");
        let bytes = std::fs::read(dir.join(&out)).unwrap();
        let plan = Plan::parse(&bytes).unwrap();
        for entry in ["init", "forward", "train_step", "forward_1", "eval_loss"] {
            assert!(plan.entry(entry).is_some(), "{name}: no {entry} entry");
        }
        // The persistent tensors under their state_dict names, and their initial values beside
        // the plan.
        let model = OnnxModel::from_bytes(&std::fs::read(&path).unwrap()).unwrap();
        let init = std::fs::read(dir.join(format!("{out}.init.safetensors"))).unwrap();
        let st = safetensors::SafeTensors::deserialize(&init).unwrap();
        for spec in model.parameters().unwrap() {
            assert!(
                plan.parameter(&spec.name).is_some(),
                "{name}: {}",
                spec.name
            );
            let t = st.tensor(&spec.name).unwrap();
            let values: Vec<f32> = t
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            assert_eq!(values, spec.init, "{name}: {}", spec.name);
        }
    }
}

#[test]
fn plan_onnx_trains_a_subset_in_a_smaller_arena() {
    let dir = scratch_dir("plan-onnx-subset");
    let path = model_path("cnn1d");
    ok(
        &dir,
        &["plan", "--onnx", &path, "--batch", "4", "-o", "full.plan"],
    );
    let stdout = ok(
        &dir,
        &[
            "plan",
            "--onnx",
            &path,
            "--batch",
            "4",
            "--trainable",
            "fc.*",
            "--trainable",
            "conv2.*",
            "--frozen",
            "conv2.bias",
            "-o",
            "part.plan",
        ],
    );
    assert!(
        stdout.contains("partial update (3 of 6 parameters)"),
        "{stdout}"
    );
    let arena = |f: &str| {
        let bytes = std::fs::read(dir.join(f)).unwrap();
        Plan::parse(&bytes).unwrap().arena_elems()
    };
    assert!(arena("part.plan") < arena("full.plan"));

    // A pattern that matches nothing is an error naming the parameters.
    let out = tapeplan(
        &dir,
        &[
            "plan",
            "--onnx",
            &path,
            "--trainable",
            "head.*",
            "-o",
            "x.plan",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("head.*") && stderr.contains("conv1.weight"),
        "{stderr}"
    );
}

#[test]
fn plan_onnx_names_an_unsupported_operator() {
    let dir = scratch_dir("plan-onnx-unsupported");
    // The MLP with its activation swapped for an operator outside the table.
    let mut m = ModelProto::decode(std::fs::read(model_path("mlp")).unwrap().as_slice()).unwrap();
    let graph = m.graph.as_mut().unwrap();
    let relu = graph
        .node
        .iter_mut()
        .find(|n| n.op_type() == "Relu")
        .unwrap();
    relu.op_type = Some("ConvTranspose".into());
    relu.name = Some("/up/ConvTranspose".into());
    let bytes = m.encode_to_vec();
    std::fs::write(dir.join("up.onnx"), bytes).unwrap();
    let out = tapeplan(&dir, &["plan", "--onnx", "up.onnx", "-o", "up.plan"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(!stderr.contains("panicked"), "{stderr}");
    for part in ["/up/ConvTranspose", "ConvTranspose", "supported", "Gemm"] {
        assert!(stderr.contains(part), "{stderr}");
    }
    assert!(!dir.join("up.plan").exists());
}

/// From an ONNX file to a trained plan: `plan --onnx`, then `train` from the initial
/// `train` of `m.plan` on `d.csv` for 2 epochs from the initializers file `plan --onnx` wrote.
const TRAIN_FROM_INIT: [&str; 8] = [
    "train",
    "m.plan",
    "--data",
    "d.csv",
    "--init",
    "m.plan.init.safetensors",
    "--epochs",
    "2",
];

/// 96 rows of 16 features uniform in `[-1, 1)` (an LCG) and a label `0..4` from the signs of
/// the first two: data the `mlp` test model (16 → 4) can fit.
fn four_class_csv() -> String {
    let mut csv = String::new();
    let mut state = 7u64;
    for _ in 0..96 {
        let mut row = Vec::new();
        for _ in 0..16 {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            row.push(((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0);
        }
        let label = usize::from(row[0] > 0.0) + 2 * usize::from(row[1] > 0.0);
        let cells: Vec<String> = row.iter().map(|v| format!("{v:.4}")).collect();
        csv.push_str(&format!("{},{label}\n", cells.join(",")));
    }
    csv
}

/// parameters written beside the plan (the single input is `x`, as `train` sets it).
#[test]
fn an_onnx_plan_trains_from_its_initial_parameters() {
    let dir = scratch_dir("plan-onnx-train");
    std::fs::write(dir.join("d.csv"), four_class_csv()).unwrap();
    ok(
        &dir,
        &[
            "plan",
            "--onnx",
            &model_path("mlp"),
            "--batch",
            "8",
            "-o",
            "m.plan",
        ],
    );
    let stdout = ok(&dir, &TRAIN_FROM_INIT);
    assert!(
        stdout.contains("epoch   2") && stdout.contains("test accuracy"),
        "{stdout}"
    );
}

#[test]
fn a_layers_plan_takes_a_trainable_subset_too() {
    let dir = scratch_dir("plan-layers-subset");
    let args = [
        "plan",
        "--layers",
        "64,32,10",
        "--batch",
        "32",
        "--no-guard",
    ];
    let full = ok(&dir, &[&args[..], &["-o", "full.plan"]].concat());
    let head = ok(
        &dir,
        &[&args[..], &["--trainable", "?2", "-o", "head.plan"]].concat(),
    );
    // The report compares the subset's arena with full update's (the same plan without it).
    assert!(head.contains("partial update"), "{head}");
    let arena = |stdout: &str| -> usize {
        let line = stdout.lines().find(|l| l.contains("train_step")).unwrap();
        line.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    assert!(arena(&head) < arena(&full), "{head}\n{full}");
    // Frozen w1 and b1: no update binding for them, the same entries as the full plan.
    let bytes = std::fs::read(dir.join("head.plan")).unwrap();
    let plan = Plan::parse(&bytes).unwrap();
    let e = plan.entry("train_step").unwrap();
    let updated: Vec<&str> = (0..plan.n_bindings())
        .filter_map(|i| plan.binding(i))
        .filter(|b| b.entry == Some(e) && b.kind == tapeplan_core::format::BindingKind::Update)
        .map(|b| b.name)
        .collect();
    assert_eq!(updated, ["w2", "b2"]);
    assert!(plan.entry("forward_1").is_none());
    // A pattern that matches no parameter is an error naming it.
    let out = tapeplan(
        &dir,
        &[&args[..], &["--frozen", "fc.*", "-o", "x.plan"]].concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("fc.*"), "{err}");
}

/// An ONNX model whose initializer names pass the plan format's 24 bytes, from the command
/// line with Adam: `plan` shortens them (and Adam's state names) and keeps the map beside the
/// plan, `train --init` reads the initializers file under the full names, and `export` writes
/// the `state_dict` keys back from the map, which `import` reads into a checkpoint that exports
/// the same bytes; `--rename` rules speak the full keys.
#[test]
fn long_onnx_names_plan_train_and_export_with_adam() {
    use tapeplan_planner::model::names::plan_name;
    let dir = scratch_dir("plan-onnx-long");
    std::fs::write(dir.join("d.csv"), four_class_csv()).unwrap();
    let full = [
        ("fc1.weight", "encoder.block_one.fc1.weight"), // 28 bytes
        ("fc1.bias", "encoder.block_one.fc1.bias"),     // 26
        ("fc2.weight", "classifier.head.0.weight"),     // 24: fits, its `.m` would not
        ("fc2.bias", "classifier.head.0.bias"),         // 22
    ];
    let mut m = ModelProto::decode(std::fs::read(model_path("mlp")).unwrap().as_slice()).unwrap();
    let g = m.graph.as_mut().unwrap();
    for (old, new) in full {
        for i in &mut g.initializer {
            if i.name() == old {
                i.name = Some(new.into());
            }
        }
        for n in &mut g.node {
            for i in &mut n.input {
                if i == old {
                    *i = new.into();
                }
            }
        }
    }
    std::fs::write(dir.join("long.onnx"), m.encode_to_vec()).unwrap();
    let args = [
        "plan",
        "--onnx",
        "long.onnx",
        "--batch",
        "8",
        "--optimizer",
        "adam",
    ];
    let stdout = ok(&dir, &[&args[..], &["-o", "m.plan"]].concat());
    let short = plan_name(full[0].1);
    assert!(
        stdout.contains(&format!("{} -> {short}", full[0].1)),
        "{stdout}"
    );
    let plan_bytes = std::fs::read(dir.join("m.plan")).unwrap();
    let plan = Plan::parse(&plan_bytes).unwrap();
    assert!(plan.parameter(&short).is_some());
    assert!(plan.parameter("classifier.head.0.bias.m").is_some());
    let stdout = ok(
        &dir,
        &[&TRAIN_FROM_INIT[..], &["--checkpoint", "m.ckpt"]].concat(),
    );
    assert!(stdout.contains("epoch   2"), "{stdout}");
    // `plan` kept the map from the shortened names to the full keys beside the plan, and
    // `export` restores the keys from it, without a rule.
    let map = std::fs::read_to_string(dir.join("m.plan.names.json")).unwrap();
    assert!(
        map.contains(&format!("\"{short}\": \"{}\"", full[0].1)),
        "{map}"
    );
    let mut export = vec![
        "export",
        "m.plan",
        "--checkpoint",
        "m.ckpt",
        "-o",
        "out.safetensors",
    ];
    let stdout = ok(&dir, &export);
    assert!(
        stdout.contains("restored 2 full state_dict keys"),
        "{stdout}"
    );
    let out = std::fs::read(dir.join("out.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&out).unwrap();
    let mut keys = st.names();
    keys.sort_unstable();
    let mut want: Vec<&str> = full.iter().map(|(_, f)| *f).collect();
    want.sort_unstable();
    assert_eq!(keys, want, "the state_dict keys, no optimizer state");
    // Import reads the full keys into the plan's shortened names; exporting that checkpoint
    // gives the same file.
    ok(
        &dir,
        &[
            "import",
            "out.safetensors",
            "m.plan",
            "--base",
            "m.ckpt",
            "-o",
            "back.ckpt",
        ],
    );
    export[3] = "back.ckpt";
    export[5] = "back.safetensors";
    ok(&dir, &export);
    assert_eq!(std::fs::read(dir.join("back.safetensors")).unwrap(), out);
    // `--rename` speaks the model's full keys; a shortened name is not one of them.
    export[5] = "renamed.safetensors";
    ok(&dir, &[&export[..], &["--rename", "encoder=enc"]].concat());
    let renamed = std::fs::read(dir.join("renamed.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&renamed).unwrap();
    assert!(st.names().contains(&"enc.block_one.fc1.weight"));
    let rule = format!("{short}={}", full[0].1);
    let out = tapeplan(&dir, &[&export[..], &["--rename", rule.as_str()]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("matches no tensor name"),
        "{err}"
    );
}

/// 40 rows of 64 features (an 8×8 image, an LCG in `[-1, 1)`) and a label `0..3`.
fn image_csv() -> String {
    let mut csv = String::new();
    let mut s: u32 = 12345;
    for _ in 0..40 {
        let mut row = Vec::new();
        for _ in 0..64 {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            row.push(format!(
                "{:.4}",
                f64::from(s >> 8) / f64::from(1u32 << 23) - 1.0
            ));
        }
        row.push(format!("{}", (s >> 20) % 3));
        csv += &row.join(",");
        csv.push('\n');
    }
    csv
}

/// `--frozen-bn eval` with a frozen backbone: the block's running statistics are what the
/// model came with after training (with `train`, the default, they move), and the option is
/// refused where it means nothing.
#[test]
fn a_frozen_batch_norm_keeps_its_running_statistics_with_frozen_bn_eval() {
    let dir = scratch_dir("frozen-bn");
    std::fs::write(dir.join("d.csv"), image_csv()).unwrap();
    let path = model_path("cnn2d_bn");
    let running = |mode: &str| -> (Vec<u8>, Vec<u8>) {
        let plan = format!("{mode}.plan");
        let stdout = ok(
            &dir,
            &[
                "plan",
                "--onnx",
                &path,
                "--trainable",
                "fc.*",
                "--frozen-bn",
                mode,
                "--batch",
                "8",
                "-o",
                &plan,
            ],
        );
        assert_eq!(
            stdout.contains("(--frozen-bn eval): 1 node: /bn/BatchNormalization"),
            mode == "eval",
            "{stdout}"
        );
        let ckpt = format!("{mode}.ckpt");
        let stdout = ok(
            &dir,
            &[
                "train",
                &plan,
                "--data",
                "d.csv",
                "--epochs",
                "1",
                "--checkpoint",
                &ckpt,
            ],
        );
        // 32 training rows in batches of 8: nothing left out, so no note about it.
        assert!(!stdout.contains("left out"), "{stdout}");
        let out = format!("{mode}.safetensors");
        ok(&dir, &["export", &plan, "--checkpoint", &ckpt, "-o", &out]);
        let bytes = std::fs::read(dir.join(&out)).unwrap();
        let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
        let get = |k: &str| st.tensor(k).unwrap().data().to_vec();
        (get("bn.running_mean"), get("bn.running_var"))
    };
    let init = std::fs::read(dir.join("eval.plan.init.safetensors"));
    assert!(init.is_err(), "no plan yet");
    let eval = running("eval");
    let init = std::fs::read(dir.join("eval.plan.init.safetensors")).unwrap();
    let init = safetensors::SafeTensors::deserialize(&init).unwrap();
    let initial = (
        init.tensor("bn.running_mean").unwrap().data().to_vec(),
        init.tensor("bn.running_var").unwrap().data().to_vec(),
    );
    assert_eq!(eval, initial, "eval: the running statistics are kept");
    let train = running("train");
    assert_ne!(train.0, initial.0, "train: the running mean moves");
    assert_ne!(train.1, initial.1, "train: the running variance moves");

    // Refused: nothing frozen, and no ONNX model.
    let out = tapeplan(
        &dir,
        &[
            "plan",
            "--onnx",
            &path,
            "--frozen-bn",
            "eval",
            "-o",
            "all.plan",
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no BatchNormalization"));
    let out = tapeplan(&dir, &["plan", "--frozen-bn", "eval", "-o", "mlp.plan"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--onnx"));
}

/// A training split that is not a whole number of batches: `train` says how many rows each
/// epoch leaves out.
#[test]
fn train_says_which_rows_an_epoch_leaves_out() {
    let dir = scratch_dir("left-out");
    std::fs::write(dir.join("d.csv"), image_csv()).unwrap();
    let path = model_path("cnn2d_bn");
    ok(
        &dir,
        &["plan", "--onnx", &path, "--batch", "12", "-o", "m.plan"],
    );
    let stdout = ok(
        &dir,
        &["train", "m.plan", "--data", "d.csv", "--epochs", "1"],
    );
    // 40 rows: 32 train, 8 test; 2 batches of 12 leave 8 out.
    assert!(
        stdout.contains("each epoch trains 2 full batches of 12 rows: the last 8 rows of each epoch's shuffle are left out"),
        "{stdout}"
    );
}
