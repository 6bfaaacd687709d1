//! # tapeplan-firmware-demo
//!
//! Trains the digits MLP on a Cortex-M from a static plan, with no allocator, and sends the
//! bits `tapeplan verify` checks against the host oracle. See README.md.
//!
//! - [`trainer`]: the training run, independent of the board;
//! - [`board`]: the board boundary (traits) and its QEMU implementations;
//! - [`rt`]: the entry point, exceptions and the static arena (the only `unsafe`).
#![no_std]
#![no_main]

// Links the critical-section implementation defmt-semihosting needs.
use cortex_m as _;
use defmt_semihosting as _;

#[cfg(feature = "size-baseline")]
pub mod baseline;
pub mod board;
pub mod rows;
pub mod rt;
pub mod trainer;

/// What build.rs generated from the run description: the plan, data, initial parameters and
/// their sizes.
#[allow(missing_docs, clippy::all)]
pub mod gen {
    include!(concat!(env!("OUT_DIR"), "/generated.rs"));
}

use board::{ClockDelay, SemihostingLink, SysTickClock};
use trainer::{LineLink, Transcript};

/// Epoch pause under QEMU: none.
const PAUSE_MS: u32 = 0;

/// Exit statuses (semihosting `SYS_EXIT`; QEMU exits with them).
const EXIT_OK: i32 = 0;
const EXIT_FAILED: i32 = 1;

/// The firmware: set up the board, train, report, exit.
fn run() -> ! {
    rt::paint_stack();
    let Some(mut link) = SemihostingLink::stderr() else {
        semihosting::process::exit(EXIT_FAILED)
    };
    let mut out = Transcript::new(LineLink::new(&mut link));
    let Some(peripherals) = cortex_m::Peripherals::take() else {
        let _ = out.end_error("core peripherals already taken");
        semihosting::process::exit(EXIT_FAILED)
    };
    let clock = SysTickClock::start(peripherals.SYST, gen::CORE_HZ);
    let mut delay = ClockDelay(&clock);
    let Some(arena) = rt::take_arena() else {
        let _ = out.end_error("arena already taken");
        semihosting::process::exit(EXIT_FAILED)
    };
    defmt::info!(
        "tapeplan firmware on {=str} ({=str}): {=str}",
        gen::BOARD,
        gen::TARGET,
        gen::RUN
    );
    #[cfg(not(feature = "size-baseline"))]
    let result = trainer::train(&mut out, &clock, &mut delay, arena, PAUSE_MS);
    #[cfg(feature = "size-baseline")]
    let result = baseline::train(&mut out, &clock, &mut delay, arena, PAUSE_MS);
    match result {
        Ok(summary) => {
            let stack = rt::stack_high_water_bytes();
            let statics = rt::statics_bytes();
            defmt::info!(
                "done: {=usize} steps, last epoch mean loss {=f32}; RAM: arena {=usize} B, statics {=usize} B, stack high water {=usize} B",
                summary.steps,
                summary.last_mean_loss,
                gen::ARENA_ELEMS * 4,
                statics,
                stack
            );
            let _ = out.info(format_args!(
                "ram arena_bytes {} statics_bytes {} stack_bytes {}",
                gen::ARENA_ELEMS * 4,
                statics,
                stack
            ));
            let _ = out.end_ok();
            semihosting::process::exit(EXIT_OK)
        }
        Err(e) => {
            defmt::error!("training failed");
            let _ = out.end_error(e);
            semihosting::process::exit(EXIT_FAILED)
        }
    }
}

/// Reports a hard fault (e.g. a stack overflow into the statics) and exits.
fn fail_hard(pc: u32) -> ! {
    if let Some(mut link) = SemihostingLink::stderr() {
        let _ = Transcript::new(LineLink::new(&mut link))
            .end_error(format_args!("hard fault at pc {pc:#010x}"));
    }
    semihosting::process::exit(EXIT_FAILED)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    if let Some(mut link) = SemihostingLink::stderr() {
        let _ = Transcript::new(LineLink::new(&mut link)).end_error(format_args!("panic: {info}"));
    }
    semihosting::process::exit(EXIT_FAILED)
}
