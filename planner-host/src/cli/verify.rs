//! `tapeplan verify TRANSCRIPT [--config RUN]`: a device's training transcript against the host
//! oracle, bit for bit; `tapeplan verify --serial PORT|FILE --config RUN`: the same as the
//! transcript streams, step by step; and `tapeplan digest FILE…`, the digests a run description pins its
//! files with.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use tapeplan_planner::exec::report::Report;
use tapeplan_planner::exec::transcript::Transcript;
use tapeplan_planner::exec::verify::{verify as verify_run, StreamVerifier, VerifyError};
use tapeplan_planner::model::run::{file_digest, FileKind};
use tapeplan_planner::model::RunConfig;

/// Reads the transcript (`-` for standard input) and the optional run description, verifies,
/// and prints the report. Answers [`ExitCode::FAILURE`] when a bit differs.
///
/// # Errors
/// Unreadable files, and every error of [`Transcript::parse`] and [`verify_run`].
pub fn verify(transcript: &Path, config: Option<&Path>) -> Result<ExitCode> {
    let read = |path: &Path| {
        let r = if path.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin())
        } else {
            std::fs::read_to_string(path)
        };
        r.with_context(|| format!("cannot read {}", path.display()))
    };
    // The run description's relative paths are relative to its folder; so are those of the
    // device's `config` line (its description's, as written) when one is given.
    let text = read(transcript)?;
    let expected = config.map(run_file).transpose()?;
    let t = match (&expected, config) {
        (Some(e), Some(c)) => {
            Transcript::parse_against(&text, c.parent().unwrap_or(Path::new("")), e)?
        }
        _ => Transcript::parse(&text).map_err(|e| {
            let missing = matches!(&e, VerifyError::Transcript { message, .. }
                if message.contains("No such file"));
            let e = anyhow::Error::from(e);
            if missing {
                // A device sends its run description's paths as written: relative to the
                // description's folder, which only --config says.
                e.context(
                    "without --config the transcript's config line is read from the current                      folder; give --config RUN (the run description the device ran) to read                      its files from RUN's folder",
                )
            } else {
                e
            }
        })?,
    };
    let report = verify_run(&t, expected.as_ref())?;
    Ok(show(&report))
}

/// The run description in file `path` (`-`: standard input, relative to the current folder),
/// its relative paths read from its folder ([`RunConfig::from_file`]).
///
/// # Errors
/// An unreadable file; as [`RunConfig::parse`].
fn run_file(path: &Path) -> Result<RunConfig> {
    if path.as_os_str() == "-" {
        let text = std::io::read_to_string(std::io::stdin())
            .with_context(|| format!("cannot read {}", path.display()))?;
        return Ok(RunConfig::parse(&text)?);
    }
    if let Err(e) = std::fs::metadata(path) {
        return Err(e).with_context(|| format!("cannot read {}", path.display()));
    }
    Ok(RunConfig::from_file(path)?)
}

/// Prints a report as `tapeplan verify` does; answers the exit code.
fn show(report: &Report) -> ExitCode {
    println!(
        "verify: {} ({} steps) from {}",
        report.config,
        report.steps,
        report.target.as_deref().unwrap_or("an unnamed target")
    );
    println!("{report}");
    if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// How long to wait for more bytes before reading again.
const POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// The longest line a stream may send (the writers put 8 values on a `param` line; a stream
/// of bytes without a newline, noise at the wrong baud rate, would otherwise grow without end).
const MAX_LINE_BYTES: usize = 64 << 20;

/// `tapeplan verify --serial PORT|FILE --config RUN`: reads the transcript line by line as it
/// arrives, from a serial port (a character device, opened with the `serialport` crate at
/// `baud`, 8N1) or a file or FIFO another program writes (read past its end as it grows), while
/// the host retrains the run on another thread ([`StreamVerifier::spawn`]). Checks every line
/// as it comes, against the host's retraining once it has it, and stops at the first
/// difference; answers the report after `end ok`.
///
/// The source is opened and read on its own thread, so a FIFO no program opens for writing
/// ends at the idle timeout like a silent port.
///
/// # Errors
/// An unreadable port or file, a stream idle for `idle_timeout_secs` before its `end` line (a
/// truncated transcript), and every error of [`StreamVerifier::line`] (the first differing step
/// among them).
pub fn verify_serial(
    port: &Path,
    config: &Path,
    baud: u32,
    idle_timeout_secs: u64,
) -> Result<ExitCode> {
    let expected = run_file(config)?;
    let mut verifier =
        StreamVerifier::spawn(&expected).relative_to(config.parent().unwrap_or(Path::new("")));
    eprintln!(
        "verify --serial: retraining `{expected}` ({} steps) on the host; reading {}",
        expected.total_steps(),
        port.display()
    );
    let bytes = read_in_background(port, baud)?;
    // Where an error is: a line of the stream, or the run description the host retrains.
    let place = |v: &StreamVerifier| match v.line_checked() {
        0 => format!("the host's retraining of {}", config.display()),
        n => format!("{} line {n}", port.display()),
    };
    let idle = std::time::Duration::from_secs(idle_timeout_secs);
    let mut last_byte = std::time::Instant::now();
    let mut pending: Vec<u8> = Vec::new();
    // `pending[..scanned]` holds no newline.
    let mut scanned = 0;
    let mut line_no = 0usize;
    loop {
        let chunk = match bytes.recv_timeout(POLL) {
            Ok(Ok(chunk)) => chunk,
            Ok(Err(e)) => return Err(e),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Vec::new(),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                bail!("{}: the reader stopped", port.display())
            }
        };
        if let Some(report) = verifier.poll().with_context(|| place(&verifier))? {
            return Ok(show(&report));
        }
        if chunk.is_empty() {
            if last_byte.elapsed() >= idle {
                bail!(
                    "{}: nothing for {idle_timeout_secs} s after line {line_no} ({} steps checked{}), and no `end` line: the transcript is truncated",
                    port.display(),
                    verifier.steps_checked(),
                    if verifier.host_ready() { "" } else { "; the host is still retraining" }
                );
            }
            continue;
        }
        last_byte = std::time::Instant::now();
        pending.extend_from_slice(&chunk);
        while let Some(at) = pending[scanned..].iter().position(|&b| b == b'\n') {
            let end = scanned + at;
            let line: Vec<u8> = pending.drain(..=end).collect();
            scanned = 0;
            line_no += 1;
            let text = String::from_utf8_lossy(&line[..end]);
            match verifier.line(line_no, &text) {
                Ok(None) => {}
                Ok(Some(report)) => return Ok(show(&report)),
                Err(e) => return Err(e).with_context(|| place(&verifier)),
            }
        }
        scanned = pending.len();
        if pending.len() > MAX_LINE_BYTES {
            bail!(
                "{} line {}: more than {} MiB without a newline: not a transcript (noise on the line, or the wrong baud rate?)",
                port.display(),
                line_no + 1,
                MAX_LINE_BYTES >> 20
            );
        }
    }
}

