//! `plan=` runs (issue 13: "verify checks a device transcript of any plan, data, optimizer and
//! loss"): an ONNX CNN with a frozen backbone under Adam and a layer-API `Sequential` under
//! momentum SGD, each trained by the `no_std` runtime on the host (the device's side), its
//! transcript verified step for step against the plan replayed with the reference kernels, and a
//! one-bit change reported at its step.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use crate::common;

use std::path::{Path, PathBuf};

use common::{ok, scratch_dir, tapeplan};
use tapeplan_planner::exec::transcript::{runtime_transcript, Transcript};
use tapeplan_planner::exec::verify::{verify, VerifyError};
use tapeplan_planner::io::exchange::{export_safetensors, Param};
use tapeplan_planner::model::nn::{Conv1d, Flatten, Linear, ReLU, Sequential};
use tapeplan_planner::model::onnx::OnnxModel;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{Loss, RunConfig, TrainingJob};
use tapeplan_planner::protocol::data_digest;

/// A deterministic uniform number in `[-1, 1)` (a 32-bit LCG), exactly representable.
fn uniform(state: &mut u32) -> f32 {
    *state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
    ((*state >> 8) as f32 / (1u32 << 24) as f32) * 2.0 - 1.0
}

/// `rows` rows of `d_in` features and a label below `classes` (the label last), as a CSV.
fn csv(rows: usize, d_in: usize, classes: usize) -> String {
    let mut s = 11u32;
    let mut text = String::new();
    for r in 0..rows {
        for _ in 0..d_in {
            text += &format!("{},", uniform(&mut s));
        }
        text += &format!("{}\n", r % classes);
    }
    text
}

/// Writes `job`'s plan to `dir/name`, its initial values beside it (`PLAN.init.safetensors`)
/// and a CSV; answers the run description of `samples` rows and `epochs` epochs.
fn write_run(dir: &Path, name: &str, job: &TrainingJob, d_in: usize, classes: usize) -> String {
    let plan: PathBuf = dir.join(name);
    let bytes = job.schedule.to_bytes();
    std::fs::write(&plan, &bytes).unwrap();
    std::fs::write(
        dir.join(format!("{name}.init.safetensors")),
        export_safetensors(&init_of(job), &[]).unwrap(),
    )
    .unwrap();
    let data = csv(40, d_in, classes);
    let data_path = dir.join(format!("{name}.csv"));
    std::fs::write(&data_path, &data).unwrap();
    format!(
        "plan={} plan_digest={:016x} seed=5 split_seed=3 samples=24 epochs=2 data={} data_digest={:016x}",
        plan.display(),
        data_digest(&bytes, &[]),
        data_path.display(),
        data_digest(data.as_bytes(), &[])
    )
}

