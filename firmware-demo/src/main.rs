//! # tapeplan-firmware-demo
//!
//! Trains a model on a Cortex-M from a static plan, with no allocator, and sends the
//! transcript `tapeplan verify` checks against the host oracle through the board's UART. A user
//! of the library `tapeplan-firmware` (the train-step protocol, the transcript writer, the board
//! traits); what is here is the board. See README.md.
//!
//! - [`board`]: the clock (SysTick) and how the firmware stops;
//! - [`uart`]: the board's UART, the transcript's link (or RTT, feature `transcript-rtt`:
//!   [`rt::start_rtt`]);
//! - [`rows`]: the embedded rows, as the library's [`tapeplan_firmware::Rows`];
//! - [`rt`]: the entry point, exceptions and the static arena.
#![no_std]
#![no_main]

// Links the critical-section implementation the defmt transport needs.
use cortex_m as _;
#[cfg(feature = "qemu")]
use defmt_semihosting as _;

#[cfg(feature = "size-baseline")]
pub mod baseline;
pub mod board;
#[cfg(feature = "checkpoint")]
pub mod ckpt;
#[cfg(not(feature = "hvp"))]
pub mod rows;
pub mod rt;
pub mod uart;

/// What build.rs generated from the run description and the board: the plan, data, initial
/// parameters and their sizes.
#[allow(missing_docs, clippy::all)]
pub mod gen {
    include!(concat!(env!("OUT_DIR"), "/generated.rs"));
}

#[cfg(not(feature = "hvp"))]
use board::SysTickClock;
use board::{exit, EXIT_FAILED, EXIT_OK};
use tapeplan_firmware::LineLink;
#[cfg(not(feature = "hvp"))]
use tapeplan_firmware::{ClockDelay, Run};
use tapeplan_runtime::Limits;
#[cfg(not(feature = "transcript-rtt"))]
use uart::Uart;

/// Epoch pause under QEMU: none.
#[cfg(not(feature = "hvp"))]
const PAUSE_MS: u32 = 0;

/// The transcript's link: the board's UART.
#[cfg(not(feature = "transcript-rtt"))]
pub type Link = Uart;
/// The transcript's link: RTT up channel 0 (feature `transcript-rtt`).
#[cfg(feature = "transcript-rtt")]
pub type Link = tapeplan_firmware::RttLink;

/// The transcript over [`Link`], in lines of at most `gen::LINE_BYTES`.
pub type Transcript<'w> = tapeplan_firmware::Transcript<'w, Link, { gen::LINE_BYTES }>;

/// The transcript's link, the first time: the UART, or RTT's channel (whose control block
/// [`rt::start_rtt`] sets up once).
fn take_link() -> Link {
    #[cfg(not(feature = "transcript-rtt"))]
    return Uart::take();
    #[cfg(feature = "transcript-rtt")]
    return rt::start_rtt();
}

/// Writes a failure's `end` line, where the link can be taken again: the UART can, RTT's
/// channel cannot (it may be in the middle of a write), so with `transcript-rtt` the failure
/// goes to the defmt log only and the transcript ends without its `end` line, which
/// `tapeplan verify` reports as a failed run.
///
/// A stack that grew into the statics shows up as an unrelated failure (a panic of whatever
/// static it overwrote, a hard fault): the line then says so first.
fn end_with_error(what: core::fmt::Arguments<'_>) {
    let overflow = rt::stack_overflowed();
    #[cfg(not(feature = "transcript-rtt"))]
    {
        let mut uart = Uart::take();
        let mut out = Transcript::new(LineLink::new(&mut uart));
        let _ = if overflow {
            out.end_error(format_args!(
                "stack overflow: the stack reached the statics ({} B of RAM above them, the \
                 arena {} B); the run leaves too little RAM for the stack (build.rs keeps \
                 4 KiB, a CNN may need 10 KiB): pick a smaller run. Then: {what}",
                rt::stack_high_water_bytes(),
                gen::ARENA_ELEMS * 4
            ))
        } else {
            out.end_error(what)
        };
    }
    #[cfg(feature = "transcript-rtt")]
    {
        if overflow {
            defmt::error!("stack overflow: the stack reached the statics");
        }
        defmt::error!("{}", defmt::Display2Format(&what));
    }
}

/// The run build.rs embedded.
#[cfg(not(feature = "hvp"))]
pub const RUN: Run<'static> = Run {
    plan: gen::PLAN,
    config: gen::RUN,
    target: gen::TARGET_LINE,
    init: gen::INIT,
    params: gen::INIT_PARAMS,
    batch: gen::BATCH,
    epochs: gen::EPOCHS,
    seed: gen::SEED,
    // The plan is compiled into this firmware, so it is trusted: no work cap (the derived cap
    // and its error's `u64` formatting cost about 800 bytes of flash). A firmware that takes
    // plans from outside keeps `Limits::DEFAULT` (docs/threat-model.md).
    limits: Limits {
        max_work_per_entry: Some(u64::MAX),
        ..Limits::DEFAULT
    },
};