/// Opens `port` (a tty at `baud`, or a file or FIFO followed as it grows) and reads it on a new
/// thread; answers the channel its bytes come through (an error ends it). The thread ends when
/// the receiver is dropped.
///
/// # Errors
/// A path whose metadata cannot be read for another reason than its absence (a path that does
/// not exist yet is waited for, as a transcript file the device has yet to create).
fn read_in_background(
    port: &Path,
    baud: u32,
) -> Result<std::sync::mpsc::Receiver<Result<Vec<u8>>>> {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;

    // A transcript file the device (QEMU's `-serial file:`) has not created yet: wait for it
    // (the idle timeout ends a wait for a file that never comes).
    let meta = match std::fs::metadata(port) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot open {}", port.display())),
    };
    let is_tty = meta.is_some_and(|m| m.file_type().is_char_device());
    let (tx, rx) = std::sync::mpsc::channel::<Result<Vec<u8>>>();
    let port = port.to_path_buf();
    std::thread::spawn(move || {
        // Opening a FIFO waits for a writer: here, not in the loop that keeps the timeout.
        let open = || -> Result<Box<dyn Read>> {
            Ok(if is_tty {
                let name = port.to_str().context("the port's path is not UTF-8")?;
                Box::new(
                    serialport::new(name, baud)
                        .timeout(POLL)
                        .open()
                        .with_context(|| {
                            format!("cannot open serial port {name} at {baud} baud")
                        })?,
                )
            } else {
                while !port.exists() {
                    std::thread::sleep(POLL);
                }
                Box::new(
                    std::fs::File::open(&port)
                        .with_context(|| format!("cannot open {}", port.display()))?,
                )
            })
        };
        let mut source = match open() {
            Ok(s) => s,
            Err(e) => {
                let _ = tx.send(Err(e));
                return;
            }
        };
        let mut buf = [0u8; 4096];
        loop {
            let n = match source.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => 0,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => 0,
                Err(e) => {
                    let e = Err(e).with_context(|| format!("reading {}", port.display()));
                    let _ = tx.send(e);
                    return;
                }
            };
            if n == 0 {
                // The end of a file (for now): it may grow.
                std::thread::sleep(POLL);
                continue;
            }
            if tx.send(Ok(buf[..n].to_vec())).is_err() {
                return;
            }
        }
    });
    Ok(rx)
}

/// `tapeplan digest FILE…`: one line per file, `KEY=PATH KEY_digest=HEX` with the key its
/// kind takes in a run description (`plan`, `init` or `data`; [`FileKind::of`]), and a plan's
/// id.
///
/// # Errors
/// An unreadable file.
pub fn digest(files: &[std::path::PathBuf]) -> Result<ExitCode> {
    for path in files {
        // A run description names regular files; a FIFO would wait for a writer, a device never end.
        let meta =
            std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        if !meta.is_file() {
            bail!(
                "{}: not a regular file (a run description pins regular files only)",
                path.display()
            );
        }
        let bytes = super::read(path)?;
        let kind = FileKind::of(&bytes);
        let id = match kind {
            FileKind::Plan { plan_id } => format!("  # plan id {plan_id:08x}"),
            _ => String::new(),
        };
        println!(
            "{key}={} {key}_digest={:016x}{id}",
            path.display(),
            file_digest(&bytes),
            key = kind.key()
        );
    }
    Ok(ExitCode::SUCCESS)
}
