//! `tapeplan`: plan a model, describe a plan or tape, train from a plan through the `no_std`
//! runtime, and run the whole job end to end (`tapeplan demo`). This file holds the commands and
//! their dispatch; each command's work is in `cli/` and the library.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use cli::args::{MathArg, ModelArgs};
use cli::eval::EvalArgs;
use cli::train::TrainArgs;
use tapeplan_planner::io::exchange::Rename;

#[derive(Parser)]
#[command(
    name = "tapeplan",
    version,
    about = "Plan a differentiable computation into a static arena and train it with a no_std runtime, bitwise equal to the host oracle"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Plan a model into a .plan file: its forward pass, its recorded gradient and its
    /// optimizer's update (SGD, momentum, Nesterov, Adam or AdamW), as one static schedule.
    ///
    /// The model is an ONNX model's forward graph (--onnx) or the MLP the model options
    /// describe (--layers, --activation, --loss, --dropout); `describe` lists the plan and says
    /// what model it is, `train` trains it.
    Plan {
        #[command(flatten)]
        model: ModelArgs,
        /// Where to write the plan.
        #[arg(short, long, default_value = "model.plan")]
        output: PathBuf,
    },
    /// List a .plan file (what model it is, its entries, instructions and bindings), or a
    /// model's recorded tape with --tape.
    Describe {
        /// The plan to list.
        plan: Option<PathBuf>,
        /// List the recorded tape of the model given by the model options instead.
        #[arg(long)]
        tape: bool,
        /// With --tape: run the tape once in f32 and once in f64 (the same kernels over another
        /// element) on a batch of the digits data (or seeded random inputs for other widths)
        /// and report every node's rounding error, max absolute and relative.
        #[arg(long, requires = "tape")]
        error_report: bool,
        #[command(flatten)]
        model: ModelArgs,
    },
    /// Train a plan (classification or regression, any optimizer) through the no_std runtime,
    /// on the bundled digits or a CSV data set; without a plan, plan the model options first.
    Train(Box<TrainArgs>),
    /// Evaluate parameters without training: run a plan's forward entry over every row of a
    /// data set's split (the held-out test split `train` reports on, by default) and report
    /// accuracy and mean cross-entropy (classification) or MSE and MAE (regression).
    ///
    /// The parameters come from a checkpoint, a safetensors file under the plan's names, or the
    /// final `param` lines of a device's transcript; `--json` prints one JSON object.
    Eval(Box<EvalArgs>),
    /// Convert a checkpoint's model parameters and buffers to a safetensors file under their
    /// plan (PyTorch state_dict) names; the --layers MLP's with nn.Sequential names and layouts
    /// (`w1 -> 0.weight` transposed, `b1 -> 0.bias`, ...).
    ///
    /// With --transcript, the final parameters a device sent at the end of its training
    /// transcript (its `param` lines, checked against its `digest` line) instead.
    #[command(group(clap::ArgGroup::new("source").required(true).args(["checkpoint", "transcript"])))]
    Export {
        /// The plan the checkpoint (or the device's run) belongs to.
        plan: PathBuf,
        /// The checkpoint (from `tapeplan train --checkpoint` or `tapeplan import`).
        #[arg(long)]
        checkpoint: Option<PathBuf>,
        /// A device's training transcript (`tapeplan verify`'s input; `-` for standard
        /// input): export the final parameters it holds.
        #[arg(long, value_name = "FILE")]
        transcript: Option<PathBuf>,
        /// Where to write the safetensors file.
        #[arg(short, long, default_value = "model.safetensors")]
        output: PathBuf,
        /// Rename keys on the way out, FROM=TO (repeatable): a key equal to FROM, or starting
        /// with FROM followed by `.`, gets TO in its place (`features=backbone`).
        #[arg(long, value_name = "FROM=TO")]
        rename: Vec<Rename>,
    },
    /// Convert a safetensors file (the plan's names, or for the --layers MLP PyTorch's
    /// nn.Sequential of nn.Linear names and layouts) into a checkpoint of a plan, to train from
    /// with `tapeplan train --resume`.
    Import {
        /// The safetensors file.
        safetensors: PathBuf,
        /// The plan whose parameters it holds.
        plan: PathBuf,
        /// Keep the rest of the training state (optimizer state, step, epoch count) from this
        /// checkpoint of the same plan; without it that state is the plan's initial state.
        #[arg(long)]
        base: Option<PathBuf>,
        /// Where to write the checkpoint.
        #[arg(short, long, default_value = "model.ckpt")]
        output: PathBuf,
        /// Rename the file's keys to the plan's, FROM=TO (repeatable): a key equal to FROM, or
        /// starting with FROM followed by `.`, gets TO in its place (`backbone=features`).
        #[arg(long, value_name = "FROM=TO")]
        rename: Vec<Rename>,
    },
    /// The main job end to end: plan the digits MLP, train it through the runtime, check every
    /// step bit for bit against the oracle, report test accuracy.
    Demo {
        /// Epochs over the training split.
        #[arg(long, default_value_t = 10)]
        epochs: usize,
        /// Seed of the initialization and the per-epoch shuffles.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Math profile of the transcendental kernels (see `plan --help`).
        #[arg(long, value_enum, default_value_t = MathArg::Precise)]
        math: MathArg,
    },
    /// Write a plan as a Rust module for firmware: its bytes as an aligned static, the arena
    /// size and plan id as constants, and per entry typed accessors of its inputs and outputs
    /// (add it to the firmware's crate as `mod plan;`; it uses the tapeplan-runtime crate).
    Emit {
        /// The plan.
        plan: PathBuf,
        /// Where to write the module.
        #[arg(short, long, default_value = "plan.rs")]
        output: PathBuf,
    },
    /// Print the digest a run description pins a file with (FNV-1a 64 of its bytes), under the
    /// key its kind takes: `plan_digest` for a plan (with its plan id), `init_digest` for a
    /// safetensors file, `data_digest` for anything else (a CSV); each line is `KEY=PATH
    /// KEY_digest=HEX`, ready to paste into a run description.
    Digest {
        /// The files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Check a device's training transcript bit for bit against the host oracle (format:
    /// `tapeplan_planner::exec::transcript`), or for a `plan=` run against the plan replayed
    /// with the reference kernels; exits non-zero on any difference.
    ///
    /// With `--serial PORT|FILE` (and `--config`), the transcript is read as it streams, from a
    /// serial port (a tty, at `--baud`) or a file another program is writing (QEMU's `-serial
    /// file:PATH`, a FIFO): the header is checked as it arrives, and every step's loss and
    /// state digest, stopping at the first difference with its step; `end ok` ends with the same
    /// summary as a whole transcript's.
    Verify {
        /// The transcript the device sent (`-` for standard input).
        #[arg(required_unless_present = "serial", conflicts_with = "serial")]
        transcript: Option<PathBuf>,
        /// The run the device was meant to do (a run description file, e.g.
        /// firmware-demo/models/demo.run); without it, the transcript's own `config` is used.
        /// Required with `--serial`.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Read the transcript as it streams from this serial port or growing file.
        #[arg(long, value_name = "PORT|FILE")]
        serial: Option<PathBuf>,
        /// The serial port's baud rate (a tty only).
        #[arg(long, default_value_t = 115_200, requires = "serial")]
        baud: u32,
        /// Give up when the stream sends nothing for this many seconds.
        #[arg(long, default_value_t = 60, requires = "serial")]
        idle_timeout_secs: u64,
    },
}

