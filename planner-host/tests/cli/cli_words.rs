//! What the CLI says to a person (issue 17): help texts that name every optimizer, `describe`
//! saying what model a plan is, and data errors that number rows and columns one way.

use crate::common;

use std::process::Output;

use common::{ok, scratch_dir, tapeplan};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn plan_help_names_every_optimizer_not_only_sgd() {
    let dir = scratch_dir("words-help");
    let help = ok(&dir, &["plan", "--help"]);
    assert!(!help.contains("SGD update"), "{help}");
    for optimizer in ["SGD", "momentum", "Nesterov", "Adam", "AdamW"] {
        assert!(
            help.contains(optimizer),
            "plan --help omits {optimizer}:\n{help}"
        );
    }
    let describe = ok(&dir, &["describe", "--help"]);
    assert!(describe.contains("what model it is"), "{describe}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn describe_says_what_model_a_plan_is() {
    let dir = scratch_dir("words-describe");
    ok(&dir, &["plan", "-o", "digits.plan"]);
    let listing = ok(&dir, &["describe", "digits.plan"]);
    let lines: Vec<&str> = listing.lines().take(5).collect();
    // 64*32 + 32 + 32*10 + 10 = 2410 parameter elements.
    assert_eq!(
        lines[1],
        "model: forward x [32, 64] -> logits [32, 10]; 4 parameters, 2410 elements \
         (w1 [64, 32], b1 [32], w2 [32, 10], b2 [10])"
    );
    assert_eq!(
        lines[2],
        "  layers: matmul x2, tanh x1; an MLP 64-32-10 (tanh)"
    );
    assert_eq!(
        lines[3],
        "training: train_step x [32, 64], labels [32] -> loss [], updates 4 persistent \
         tensors; task: classification (integer labels)"
    );
    assert_eq!(lines[4], "  state: none besides the parameters");

    // Adam with dropout: the moments, the step counters and the dropout generator are
    // training state (the forward pass does not read them); init writes them.
    ok(
        &dir,
        &[
            "plan",
            "--layers",
            "4,3,2",
            "--activation",
            "relu",
            "--optimizer",
            "adam",
            "--dropout",
            "0.1",
            "-o",
            "adam.plan",
        ],
    );
    let listing = ok(&dir, &["describe", "adam.plan"]);
    let lines: Vec<&str> = listing.lines().take(5).collect();
    assert!(
        lines[1].ends_with("4 parameters, 23 elements (w1 [4, 3], b1 [3], w2 [3, 2], b2 [2])"),
        "{listing}"
    );
    assert_eq!(
        lines[2],
        "  layers: matmul x2, relu x1; an MLP 4-3-2 (relu)"
    );
    assert!(
        lines[3].contains("init (no inputs or outputs), updates"),
        "{listing}"
    );
    // Moments m and v of 23 elements each, five optimizer scalars, the generator's key and
    // counter: 46 + 5 + 2 = 53 elements in 15 tensors; train_step updates all but the key,
    // and the 4 parameters: 4 + 8 + 5 + 1 = 18.
    assert!(
        lines[4].starts_with("  state: 15 tensors, 53 elements ("),
        "{listing}"
    );
    assert!(
        lines[3].contains("updates 18 persistent tensors"),
        "{listing}"
    );
    assert!(
        lines[4].contains("w1.m, b1.m, w2.m, b2.m, w1.v"),
        "{listing}"
    );
    assert!(lines[4].contains("rng.key, rng.counter"), "{listing}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn data_errors_number_rows_and_columns_from_one() {
    let dir = scratch_dir("words-csv");
    ok(&dir, &["plan", "--layers", "2,3,2", "-o", "small.plan"]);
    let cases: [(&[u8], &str); 3] = [
        (
            b"0.5,1,0\n0.25,x,1\n",
            "row 2, column 2: \"x\" is not a number",
        ),
        (
            b"a,b,class\n1,2,0\n1,inf,1\n",
            "row 3, column 2: feature \"inf\" is not finite",
        ),
        (
            b"1,2,0\n\xff,2,1\n",
            "row 2, column 1: the text is not UTF-8",
        ),
    ];
    for (k, (csv, want)) in cases.iter().enumerate() {
        let name = format!("bad{k}.csv");
        std::fs::write(dir.join(&name), csv).unwrap();
        let out = tapeplan(
            &dir,
            &["train", "small.plan", "--data", &name, "--epochs", "1"],
        );
        let err = stderr(&out);
        assert!(!out.status.success(), "{name} was accepted");
        assert!(err.contains(want), "{name}: expected `{want}` in:\n{err}");
        assert!(
            !err.contains("record"),
            "{name}: the csv reader's numbering leaks:\n{err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--arith fma` is recorded in the plan and said back: `plan` names it, `describe` reads it
/// from the header, a plan without it is `separate`, and `--arith fma` beside a plan file (which
/// already records its profile) is refused rather than silently ignored.
#[test]
fn arith_profile_is_recorded_and_said() {
    let dir = scratch_dir("words-arith");
    let said = ok(
        &dir,
        &[
            "plan", "--layers", "4,3,2", "--arith", "fma", "-o", "fma.plan",
        ],
    );
    assert!(said.contains("math precise, arith fma)"), "{said}");
    let said = ok(&dir, &["plan", "--layers", "4,3,2", "-o", "separate.plan"]);
    assert!(!said.contains("arith"), "{said}");
    let fma = ok(&dir, &["describe", "fma.plan"]);
    assert!(fma.contains("math precise, arith fma,"), "{fma}");
    let separate = ok(&dir, &["describe", "separate.plan"]);
    assert!(
        separate.contains("math precise, arith separate,"),
        "{separate}"
    );
    std::fs::write(dir.join("d.csv"), b"0.5,1,0\n0.25,-1,1\n").unwrap();
    let out = tapeplan(
        &dir,
        &[
            "train", "fma.plan", "--arith", "fma", "--data", "d.csv", "--epochs", "1",
        ],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--arith"), "{}", stderr(&out));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn arena_budget_reports_the_recomputation_and_refuses_what_it_cannot_reach() {
    let dir = scratch_dir("words-arena-budget");
    let deep = ["--layers", "64,128,128,128,128,128,10", "--batch", "256"];
    let plain = ok(
        &dir,
        &[&["plan"][..], &deep, &["-o", "plain.plan"]].concat(),
    );
    assert!(!plain.contains("remat:"), "{plain}");
    let arena: usize = plain
        .lines()
        .find_map(|l| l.trim().strip_prefix("train_step  arena"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .expect("the train_step line");
    let budget = (arena - 1).to_string();
    let fit = ok(
        &dir,
        &[
            &["plan"][..],
            &deep,
            &["--arena-budget", &budget, "-o", "fit.plan"],
        ]
        .concat(),
    );
    let line = fit
        .lines()
        .find(|l| l.starts_with("remat: arena"))
        .expect(&fit);
    assert!(
        line.contains(&format!("without rematerialization {arena} B")),
        "{line}"
    );
    assert!(
        line.contains("forward values recomputed in the backward pass"),
        "{line}"
    );
    // The budgeted plan is another plan, with more instructions.
    assert_ne!(
        std::fs::read(dir.join("plain.plan")).unwrap(),
        std::fs::read(dir.join("fit.plan")).unwrap()
    );
    let out = tapeplan(
        &dir,
        &[
            &["plan"][..],
            &deep,
            &["--arena-budget", "1000", "-o", "no.plan"],
        ]
        .concat(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot be brought within the budget of 1000 B")
            && err.contains(&format!("{arena} B without rematerialization")),
        "{err}"
    );
    assert!(
        !dir.join("no.plan").exists(),
        "a refused plan writes nothing"
    );
}

#[test]
fn arena_budgets_of_zero_one_and_u64_max_are_refused_or_met_without_a_panic() {
    let dir = scratch_dir("words-arena-budget-edges");
    let small = ["plan", "--layers", "64,8,10", "--batch", "4"];
    for budget in ["0", "1"] {
        let out = tapeplan(
            &dir,
            &[&small[..], &["--arena-budget", budget, "-o", "no.plan"]].concat(),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && !err.contains("panicked"), "{err}");
        assert!(
            err.contains(&format!(
                "cannot be brought within the budget of {budget} B"
            )),
            "{err}"
        );
        assert!(!dir.join("no.plan").exists());
    }
    let max = u64::MAX.to_string();
    let fit = ok(
        &dir,
        &[&small[..], &["--arena-budget", &max, "-o", "max.plan"]].concat(),
    );
    assert!(fit.contains("remat: none needed"), "{fit}");
    // One past u64::MAX, and a negative budget: clap's own errors naming the option.
    for budget in ["18446744073709551616", "-1"] {
        let option = format!("--arena-budget={budget}");
        let out = tapeplan(&dir, &[&small[..], &[&option, "-o", "no.plan"]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("--arena-budget"),
            "{err}"
        );
    }
}
