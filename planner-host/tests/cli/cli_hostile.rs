//! `tapeplan train` given careless options and data: errors before anything is written, and no
//! file of an earlier run replaced by a command that then fails.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use crate::common;

use std::path::Path;

use common::{fails, ok, scratch_dir};

/// 40 rows of two features and a label 0/1 (or `label` for every row).
fn csv(dir: &Path, name: &str, label: Option<&str>) {
    let rows: String = (1..=40)
        .map(|i| {
            let l = label.map_or_else(|| (i % 2).to_string(), str::to_owned);
            format!("{i},{},{l}\n", i * 2)
        })
        .collect();
    std::fs::write(dir.join(name), rows).unwrap();
}

#[test]
fn options_that_need_no_data_are_checked_before_the_plan_is_written() {
    let dir = scratch_dir("hostile-options");
    csv(&dir, "d.csv", None);
    let base = ["train", "--data", "d.csv", "--batch", "4"];
    for (extra, why) in [
        (
            &["--val-fraction", "1.0"][..],
            "--val-fraction must be in [0, 1)",
        ),
        (
            &["--val-fraction", "NaN"][..],
            "--val-fraction must be in [0, 1)",
        ),
        (&["--val-fraction", "0.99"][..], "fewer than one batch of 4"),
        (
            &["--train-fraction", "1.5"][..],
            "--train-fraction must be in [0, 1]",
        ),
        (&["--epochs", "0"][..], "--epochs must be at least 1"),
        (&["--scale", "inf"][..], "--scale must be finite"),
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let stderr = fails(&dir, &args);
        assert!(stderr.contains(why), "{extra:?}: {stderr}");
        assert!(!dir.join("model.plan").exists(), "{extra:?} wrote a plan");
    }
    // With --force over an earlier plan, a failing command leaves that plan as it was.
    ok(
        &dir,
        &["train", "--data", "d.csv", "--batch", "4", "--epochs", "1"],
    );
    let before = std::fs::read(dir.join("model.plan")).unwrap();
    let stderr = fails(
        &dir,
        &[
            "train", "--data", "d.csv", "--batch", "64", "--force", "--epochs", "1",
        ],
    );
    assert!(stderr.contains("fewer than one batch of 64"), "{stderr}");
    assert_eq!(std::fs::read(dir.join("model.plan")).unwrap(), before);
}

#[test]
fn a_bad_init_leaves_the_files_beside_the_plan_as_they_were() {
    let dir = scratch_dir("hostile-init");
    csv(&dir, "d.csv", None);
    ok(
        &dir,
        &[
            "train",
            "--data",
            "d.csv",
            "--batch",
            "4",
            "--epochs",
            "1",
            "--standardize",
        ],
    );
    let saved = std::fs::read(dir.join("model.plan.standardize.json")).unwrap();
    // Other data (so another standardization) and an --init that is no safetensors file.
    let other: String = (1..=40)
        .map(|i| format!("{},{i},{}\n", i * 7, i % 2))
        .collect();
    std::fs::write(dir.join("e.csv"), other).unwrap();
    let stderr = fails(
        &dir,
        &[
            "train",
            "model.plan",
            "--data",
            "e.csv",
            "--standardize",
            "--init",
            "e.csv",
            "--epochs",
            "1",
        ],
    );
    assert!(stderr.contains("--init e.csv"), "{stderr}");
    assert_eq!(
        std::fs::read(dir.join("model.plan.standardize.json")).unwrap(),
        saved
    );
}

#[test]
fn data_of_one_class_is_refused_when_the_widths_come_from_it() {
    let dir = scratch_dir("hostile-one-class");
    csv(&dir, "zeros.csv", Some("0"));
    let stderr = fails(&dir, &["train", "--data", "zeros.csv", "--batch", "4"]);
    assert!(stderr.contains("same class (0)"), "{stderr}");
    csv(&dir, "cats.csv", Some("cat"));
    let stderr = fails(&dir, &["train", "--data", "cats.csv", "--batch", "4"]);
    assert!(stderr.contains("same class (cat)"), "{stderr}");
    assert!(!dir.join("model.plan").exists());
}

#[test]
fn careless_csvs_are_errors_naming_the_row_or_column() {
    let dir = scratch_dir("hostile-csv");
    for (name, text, why) in [
        ("empty.csv", "", "no data rows"),
        ("header.csv", "a,b,label\n", "no data rows"),
        (
            "ragged.csv",
            "1,2,0\n3,4\n5,6,1\n",
            "row 2: expected 3 columns, found 2",
        ),
        (
            "nan.csv",
            "1,nan,0\n3,4,1\n",
            "row 1, column 2: feature \"nan\" is not finite",
        ),
        ("inf.csv", "1,-inf,0\n3,4,1\n", "is not finite"),
        (
            "text.csv",
            "a,b,label\n1,x,0\n3,4,1\n",
            "\"x\" is not a number",
        ),
    ] {
        std::fs::write(dir.join(name), text).unwrap();
        let stderr = fails(&dir, &["train", "--data", name, "--batch", "1"]);
        assert!(stderr.contains(why), "{name}: {stderr}");
    }
    csv(&dir, "d.csv", None);
    let stderr = fails(
        &dir,
        &[
            "train",
            "--data",
            "d.csv",
            "--target-columns",
            "7",
            "--batch",
            "1",
        ],
    );
    assert!(stderr.contains("target column \"7\""), "{stderr}");
    assert!(!dir.join("model.plan").exists());
}
