//! Paths in a run description are relative to its file's folder, wherever it is read from, and
//! a run's files are compared by digest: two spellings of one file agree, one spelling of two
//! files does not.

use std::path::Path;

use crate::common::{ok, scratch_dir, tapeplan};

use tapeplan_planner::exec::transcript::runtime_transcript;
use tapeplan_planner::model::run::file_digest;
use tapeplan_planner::model::RunConfig;

/// `plan=PLAN plan_digest=… seed=1 split_seed=0 samples=64 epochs=1`, the digest of `file`.
fn run_of(plan: &str, file: &Path) -> String {
    format!(
        "plan={plan} plan_digest={:016x} seed=1 split_seed=0 samples=64 epochs=1\n",
        file_digest(&std::fs::read(file).unwrap())
    )
}

/// `tapeplan args` in `dir`: (success, stdout + stderr).
fn run(dir: &Path, args: &[&str]) -> (bool, String) {
    let out = tapeplan(dir, args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("panicked"), "{text}");
    (out.status.success(), text)
}

#[test]
fn a_run_file_s_paths_are_relative_to_its_folder_from_anywhere() {
    let dir = scratch_dir("run-paths");
    std::fs::create_dir_all(dir.join("runs/a")).unwrap();
    ok(
        &dir,
        &["plan", "--layers", "64,16,10", "-o", "runs/a/m.plan"],
    );
    let run_file = dir.join("runs/a/r.run");
    std::fs::write(&run_file, run_of("m.plan", &dir.join("runs/a/m.plan"))).unwrap();

    // The device's transcript names the plan as the run file does (`plan=m.plan`).
    let cfg = RunConfig::from_file(&run_file).unwrap();
    let transcript = runtime_transcript(&cfg, "host runtime").unwrap();
    assert!(transcript.contains("config plan=m.plan "), "{transcript}");
    std::fs::write(dir.join("t.txt"), &transcript).unwrap();
    // Verified from the repository-like root, from the run's folder and from elsewhere.
    for (cwd, t, config) in [
        (dir.clone(), "t.txt".to_owned(), "runs/a/r.run".to_owned()),
        (
            dir.join("runs/a"),
            "../../t.txt".to_owned(),
            "r.run".to_owned(),
        ),
        (
            std::env::temp_dir(),
            dir.join("t.txt").display().to_string(),
            run_file.display().to_string(),
        ),
    ] {
        let (passed, out) = run(&cwd, &["verify", &t, "--config", &config]);
        assert!(passed, "from {}: {out}", cwd.display());
        assert!(
            out.contains("every step identical") || out.contains("identical"),
            "{out}"
        );
    }
    // Without --config, the transcript's own line is read from the current folder: the error
    // says to give the run description.
    let (passed, out) = run(&dir, &["verify", "t.txt"]);
    assert!(!passed && out.contains("give --config RUN"), "{out}");
    // Parsed as a text (no file), the same line reads from the current folder: here, no plan.
    let e = RunConfig::parse(&std::fs::read_to_string(&run_file).unwrap()).unwrap_err();
    assert!(e.to_string().contains("m.plan"), "{e}");
}

#[test]
fn files_are_compared_by_digest_not_by_the_spelling_of_their_paths() {
    let dir = scratch_dir("run-digests");
    for sub in ["a", "b"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    ok(&dir, &["plan", "--layers", "64,16,10", "-o", "a/m.plan"]);
    // Another plan under the same name in another folder.
    ok(&dir, &["plan", "--layers", "64,12,10", "-o", "b/m.plan"]);
    let (a_plan, b_plan) = (dir.join("a/m.plan"), dir.join("b/m.plan"));
    assert_ne!(
        file_digest(&std::fs::read(&a_plan).unwrap()),
        file_digest(&std::fs::read(&b_plan).unwrap())
    );
    std::fs::write(dir.join("a/r.run"), run_of("m.plan", &a_plan)).unwrap();
    std::fs::write(dir.join("b/r.run"), run_of("m.plan", &b_plan)).unwrap();
    // The same file by another spelling (from the root, beside the run, absolute).
    std::fs::write(dir.join("a.run"), run_of("a/m.plan", &a_plan)).unwrap();
    std::fs::write(dir.join("a/dot.run"), run_of("./m.plan", &a_plan)).unwrap();
    std::fs::write(
        dir.join("abs.run"),
        run_of(&a_plan.display().to_string(), &a_plan),
    )
    .unwrap();
    let from = |run: &str| RunConfig::from_file(&dir.join(run)).unwrap();
    assert_eq!(from("a/r.run"), from("a.run"));
    assert_eq!(from("a/r.run"), from("a/dot.run"));
    assert_eq!(from("a/r.run"), from("abs.run"));
    assert_ne!(from("a/r.run"), from("b/r.run"));

    // A device that ran a.run (its config line says `plan=a/m.plan`) verifies against
    // a/r.run (`plan=m.plan`): one file.
    let t = runtime_transcript(&from("a.run"), "host runtime").unwrap();
    assert!(t.contains("config plan=a/m.plan "), "{t}");
    std::fs::write(dir.join("a.txt"), &t).unwrap();
    let (passed, out) = run(&dir.join("a"), &["verify", "../a.txt", "--config", "r.run"]);
    assert!(passed, "{out}");
    // A device that ran b/r.run (`plan=m.plan` too, another file) does not verify against
    // a/r.run: the digest of the file it names differs.
    let t = runtime_transcript(&from("b/r.run"), "host runtime").unwrap();
    std::fs::write(dir.join("b.txt"), &t).unwrap();
    let (passed, out) = run(&dir, &["verify", "b.txt", "--config", "a/r.run"]);
    assert!(!passed, "{out}");
    assert!(out.contains("digest"), "{out}");
    // Its own run file verifies it.
    let (passed, out) = run(&dir, &["verify", "b.txt", "--config", "b/r.run"]);
    assert!(passed, "{out}");
}

#[test]
fn write_run_writes_paths_relative_to_the_run_file_s_folder() {
    let dir = scratch_dir("run-write");
    std::fs::create_dir_all(dir.join("runs")).unwrap();
    ok(&dir, &["plan", "--layers", "64,16,10", "-o", "m.plan"]);
    ok(
        &dir,
        &[
            "train",
            "m.plan",
            "--epochs",
            "1",
            "--write-run",
            "runs/own.run",
        ],
    );
    let text = std::fs::read_to_string(dir.join("runs/own.run")).unwrap();
    assert!(text.starts_with("plan=../m.plan "), "{text}");
    // It names the plan train trained, read from its own folder.
    let cfg = RunConfig::from_file(&dir.join("runs/own.run")).unwrap();
    assert_eq!(cfg.samples, 1437);
    // Beside the plan, the path is as given.
    ok(
        &dir,
        &["train", "m.plan", "--epochs", "1", "--write-run", "own.run"],
    );
    let text = std::fs::read_to_string(dir.join("own.run")).unwrap();
    assert!(text.starts_with("plan=m.plan "), "{text}");
}