/// Feature `hvp`: run the Hessian-vector product entry build.rs embedded, step after step
/// ([`tapeplan_firmware::run_entry`]), report, stop.
#[cfg(feature = "hvp")]
fn run() -> ! {
    rt::paint_stack();
    let mut link = take_link();
    let mut out = Transcript::new(LineLink::new(&mut link));
    let Some(arena) = rt::take_arena() else {
        let _ = out.end_error("arena already taken");
        exit(EXIT_FAILED)
    };
    let run = tapeplan_firmware::EntryRun {
        plan: gen::PLAN,
        target: gen::TARGET_LINE,
        entry: gen::ENTRY,
        init: gen::INIT,
        params: gen::INIT_PARAMS,
        steps: gen::STEPS,
        seed: gen::SEED,
        limits: Limits {
            max_work_per_entry: Some(u64::MAX),
            ..Limits::DEFAULT
        },
    };
    defmt::info!(
        "tapeplan firmware on {=str}: the {=str} entry",
        gen::BOARD,
        gen::ENTRY
    );
    match tapeplan_firmware::run_entry::<gen::PlanOps, { gen::PLAN_TENSORS }, _, _>(
        &mut out, &run, arena,
    ) {
        Ok(steps) => {
            let _ = out.info(format_args!(
                "ram arena_bytes {} stack_bytes {} steps {steps}",
                gen::ARENA_ELEMS * 4,
                rt::stack_high_water_bytes()
            ));
            let _ = out.end_ok();
            exit(EXIT_OK)
        }
        Err(e) => {
            let _ = out.end_error(e);
            exit(EXIT_FAILED)
        }
    }
}

/// The firmware: set up the board, train, report, stop.
#[cfg(not(feature = "hvp"))]
fn run() -> ! {
    rt::paint_stack();
    let mut link = take_link();
    let mut out = Transcript::new(LineLink::new(&mut link));
    let Some(peripherals) = cortex_m::Peripherals::take() else {
        let _ = out.end_error("core peripherals already taken");
        exit(EXIT_FAILED)
    };
    let clock = SysTickClock::start(peripherals.SYST, gen::CORE_HZ);
    let mut delay = ClockDelay(&clock);
    let Some(arena) = rt::take_arena() else {
        let _ = out.end_error("arena already taken");
        exit(EXIT_FAILED)
    };
    defmt::info!(
        "tapeplan firmware on {=str} ({=str}): {=str}",
        gen::BOARD,
        gen::TARGET,
        gen::RUN
    );
    let mut order = [0u16; gen::SAMPLES];
    #[cfg(all(feature = "checkpoint", not(feature = "size-baseline")))]
    let result = {
        let Some(noinit) = rt::take_noinit() else {
            let _ = out.end_error("checkpoint flash already taken");
            exit(EXIT_FAILED)
        };
        let (flash, resumed) = ckpt::RamFlash::new(noinit);
        defmt::info!("checkpoint flash: resumed after reset {=bool}", resumed);
        let mut work = [0u8; ckpt::PAGE_BYTES];
        match tapeplan_firmware::CheckpointStore::new(flash, 0..ckpt::FLASH_BYTES as u32, &mut work)
        {
            Ok(mut store) => tapeplan_firmware::train_resumable::<
                gen::PlanOps,
                { gen::PLAN_TENSORS },
                _,
                _,
                _,
                _,
                _,
                _,
            >(
                &mut out,
                &RUN,
                &rows::ROWS,
                &mut order,
                &clock,
                &mut delay,
                arena,
                PAUSE_MS,
                &mut ckpt::Counted(&mut store),
            ),
            Err(e) => Err(tapeplan_firmware::Failure::Checkpoint(e.what())),
        }
    };
    #[cfg(all(not(feature = "checkpoint"), not(feature = "size-baseline")))]
    let result = tapeplan_firmware::train::<gen::PlanOps, { gen::PLAN_TENSORS }, _, _, _, _, _>(
        &mut out,
        &RUN,
        &rows::ROWS,
        &mut order,
        &clock,
        &mut delay,
        arena,
        PAUSE_MS,
    );
    #[cfg(feature = "size-baseline")]
    let result = baseline::train(&mut out, &clock, &mut delay, arena, &mut order, PAUSE_MS);
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
                "flash plan_bytes {} data_bytes {} init_bytes {}",
                gen::PLAN.len(),
                rows::BYTES.len() + gen::LABELS.len(),
                gen::INIT.len()
            ));
            let _ = out.info(format_args!(
                "ram arena_bytes {} statics_bytes {} stack_bytes {}",
                gen::ARENA_ELEMS * 4,
                statics,
                stack
            ));
            let _ = out.end_ok();
            exit(EXIT_OK)
        }
        Err(e) => {
            defmt::error!("training failed");
            let _ = out.end_error(e);
            exit(EXIT_FAILED)
        }
    }
}

/// Reports a hard fault (e.g. a stack overflow into the statics) and stops.
fn fail_hard(pc: u32) -> ! {
    end_with_error(format_args!("hard fault at pc {pc:#010x}"));
    exit(EXIT_FAILED)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    end_with_error(format_args!("panic: {info}"));
    exit(EXIT_FAILED)
}
