//! `tapeplan verify` and `verify --serial` handed hostile transcripts and run descriptions:
//! lines cut, over-long, binary or not UTF-8, a `bind` header for another run, steps out of
//! order, repeated or skipped, digests of the wrong width, NaN losses, `end error`, a FIFO
//! nobody writes, and runs absurdly long. Each ends with a clear error and a non-zero exit,
//! promptly, and never with a panic.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::verify_serial::{good, RUN, SERIAL};
use common::{scratch_dir, tapeplan};
use tapeplan_planner::exec::transcript::oracle_transcript;
use tapeplan_planner::model::RunConfig;

/// The first `n` lines of `text`, each with its newline.
fn head(text: &str, n: usize) -> String {
    text.lines().take(n).map(|l| format!("{l}\n")).collect()
}

/// The number of the first line of `text` starting with `prefix` (1-based).
fn line_of(text: &str, prefix: &str) -> usize {
    text.lines().position(|l| l.starts_with(prefix)).unwrap() + 1
}

/// `text` with the first line starting with `prefix` replaced by `with` (several lines, or
/// none, allowed).
fn replace_line(text: &str, prefix: &str, with: &str) -> String {
    let at = line_of(text, prefix);
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            if i + 1 == at {
                with.to_string()
            } else {
                format!("{l}\n")
            }
        })
        .collect()
}