/// Flips the lowest bit of the `word`-th field of the first line starting with `prefix`.
fn flip(text: &str, prefix: &str, word: usize) -> String {
    let mut done = false;
    text.lines()
        .map(|l| {
            if !done && l.starts_with(prefix) {
                done = true;
                let mut f: Vec<String> = l.split(' ').map(str::to_string).collect();
                let v = u32::from_str_radix(&f[word], 16).unwrap() ^ 1;
                f[word] = format!("{v:08x}");
                f.join(" ") + "\n"
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

/// The transcript's values of parameter `name`.
fn param(t: &Transcript, name: &str) -> Vec<f32> {
    let (_, bits) = t.params.iter().find(|(n, _)| n == name).unwrap();
    bits.iter().map(|&b| f32::from_bits(b)).collect()
}

/// Checks a run end to end: parse, the runtime's transcript verified, a flipped loss bit at step
/// 5 and a flipped parameter bit reported where they are.
fn check_run(line: &str, batch: usize, frozen: &[&str], trained: &str, init: &[Param]) -> String {
    let cfg = RunConfig::parse(line).unwrap();
    assert_eq!(cfg.to_line(), line, "the canonical line is the description");
    assert_eq!(cfg.batch, batch, "the batch is the plan's");
    assert_eq!(cfg.total_steps(), 2 * (24 / batch));
    let text = runtime_transcript(&cfg, "host runtime").unwrap();
    let t = Transcript::parse(&text).unwrap();
    let r = verify(&t, Some(&cfg)).unwrap();
    assert!(r.passed(), "{r}");
    assert_eq!(r.identical_steps, cfg.total_steps());
    // The losses are real cross-entropies over 5 classes (near ln 5 at the start) and the
    // run moved the trainable parameters while the frozen ones kept their initial bits.
    let first = f32::from_bits(t.losses[0]);
    assert!(
        (first - 1.609_438).abs() < 1.0,
        "first loss {first} (ln 5 = 1.609438)"
    );
    for p in init {
        let now = param(&t, &p.name);
        let same = now
            .iter()
            .zip(&p.values)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        if frozen.iter().any(|f| p.name.starts_with(f)) {
            assert!(same, "frozen {} changed", p.name);
        } else if p.name == trained {
            assert!(!same, "trainable {} did not move", p.name);
        }
    }

    let bad = flip(&text, "loss 5 ", 2);
    let r = verify(&Transcript::parse(&bad).unwrap(), Some(&cfg)).unwrap();
    assert!(!r.passed());
    assert_eq!(r.identical_steps, cfg.total_steps() - 1);
    let d = r.first_step_diff.as_ref().unwrap();
    assert_eq!((d.step, d.epoch), (5, 5 / (24 / batch) + 1));
    assert_eq!(d.device_bits ^ d.oracle_bits, 1);

    let bad = flip(&text, &format!("param {trained} 0 "), 3);
    let r = verify(&Transcript::parse(&bad).unwrap(), Some(&cfg)).unwrap();
    assert!(!r.passed());
    let d = r.first_param_diff.as_ref().unwrap();
    assert_eq!((d.tensor.as_str(), d.element), (trained, 0));
    text
}

/// A small 1-D CNN from the layer API: `[2, 16]` in, 5 classes out (`0.*` the convolution,
/// `3.*` the head).
fn small_cnn(seed: u64) -> Sequential {
    Sequential::new(&[2, 16])
        .push(Conv1d::new(2, 4, 3).padding(1))
        .push(ReLU)
        .push(Flatten)
        .push(Linear::new(64, 5))
        .seed(seed)
}

fn init_of(job: &TrainingJob) -> Vec<Param> {
    job.parameters
        .iter()
        .map(|p| Param {
            name: p.name.clone(),
            shape: p.shape,
            values: p.init.clone(),
        })
        .collect()
}

#[test]
fn an_onnx_cnn_with_a_frozen_backbone_under_adam_verifies_step_for_step() {
    let dir = scratch_dir("verify-onnx-plan");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/onnx/cnn1d.onnx");
    let model = OnnxModel::from_bytes(&std::fs::read(path).unwrap()).unwrap();
    let job = TrainingJob::for_model(&model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(Optimizer::adam(0.01))
        .batch(4)
        .frozen(["conv1.*"])
        .build()
        .unwrap();
    let line = write_run(&dir, "cnn1d.plan", &job, 64, 5);
    let text = check_run(&line, 4, &["conv1."], "fc.weight", &init_of(&job));
    // The same through the command line: `tapeplan verify` with the run description.
    std::fs::write(dir.join("cnn1d.run"), format!("# an ONNX CNN\n{line}\n")).unwrap();
    std::fs::write(dir.join("good.transcript"), &text).unwrap();
    let out = ok(
        &dir,
        &["verify", "good.transcript", "--config", "cnn1d.run"],
    );
    assert!(out.contains("bitwise: 12/12 steps identical"), "{out}");
    std::fs::write(dir.join("bad.transcript"), flip(&text, "loss 7 ", 2)).unwrap();
    let out = tapeplan(&dir, &["verify", "bad.transcript", "--config", "cnn1d.run"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(
        stdout.contains("bitwise: 11/12 steps identical"),
        "{stdout}"
    );
    assert!(stdout.contains("step 7 (epoch 2)"), "{stdout}");
}

#[test]
fn a_sequential_under_momentum_verifies_step_for_step() {
    let dir = scratch_dir("verify-seq-plan");
    let model = small_cnn(9);
    let job = TrainingJob::for_model(&model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(Optimizer::Momentum {
            lr: 0.05,
            momentum: 0.9,
            nesterov: false,
        })
        .batch(6)
        .build()
        .unwrap();
    let line = write_run(&dir, "seq.plan", &job, 32, 5);
    check_run(&line, 6, &[], "3.weight", &init_of(&job));
}

#[test]
fn plan_runs_refuse_what_the_plan_fixes_and_name_what_is_missing() {
    let dir = scratch_dir("verify-plan-refusals");
    let model = Sequential::new(&[4]).push(Linear::new(4, 3)).seed(1);
    let job = TrainingJob::for_model(&model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(Optimizer::sgd(0.1))
        .batch(2)
        .build()
        .unwrap();
    let line = write_run(&dir, "lin.plan", &job, 4, 3);
    assert!(RunConfig::parse(&line).is_ok());
    // `tapeplan digest` prints each file's key and digest as the description pins it.
    let out = ok(
        &dir,
        &[
            "digest",
            "lin.plan",
            "lin.plan.csv",
            "lin.plan.init.safetensors",
        ],
    );
    let bytes = job.schedule.to_bytes();
    let id = tapeplan_runtime::Plan::parse(&bytes).unwrap().plan_id();
    // FNV-1a 64 from its definition (offset basis 0xcbf29ce484222325, prime 0x100000001b3).
    let fnv = |p: &str| {
        std::fs::read(dir.join(p))
            .unwrap()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            })
    };
    assert_eq!(
        out,
        format!(
            "plan=lin.plan plan_digest={:016x}  # plan id {id:08x}\n\
             data=lin.plan.csv data_digest={:016x}\n\
             init=lin.plan.init.safetensors init_digest={:016x}\n",
            fnv("lin.plan"),
            fnv("lin.plan.csv"),
            fnv("lin.plan.init.safetensors")
        )
    );
    for key in ["plan_digest", "data_digest"] {
        let pinned = line.split(' ').find(|t| t.starts_with(key)).unwrap();
        assert!(out.contains(pinned), "{out} lacks {pinned}");
    }
    let e = |text: &str| RunConfig::parse(text).unwrap_err().to_string();
    let msg = e(&format!("{line} lr=0.1"));
    assert!(msg.contains("lr= is fixed by the plan"), "{msg}");
    let msg = e(&format!("{line} batch=2"));
    assert!(msg.contains("batch= is fixed by the plan"), "{msg}");
    let msg = e(&line.replace("plan_digest=", "plan_digest=x"));
    assert!(msg.contains("16 hex digits"), "{msg}");
    let other = line.replace(
        &line[line.find("plan_digest=").unwrap() + 12..][..16],
        "0123456789abcdef",
    );
    let msg = e(&other);
    assert!(
        msg.contains("another file than the run was made with"),
        "{msg}"
    );
    // Files a transcript names are read only when they are regular files.
    for special in ["/dev/zero", "/tmp"] {
        let at = line.find("plan=").unwrap() + 5;
        let end = at + line[at..].find(' ').unwrap();
        let msg = e(&format!("{}{special}{}", &line[..at], &line[end..]));
        assert!(msg.contains("not a regular file"), "{msg}");
    }
    let msg = RunConfig::parse(&line.replace("samples=24", "samples=33"))
        .unwrap()
        .training_set()
        .unwrap_err()
        .to_string();
    assert!(msg.contains("samples=33 exceeds the 32 rows"), "{msg}");
    // Without the init file beside it (and not an MLP's w*/b*), the run names what is missing.
    std::fs::remove_file(dir.join("lin.plan.init.safetensors")).unwrap();
    let cfg = RunConfig::parse(&line).unwrap();
    let msg = runtime_transcript(&cfg, "x").unwrap_err().to_string();
    assert!(
        msg.contains("lin.plan.init.safetensors") && msg.contains("0.weight"),
        "{msg}"
    );
    // A transcript of another run is a mismatch.
    std::fs::write(
        dir.join("lin.plan.init.safetensors"),
        export_safetensors(&init_of(&job), &[]).unwrap(),
    )
    .unwrap();
    let text = runtime_transcript(&cfg, "x").unwrap();
    let mut longer = cfg.clone();
    longer.epochs = 3;
    let e = verify(&Transcript::parse(&text).unwrap(), Some(&longer)).unwrap_err();
    assert!(matches!(e, VerifyError::Mismatch(_)), "{e}");
}

#[test]
fn train_picks_up_the_init_beside_the_plan_and_writes_the_run_it_did() {
    let dir = scratch_dir("train-write-run");
    let model = small_cnn(4);
    let job = TrainingJob::for_model(&model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(Optimizer::adam(0.01))
        .batch(8)
        .build()
        .unwrap();
    write_run(&dir, "seq.plan", &job, 32, 5);
    // Absolute paths: the description names them as given, and this test reads it from
    // another folder.
    let abs = |name: &str| dir.join(name).display().to_string();
    let args = [
        "train",
        &abs("seq.plan"),
        "--data",
        &abs("seq.plan.csv"),
        "--epochs",
        "3",
        "--seed",
        "5",
        "--split-seed",
        "3",
        "--write-run",
        "seq.run",
        "--save-params",
        "trained.safetensors",
    ];
    let out = ok(&dir, &args);
    assert!(
        out.contains(&format!(
            "initial parameters: {}",
            abs("seq.plan.init.safetensors")
        )) && out.contains("(found beside the plan; --init FILE names another file)"),
        "{out}"
    );
    let line = std::fs::read_to_string(dir.join("seq.run")).unwrap();
    let cfg = RunConfig::parse(&line).unwrap();
    assert!(
        line.starts_with(&format!("plan={} plan_digest=", abs("seq.plan")))
            && line.contains(" seed=5 split_seed=3 samples=32 epochs=3 data=")
            && line.contains(&format!(
                " init={} init_digest=",
                abs("seq.plan.init.safetensors")
            )),
        "{line}"
    );
    assert_eq!(cfg.total_steps(), 12);
    // The runtime replaying the description ends where `train` ended, bit for bit, and the
    // reference-kernel replay agrees step for step.
    let text = runtime_transcript(&cfg, "host runtime").unwrap();
    let t = Transcript::parse(&text).unwrap();
    assert!(verify(&t, Some(&cfg)).unwrap().passed());
    let saved = std::fs::read(dir.join("trained.safetensors")).unwrap();
    let saved = safetensors::SafeTensors::deserialize(&saved).unwrap();
    for name in ["0.weight", "0.bias", "3.weight", "3.bias"] {
        let view = saved.tensor(name).unwrap();
        let values: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let bits: Vec<u32> = values.iter().map(|v| v.to_bits()).collect();
        let device: Vec<u32> = param(&t, name).iter().map(|v| v.to_bits()).collect();
        assert_eq!(bits, device, "{name}");
    }
    // What a description cannot say is refused before training.
    let out = tapeplan(
        &dir,
        &[
            "train",
            "seq.plan",
            "--data",
            "seq.plan.csv",
            "--scale",
            "2",
            "--write-run",
            "x.run",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("a run description cannot say --scale"),
        "{stderr}"
    );
}

#[test]
fn a_guarded_fused_regression_plan_verifies_and_refuses_a_non_finite_step_like_the_runtime() {
    use tapeplan_planner::exec::replay::{PlanReplay, ReplayError};
    use tapeplan_planner::exec::RuntimeModel;
    use tapeplan_planner::model::JobOptions;
    let dir = scratch_dir("verify-regression-plan");
    let model = Sequential::new(&[4])
        .push(Linear::new(4, 8))
        .push(ReLU)
        .push(Linear::new(8, 2))
        .seed(3);
    let job = TrainingJob::for_model(&model)
        .loss(Loss::L1)
        .optimizer(Optimizer::adamw(0.01))
        .batch(5)
        .options(JobOptions {
            guarded: true,
            ..JobOptions::default()
        })
        .build()
        .unwrap();
    let bytes = job.schedule.to_bytes();
    // Fused chains (registers) and guarded updates (in scratch): both replay paths are taken.
    assert!(tapeplan_planner::io::inspect::PlanInfo::decode(&bytes).is_fused());
    std::fs::write(dir.join("reg.plan"), &bytes).unwrap();
    std::fs::write(
        dir.join("reg.plan.init.safetensors"),
        export_safetensors(&init_of(&job), &[]).unwrap(),
    )
    .unwrap();
    // 4 features, then 2 float targets (the last d_out columns).
    let mut s = 3u32;
    let mut data = String::new();
    for _ in 0..40 {
        let row: Vec<String> = (0..6).map(|_| uniform(&mut s).to_string()).collect();
        data += &(row.join(",") + "\n");
    }
    std::fs::write(dir.join("reg.csv"), &data).unwrap();
    let fnv = |p: &str| data_digest(&std::fs::read(dir.join(p)).unwrap(), &[]);
    let line = format!(
        "plan={} plan_digest={:016x} seed=1 split_seed=2 samples=30 epochs=2 data={} data_digest={:016x}",
        dir.join("reg.plan").display(),
        fnv("reg.plan"),
        dir.join("reg.csv").display(),
        fnv("reg.csv")
    );
    let cfg = RunConfig::parse(&line).unwrap();
    assert_eq!((cfg.layers.as_slice(), cfg.batch), (&[4, 2][..], 5));
    let text = runtime_transcript(&cfg, "host runtime").unwrap();
    let r = verify(&Transcript::parse(&text).unwrap(), Some(&cfg)).unwrap();
    assert!(r.passed(), "{r}");
    assert_eq!(r.identical_steps, 12);

    // A non-finite input: both readers refuse the step and keep every parameter.
    let mut replay = PlanReplay::new(&bytes).unwrap();
    let mut runtime = RuntimeModel::new(&bytes).unwrap();
    for p in init_of(&job) {
        replay.load_parameter(&p.name, &p.values).unwrap();
        runtime.load_parameter(&p.name, &p.values).unwrap();
    }
    let mut x = vec![0.5f32; 20];
    x[7] = f32::NAN;
    let y = vec![0.25f32; 10];
    let before = replay.parameter("0.weight").unwrap().to_vec();
    let e = replay
        .train_step_named(&[("x", &x), ("y", &y)])
        .unwrap_err();
    assert!(matches!(e, ReplayError::NonFinite { .. }), "{e}");
    assert_eq!(replay.parameter("0.weight").unwrap(), &before[..]);
    let e = runtime
        .train_step_named(&[("x", &x), ("y", &y)])
        .unwrap_err();
    assert!(e.to_string().contains("not finite"), "{e}");
    // A finite step then commits on both, to the same bits.
    x[7] = 0.5;
    let a = replay.train_step_named(&[("x", &x), ("y", &y)]).unwrap();
    let b = runtime.train_step_named(&[("x", &x), ("y", &y)]).unwrap();
    assert_eq!(a.to_bits(), b.to_bits());
    assert_ne!(replay.parameter("0.weight").unwrap(), &before[..]);
}

#[test]
fn the_layers_mlp_as_a_plan_file_trains_to_the_oracles_bits_on_the_digits() {
    use tapeplan_planner::exec::transcript::oracle_transcript;
    let dir = scratch_dir("verify-mlp-plan");
    // The MLP as a model run: the oracle (tape interpreter) retrains it.
    let model_run = RunConfig::parse(
        "model=64,8,10 activation=tanh loss=ce batch=4 lr=0.1 seed=42 split_seed=0 samples=16 \
         epochs=2 optimizer=momentum momentum=0.9",
    )
    .unwrap();
    let bytes = model_run.job().unwrap().schedule.to_bytes();
    std::fs::write(dir.join("mlp.plan"), &bytes).unwrap();
    // The same MLP as a plan file on the bundled digits, its w*/b* from the seeded Glorot draw.
    let plan_run = RunConfig::parse(&format!(
        "plan={} plan_digest={:016x} seed=42 split_seed=0 samples=16 epochs=2",
        dir.join("mlp.plan").display(),
        data_digest(&bytes, &[])
    ))
    .unwrap();
    let device = runtime_transcript(&plan_run, "host runtime").unwrap();
    assert!(
        verify(&Transcript::parse(&device).unwrap(), Some(&plan_run))
            .unwrap()
            .passed()
    );
    // Every loss, epoch mean and final parameter equals the oracle's model run, bit for bit:
    // the plan replay, the runtime and the tape interpreter agree.
    let oracle = oracle_transcript(&model_run).unwrap();
    let records = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| {
                ["loss ", "epoch ", "param ", "digest "]
                    .iter()
                    .any(|p| l.starts_with(p))
            })
            .map(str::to_owned)
            .collect()
    };
    let losses = records(&oracle)
        .iter()
        .filter(|l| l.starts_with("loss "))
        .count();
    assert_eq!(losses, 8);
    assert_eq!(records(&device), records(&oracle));
}
