//! # tapeplan-firmware
//!
//! What a device's own firmware depends on to train from a tapeplan plan, with no allocator
//! and no `unsafe`: the board supplies a link, a clock and a delay; this crate runs the
//! train-step protocol and writes the transcript `tapeplan verify` checks bit for bit.
//!
//! - [`train()`]: the train-step protocol. Validate the plan (selective build), bind it to the
//!   caller's arena, load the initial parameters, run the plan's `init` entry when it has one,
//!   and run `train_step` over the rows in the run protocol's epoch order
//!   ([`tapeplan_runtime::protocol::epoch_shuffle`]), one batch of consecutive rows a step.
//! - [`run_entry()`]: a plan's entry that is not training (a Hessian-vector product), run step
//!   after step on inputs from a seeded stream, the digest of its outputs sent after each step.
//! - [`link`]: the transcript ([`tapeplan_runtime::protocol`]'s format and writer) over any
//!   [`embedded_io::Write`](https://docs.rs/embedded-io/0.7/embedded_io/trait.Write.html) (a UART, an RTT channel, a USB CDC port), one write per line. Its
//!   `bind` line binds the run to the plan's checksum, the data digest, the initial
//!   parameters' digest and the math profile; its `state` lines give the parameters' digest
//!   after every step, so the host can check each step as it arrives
//!   (`tapeplan verify --serial`).
//! - [`board`]: the board boundary: [`board::Clock`] (a free-running tick counter) and
//!   [`board::ClockDelay`] (an [`embedded_hal::delay::DelayNs`](https://docs.rs/embedded-hal/1/embedded_hal/delay/trait.DelayNs.html) on it).
//! - [`checkpoint`]: [`CheckpointStore`], the training state in NOR flash in two slots over
//!   `sequential-storage`'s power-fail-safe map, in the host's checkpoint format: a power cut
//!   at any point of a save leaves the previous checkpoint or the new one, never a mix.
//!
//! `firmware-demo/` in the repository is a complete user: its boards (QEMU's and real ones),
//! their UARTs, the static arena and the entry point; `docs/porting-a-board.md` lists what a
//! new board changes.
//!
//! ```
//! use tapeplan_firmware::link::{LineLink, Transcript};
//!
//! // Any `embedded_io::Write` is a link; here a byte slice.
//! let mut buf = [0u8; 64];
//! let mut link = &mut buf[..];
//! let mut out: Transcript<'_, _, 64> = Transcript::new(LineLink::new(&mut link));
//! out.header()?;
//! out.state(1, 0x0979_a9ee_2da1_bb98)?;
//! assert!(buf.starts_with(b"tapeplan-transcript 1\nstate 1 0979a9ee2da1bb98\n"));
//! # Ok::<(), embedded_io::SliceWriteError>(())
//! ```
#![no_std]
#![forbid(unsafe_code)]

/// The log shim: forwards to `defmt` with the feature of that name, and to nothing without it.
macro_rules! info {
    ($($t:tt)*) => {
        #[cfg(feature = "defmt")]
        defmt::info!($($t)*);
    };
}

pub mod board;
pub mod checkpoint;
pub mod entry;
pub mod link;
pub mod train;

pub use board::{Clock, ClockDelay, CountingClock};
pub use checkpoint::{CheckpointStore, StoreError};
pub use entry::{run_entry, EntryRun};
#[cfg(feature = "rtt")]
pub use link::RttLink;
pub use link::{LineLink, Transcript};
pub use train::{train, train_resumable, Checkpoints, Failure, NoCheckpoints, Rows, Run, Summary};