/// An output that must be a failure without a panic; answers its standard error.
fn failed(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success(),
        "succeeded: {}\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// `tapeplan verify --serial uart.txt --config run.run` over `bytes` (idle timeout 1 s) and
/// `tapeplan verify whole.transcript --config run.run` over the same bytes: both must fail
/// without a panic; answers their standard errors.
fn both(name: &str, run: &str, bytes: &[u8]) -> (String, String) {
    let dir = scratch_dir(name);
    std::fs::write(dir.join("run.run"), run).unwrap();
    std::fs::write(dir.join("uart.txt"), bytes).unwrap();
    let serial = tapeplan(&dir, &SERIAL);
    let whole = tapeplan(&dir, &["verify", "uart.txt", "--config", "run.run"]);
    (failed(&serial), failed(&whole))
}

#[test]
fn a_transcript_cut_in_the_middle_of_a_line_is_truncated() {
    let text = good();
    let at = text.find("\nloss 3 ").unwrap() + 7;
    let (serial, whole) = both("hostile-cut", RUN, &text.as_bytes()[..at]);
    let last = line_of(&text, "loss 3 ") - 1;
    assert!(
        serial.contains(&format!("after line {last} (2 steps checked)"))
            && serial.contains("truncated"),
        "{serial}"
    );
    // The whole file's last line is `loss 3`, without its bits.
    assert!(whole.contains("expected `loss <n> <hex8>`"), "{whole}");
}

#[test]
fn a_transcript_without_end_is_truncated_and_end_error_is_the_device_s_error() {
    let text = good();
    let no_end = replace_line(&text, "end ok", "");
    let (serial, whole) = both("hostile-no-end", RUN, no_end.as_bytes());
    assert!(serial.contains("truncated"), "{serial}");
    assert!(
        whole.contains("no `end ok` line: the transcript is truncated"),
        "{whole}"
    );
    let error = replace_line(&text, "end ok", "end error arena too small (7 < 9)\n");
    let (serial, whole) = both("hostile-end-error", RUN, error.as_bytes());
    for e in [serial, whole] {
        assert!(
            e.contains("the device reported an error: arena too small (7 < 9)"),
            "{e}"
        );
    }
}

#[test]
fn a_ten_megabyte_line_binary_garbage_and_invalid_utf8_are_errors_naming_the_line() {
    let text = good();
    let n = line_of(&text, "loss 1 ");
    // 10 MB without a newline, after the header: the stream goes idle.
    let mut long = head(&text, n - 1).into_bytes();
    long.extend(std::iter::repeat_n(b'a', 10 << 20));
    let t0 = Instant::now();
    let (serial, whole) = both("hostile-long-line", RUN, &long);
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
    assert!(
        serial.contains(&format!("after line {}", n - 1)) && serial.contains("truncated"),
        "{serial}"
    );
    assert!(
        whole.contains(&format!("transcript line {n}: unknown record")),
        "{}",
        &whole[..whole.len().min(300)]
    );
    assert!(whole.len() < 4096, "the error repeats the line whole");
    // 65 MiB without a newline, as noise that never pauses would send: refused at 64 MiB,
    // before the idle timeout.
    let mut noise = head(&text, n - 1).into_bytes();
    noise.extend(std::iter::repeat_n(b'\xaa', 65 << 20));
    let dir = scratch_dir("hostile-noise");
    std::fs::write(dir.join("run.run"), RUN).unwrap();
    std::fs::write(dir.join("uart.txt"), &noise).unwrap();
    drop(noise);
    let mut args = SERIAL;
    args[6] = "600";
    let stderr = failed(&within(&dir, &args, Duration::from_secs(120)));
    assert!(
        stderr.contains(&format!(
            "uart.txt line {n}: more than 64 MiB without a newline"
        )),
        "{stderr}"
    );
    // Binary garbage (a fixed pseudo-random stream with newlines) in place of step 1.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let garbage: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let mut bytes = head(&text, n - 1).into_bytes();
    bytes.extend_from_slice(&garbage);
    bytes.extend_from_slice(text.split_once("\nloss 1 ").unwrap().1.as_bytes());
    let (serial, whole) = both("hostile-garbage", RUN, &bytes);
    assert!(serial.contains("uart.txt line"), "{serial}");
    assert!(
        whole.contains("stream did not contain valid UTF-8") || whole.contains("transcript line"),
        "{whole}"
    );
    // A `loss` line with a byte that is not UTF-8.
    let bad = replace_line(&text, "loss 2 ", "loss 2 3f\u{80}00000\n")
        .into_bytes()
        .into_iter()
        .map(|b| if b == 0xc2 { 0xff } else { b })
        .collect::<Vec<u8>>();
    let (serial, whole) = both("hostile-utf8", RUN, &bad);
    let m = line_of(&text, "loss 2 ");
    assert!(serial.contains(&format!("uart.txt line {m}")), "{serial}");
    assert!(serial.contains("bits"), "{serial}");
    assert!(
        whole.contains("uart.txt") && whole.contains("valid UTF-8"),
        "{whole}"
    );
}

#[test]
fn a_bind_header_of_another_plan_data_or_init_is_a_mismatch() {
    let text = good();
    let bind = text.lines().find(|l| l.starts_with("bind ")).unwrap();
    for (i, field, name) in [
        (1, "plan=deadbeef", "bind plan"),
        (2, "data=0123456789abcdef", "bind data"),
        (3, "init=0123456789abcdef", "bind init"),
    ] {
        let mut f: Vec<&str> = bind.split(' ').collect();
        f[i] = field;
        let wrong = replace_line(&text, "bind ", &(f.join(" ") + "\n"));
        let (serial, whole) = both("hostile-bind", RUN, wrong.as_bytes());
        for e in [serial, whole] {
            assert!(e.contains(name) && e.contains("the device's is"), "{e}");
        }
    }
    // Another run's whole transcript: its `config` line is refused at once.
    let other =
        oracle_transcript(&RunConfig::parse(&RUN.replace("seed=42", "seed=7")).unwrap()).unwrap();
    let (serial, whole) = both("hostile-other-run", RUN, other.as_bytes());
    for e in [serial, whole] {
        assert!(e.contains("seed=7") && e.contains("expected"), "{e}");
    }
}

#[test]
fn steps_out_of_order_repeated_or_skipped_and_digests_of_the_wrong_width_are_refused() {
    let text = good();
    let loss2 = text.lines().find(|l| l.starts_with("loss 2 ")).unwrap();
    let state2 = text.lines().find(|l| l.starts_with("state 2 ")).unwrap();
    let loss3 = text.lines().find(|l| l.starts_with("loss 3 ")).unwrap();
    let cases = [
        // Skipped: step 2's lines dropped.
        (
            replace_line(&replace_line(&text, "loss 2 ", ""), "state 2 ", ""),
            "loss 3 out of order: expected 2",
        ),
        // Repeated: step 2 twice.
        (
            replace_line(&text, "state 2 ", &format!("{state2}\n{loss2}\n")),
            "loss 2 out of order: expected 3",
        ),
        // Out of order: step 3 before step 2.
        (
            replace_line(&text, "loss 2 ", &format!("{loss3}\n")),
            "loss 3 out of order: expected 2",
        ),
        // A state line before its step's loss.
        (
            replace_line(&text, "loss 2 ", ""),
            "state 2 out of order: expected 2 (after `loss 2`)",
        ),
        // Step 0.
        (
            replace_line(&text, "loss 1 ", "loss 0 3f800000\n"),
            "loss 0 out of order: expected 1",
        ),
        // 15 and 17 hex digits.
        (
            replace_line(&text, "state 2 ", "state 2 0123456789abcde\n"),
            "state digest \"0123456789abcde\"",
        ),
        (
            replace_line(&text, "state 2 ", "state 2 0123456789abcdef0\n"),
            "state digest \"0123456789abcdef0\"",
        ),
        // A sign where a hex digit belongs.
        (
            replace_line(&text, "state 2 ", "state 2 +123456789abcdef\n"),
            "state digest \"+123456789abcdef\"",
        ),
    ];
    for (i, (bytes, why)) in cases.iter().enumerate() {
        let (serial, whole) = both(&format!("hostile-order-{i}"), RUN, bytes.as_bytes());
        assert!(serial.contains(why), "case {i}: {serial}");
        assert!(whole.contains(why), "case {i}: {whole}");
    }
}

#[test]
fn a_nan_loss_differs_from_the_oracle_s_finite_loss() {
    let text = good();
    let nan = replace_line(&text, "loss 2 ", "loss 2 7fc00000\n");
    let (serial, _) = both("hostile-nan", RUN, nan.as_bytes());
    assert!(
        serial.contains("step 2 differs: loss: device 0x7fc00000 (NaN)"),
        "{serial}"
    );
    // The whole file: a report with the first differing step, and a failure exit.
    let dir = scratch_dir("hostile-nan-whole");
    std::fs::write(dir.join("run.run"), RUN).unwrap();
    std::fs::write(dir.join("t.txt"), &nan).unwrap();
    let out = tapeplan(&dir, &["verify", "t.txt", "--config", "run.run"]);
    failed(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("7/8 steps identical"), "{stdout}");
}

/// Spawns `tapeplan args` in `dir` and waits at most `limit`; answers the output, or kills it
/// and fails the test when it runs longer.
fn within(dir: &Path, args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tapeplan"))
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!(
                "tapeplan {args:?} still running after {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_fifo_nobody_writes_ends_at_the_idle_timeout() {
    let dir = scratch_dir("hostile-fifo");
    std::fs::write(dir.join("run.run"), RUN).unwrap();
    let made = Command::new("mkfifo")
        .arg(dir.join("uart.fifo"))
        .status()
        .unwrap();
    assert!(made.success());
    let mut args = SERIAL;
    args[2] = "uart.fifo";
    let out = within(&dir, &args, Duration::from_secs(30));
    let stderr = failed(&out);
    assert!(
        stderr.contains("uart.fifo: nothing for 1 s after line 0") && stderr.contains("truncated"),
        "{stderr}"
    );
}

#[test]
fn an_absurdly_long_run_is_not_retrained_before_the_stream_is_read() {
    // 2^24 epochs of 4 steps: accepted as a run (the caps are 2^24 epochs, 2^32 steps), hours
    // of retraining on the host. The stream is read while the host retrains: another run's
    // `config` line, a silent stream, or a transcript whose step count cannot be the run's
    // end at once.
    let absurd = RUN.replace("epochs=2", "epochs=16777216");
    assert_eq!(RunConfig::parse(&absurd).unwrap().total_steps(), 1 << 26);
    let dir = scratch_dir("hostile-absurd");
    std::fs::write(dir.join("run.run"), &absurd).unwrap();
    std::fs::write(dir.join("uart.txt"), good()).unwrap();
    let serial = SERIAL;
    let limit = Duration::from_secs(30);
    let stderr = failed(&within(&dir, &serial, limit));
    assert!(
        stderr.contains("the device runs `") && stderr.contains("epochs=16777216"),
        "{stderr}"
    );
    std::fs::write(dir.join("uart.txt"), b"").unwrap();
    let stderr = failed(&within(&dir, &serial, limit));
    assert!(stderr.contains("nothing for 1 s after line 0"), "{stderr}");
    // The whole transcript of the absurd run, cut after two steps: refused by its count.
    let text = good().replace("epochs=2", "epochs=16777216");
    let n = line_of(&text, "loss 3 ");
    let mut cut = head(&text, n - 1);
    cut.push_str("end ok\n");
    std::fs::write(dir.join("t.txt"), &cut).unwrap();
    let whole = ["verify", "t.txt", "--config", "run.run"];
    let stderr = failed(&within(&dir, &whole, limit));
    assert!(
        stderr.contains("2 loss lines for a run of 67108864 steps"),
        "{stderr}"
    );
    // The same as a stream: its `end ok` does not wait hours for the host's retraining.
    std::fs::write(dir.join("uart.txt"), &cut).unwrap();
    let stderr = failed(&within(&dir, &serial, limit));
    assert!(
        stderr.contains("2 loss lines for a run of 67108864 steps"),
        "{stderr}"
    );
}

#[test]
fn a_run_description_naming_a_device_file_is_refused_as_the_run_s_error() {
    // The host retrains on another thread: its refusal names the run description, not a line.
    let dir = scratch_dir("hostile-dev-zero");
    let run = format!("{RUN} data=/dev/zero data_digest=0000000000000000");
    std::fs::write(dir.join("run.run"), run).unwrap();
    // A silent stream: the refusal comes before its idle timeout.
    std::fs::write(dir.join("uart.txt"), b"").unwrap();
    let stderr = failed(&within(&dir, &SERIAL, Duration::from_secs(30)));
    assert!(
        stderr.contains("the host's retraining of run.run: /dev/zero: not a regular file"),
        "{stderr}"
    );
}

#[test]
fn a_run_of_2_pow_32_steps_does_not_reserve_its_digests_up_front() {
    // Inside the caps (2^32 steps); reserving a digest per step up front asked for 32 GiB and
    // aborted the process ("memory allocation of 34359738368 bytes failed", exit 134).
    let run = RUN
        .replace("batch=4", "batch=1")
        .replace("samples=16", "samples=1024")
        .replace("epochs=2", "epochs=4194304");
    assert_eq!(RunConfig::parse(&run).unwrap().total_steps(), 1 << 32);
    let dir = scratch_dir("hostile-2-pow-32");
    std::fs::write(dir.join("run.run"), &run).unwrap();
    std::fs::write(dir.join("uart.txt"), b"").unwrap();
    let out = within(&dir, &SERIAL, Duration::from_secs(30));
    let stderr = failed(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("nothing for 1 s after line 0") && stderr.contains("still retraining"),
        "{stderr}"
    );
}
