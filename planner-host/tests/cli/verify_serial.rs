//! `tapeplan verify --serial PORT|FILE --config RUN` (issue 14): a transcript read as it
//! streams, checked line by line against the host's retraining: a good stream (written while
//! the verifier reads it), a truncated one, a wrong `bind` field, a differing loss and a
//! differing state digest, each stopped with its reason and a non-zero exit.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use crate::common;

use std::io::Write as _;
use std::process::{Command, Stdio};

use common::{scratch_dir, tapeplan};
use tapeplan_planner::exec::transcript::oracle_transcript;
use tapeplan_planner::model::RunConfig;

/// Two epochs of four steps of a small MLP on the digits.
pub(crate) const RUN: &str =
    "model=64,8,10 activation=tanh loss=ce batch=4 lr=0.1 seed=42 split_seed=0 \
                   samples=16 epochs=2";

/// The transcript a correct device sends for [`RUN`].
pub(crate) fn good() -> String {
    oracle_transcript(&RunConfig::parse(RUN).unwrap()).unwrap()
}

/// `line` with its `index`-th field replaced by `field`, for the first line starting with
/// `prefix`.
fn replace_field(text: &str, prefix: &str, index: usize, field: &str) -> String {
    let mut done = false;
    text.lines()
        .map(|l| {
            if !done && l.starts_with(prefix) {
                done = true;
                let mut f: Vec<&str> = l.split(' ').collect();
                f[index] = field;
                f.join(" ") + "\n"
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

/// `tapeplan verify --serial uart.txt --config run.run` with an idle timeout of 1 s.
pub(crate) const SERIAL: [&str; 7] = [
    "verify",
    "--serial",
    "uart.txt",
    "--config",
    "run.run",
    "--idle-timeout-secs",
    "1",
];

/// Runs `tapeplan verify --serial FILE --config run.run` on `text` (idle timeout 1 s): answers
/// success, stdout and stderr.
fn serial(name: &str, text: &str) -> (bool, String, String) {
    let dir = scratch_dir(name);
    std::fs::write(dir.join("run.run"), RUN).unwrap();
    std::fs::write(dir.join("uart.txt"), text).unwrap();
    let out = tapeplan(&dir, &SERIAL);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `tapeplan verify --serial uart.txt --config run.run` (idle timeout 20 s) started in `dir`.
fn spawn_serial(dir: &std::path::Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_tapeplan"))
        .current_dir(dir)
        .args(["verify", "--serial", "uart.txt", "--config", "run.run"])
        .args(["--idle-timeout-secs", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_stream_written_while_it_is_read_verifies_with_the_whole_transcript_s_summary() {
    let text = good();
    assert!(text.contains("\nbind plan="), "{text}");
    assert_eq!(text.matches("\nstate ").count(), 8, "{text}");
    let dir = scratch_dir("serial-growing");
    std::fs::write(dir.join("run.run"), RUN).unwrap();
    let path = dir.join("uart.txt");
    std::fs::write(&path, b"").unwrap();
    let child = spawn_serial(&dir);
    // Boot noise, then the transcript in pieces that cut lines in two, as a UART delivers it.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(b"\x00boot noise\r\n").unwrap();
    for piece in text.as_bytes().chunks(37) {
        file.write_all(piece).unwrap();
        file.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("bitwise: 8/8 steps identical"), "{stdout}");
    assert!(
        stdout.contains("state digests: 8/8 steps identical"),
        "{stdout}"
    );
    assert!(
        stdout.contains("parameters: 610/610 elements bitwise identical"),
        "{stdout}"
    );
    // The same summary as verifying the whole file.
    std::fs::write(dir.join("whole.transcript"), &text).unwrap();
    let whole = common::ok(&dir, &["verify", "whole.transcript", "--config", "run.run"]);
    assert_eq!(stdout, whole);
}

/// A transcript file that does not exist yet (verify started before the device, e.g. before
/// QEMU creates its `-serial file:`) is waited for, then followed; one that never comes ends
/// at the idle timeout.
#[test]
fn a_file_not_yet_created_is_waited_for() {
    let dir = scratch_dir("serial-not-yet");
    std::fs::write(dir.join("run.run"), RUN).unwrap();
    let child = spawn_serial(&dir);
    std::thread::sleep(std::time::Duration::from_millis(300));
    std::fs::write(dir.join("uart.txt"), good()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("bitwise: 8/8 steps identical"), "{stdout}");

    let never = scratch_dir("serial-never");
    std::fs::write(never.join("run.run"), RUN).unwrap();
    let out = tapeplan(&never, &SERIAL);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("uart.txt"), "{stderr}");
}

#[test]
fn a_truncated_stream_fails_after_the_idle_timeout() {
    let text: String = good().lines().take(12).map(|l| format!("{l}\n")).collect();
    let (passed, _, stderr) = serial("serial-truncated", &text);
    assert!(!passed);
    assert!(
        stderr.contains("nothing for 1 s after line 12") && stderr.contains("truncated"),
        "{stderr}"
    );
}

#[test]
fn a_wrong_header_field_is_a_mismatch_naming_it() {
    let text = good();
    let bind = text.lines().find(|l| l.starts_with("bind ")).unwrap();
    let init = bind.split(' ').nth(3).unwrap();
    let wrong = replace_field(&text, "bind ", 3, "init=0000000000000001");
    let (passed, _, stderr) = serial("serial-bind-init", &wrong);
    assert!(!passed);
    assert!(
        stderr.contains("bind init (the initial parameters' digest)")
            && stderr.contains("0000000000000001")
            && stderr.contains(init.strip_prefix("init=").unwrap()),
        "{stderr}"
    );
    let wrong = replace_field(&text, "bind ", 4, "math=fast");
    let (passed, _, stderr) = serial("serial-bind-math", &wrong);
    assert!(!passed);
    assert!(stderr.contains("bind math (the math profile)"), "{stderr}");
    let wrong = replace_field(&text, "bind ", 1, "plan=00000000");
    let (passed, _, stderr) = serial("serial-bind-plan", &wrong);
    assert!(!passed);
    assert!(
        stderr.contains("bind plan (the plan's checksum)"),
        "{stderr}"
    );
}

#[test]
fn a_differing_step_stops_the_stream_at_its_step() {
    let text = good();
    // Step 3's loss, one bit off; nothing after it is read.
    let loss3 = text.lines().find(|l| l.starts_with("loss 3 ")).unwrap();
    let bits = u32::from_str_radix(loss3.split(' ').nth(2).unwrap(), 16).unwrap() ^ 1;
    let wrong = replace_field(&text, "loss 3 ", 2, &format!("{bits:08x}"));
    let (passed, stdout, stderr) = serial("serial-loss", &wrong);
    assert!(!passed);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("step 3 differs: loss: device"), "{stderr}");
    // Step 5's state digest: the loss agreed, the parameters after the step do not.
    let wrong = replace_field(&text, "state 5 ", 2, "0123456789abcdef");
    let (passed, _, stderr) = serial("serial-state", &wrong);
    assert!(!passed);
    assert!(
        stderr.contains(
            "step 5 differs: parameter digest after the step: device 0123456789abcdef vs oracle"
        ),
        "{stderr}"
    );
}