/// The exit status of a command whose standard output was closed early (`tapeplan … | head`):
/// 128 + SIGPIPE, what a shell reports for a program that the signal stopped.
const BROKEN_PIPE_EXIT: u8 = 141;

/// True when `message` is the standard library's report of a failed print to a closed pipe.
fn is_broken_pipe_panic(message: &str) -> bool {
    message.starts_with("failed printing to std") && message.contains("Broken pipe")
}

/// Makes a print to a closed standard output (`println!` panics on `EPIPE`, since Rust ignores
/// SIGPIPE) end the program quietly with [`BROKEN_PIPE_EXIT`] instead of a panic message.
fn exit_quietly_on_broken_pipe() {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if is_broken_pipe_panic(message) {
            std::process::exit(i32::from(BROKEN_PIPE_EXIT));
        }
        default_hook(info);
    }));
}

/// The long names of the model options given on the command line of subcommand `matches`.
fn given_model_options(matches: &ArgMatches) -> Vec<String> {
    ModelArgs::augment_args(clap::Command::new("model"))
        .get_arguments()
        .filter(|a| {
            matches.value_source(a.get_id().as_str())
                == Some(clap::parser::ValueSource::CommandLine)
        })
        .map(|a| format!("--{}", a.get_long().unwrap_or(a.get_id().as_str())))
        .collect()
}

/// The parsed command line, with `train`'s explicitly given model options recorded.
fn parse() -> Cli {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let (Command::Train(args), Some(sub)) =
        (&mut cli.command, matches.subcommand_matches("train"))
    {
        args.given_model_options = given_model_options(sub);
    }
    cli
}

fn main() -> ExitCode {
    exit_quietly_on_broken_pipe();
    match run(parse()) {
        Ok(code) => code,
        // An output pipe closed early (a write that reports the error instead of panicking).
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::from(BROKEN_PIPE_EXIT)
        }
        Err(e) => {
            // Each cause once: some errors already quote their source in their own message.
            let mut msg = e.to_string();
            for cause in e.chain().skip(1) {
                let c = cause.to_string();
                if !msg.contains(&c) {
                    msg.push_str(": ");
                    msg.push_str(&c);
                }
            }
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Plan { model, output } => cli::plan::plan(&model, &output),
        Command::Describe {
            plan,
            tape,
            error_report,
            model,
        } => cli::describe::describe(plan, tape, error_report, &model),
        Command::Train(args) => cli::train::train(*args),
        Command::Eval(args) => cli::eval::eval(*args),
        Command::Export {
            plan,
            checkpoint,
            transcript,
            output,
            rename,
        } => {
            let from = match (checkpoint, transcript) {
                (Some(c), _) => cli::exchange::From::Checkpoint(c),
                (None, Some(t)) => cli::exchange::From::Transcript(t),
                (None, None) => bail!("give --checkpoint CKPT or --transcript FILE"),
            };
            cli::exchange::export(&plan, &from, &output, &rename)
        }
        Command::Import {
            safetensors,
            plan,
            base,
            output,
            rename,
        } => cli::exchange::import(&safetensors, &plan, base.as_deref(), &output, &rename),
        Command::Demo { epochs, seed, math } => {
            if epochs == 0 {
                bail!("--epochs must be at least 1");
            }
            cli::demo::demo(epochs, seed, math)
        }
        Command::Verify {
            transcript,
            config,
            serial,
            baud,
            idle_timeout_secs,
        } => match (serial, transcript) {
            (Some(port), _) => {
                let Some(config) = config else {
                    bail!("--serial needs --config RUN: the run the device was meant to do");
                };
                cli::verify::verify_serial(&port, &config, baud, idle_timeout_secs)
            }
            (None, Some(transcript)) => cli::verify::verify(&transcript, config.as_deref()),
            (None, None) => bail!("give a TRANSCRIPT or --serial PORT|FILE"),
        },
        Command::Emit { plan, output } => cli::emit::emit(&plan, &output),
        Command::Digest { files } => cli::verify::digest(&files),
    }
}
