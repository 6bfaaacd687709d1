//! The only module with `unsafe`: the runtime's entry and exception symbols (which
//! `cortex-m-rt`'s attributes expand to `#[export_name]` / `unsafe` items), the static arena,
//! and stack painting. Each `unsafe` block says why it is sound.
#![allow(unsafe_code)]

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

use cortex_m_rt::{entry, exception, ExceptionFrame};

use crate::gen::ARENA_ELEMS;

/// The arena: a `static`, sized exactly by the plan (`ARENA_ELEMS` from build.rs), in `.bss`
/// (zeroed by the reset handler), handed out once as `&'static mut`.
struct Arena(UnsafeCell<[f32; ARENA_ELEMS]>);

// SAFETY: the only access is through `take_arena`, which hands out the one `&mut` at most once.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena(UnsafeCell::new([0.0; ARENA_ELEMS]));
static ARENA_TAKEN: AtomicBool = AtomicBool::new(false);

/// The arena, the first time; `None` after.
pub fn take_arena() -> Option<&'static mut [f32; ARENA_ELEMS]> {
    let first = cortex_m::interrupt::free(|_| {
        // Inside a critical section, so the load and the store cannot be interleaved (thumbv6m
        // has no compare-and-swap).
        let taken = ARENA_TAKEN.load(Ordering::Relaxed);
        ARENA_TAKEN.store(true, Ordering::Relaxed);
        !taken
    });
    // SAFETY: `first` is true exactly once, so this is the only reference to the arena ever
    // made, and it lives for the rest of the program.
    first.then(|| unsafe { &mut *ARENA.0.get() })
}

/// Sets up the RTT control block (`_SEGGER_RTT`, which a probe or `cargo xtask firmware`'s
/// reader finds by its symbol and its "SEGGER RTT" id): on a board with feature `rtt`, up
/// channel 0 ("defmt") for defmt's log through rtt-target's logger; with `transcript-rtt`, an
/// up channel "transcript" (0 under QEMU, 1 beside defmt's), answered as the transcript's link.
/// Call it once: a second call panics (rtt-target's rule).
///
/// The rings are 1 KiB each: the link waits while its ring is full, so the size only sets how
/// often the host must read.
#[cfg(all(feature = "rtt", not(feature = "transcript-rtt")))]
pub fn start_rtt() {
    let channels = rtt_target::rtt_init! {
        up: {
            0: { size: 1024, name: "defmt" }
        }
    };
    rtt_target::set_defmt_channel(channels.up.0);
}

/// See the other `start_rtt`: defmt's channel 0 and the transcript's channel 1.
#[cfg(all(feature = "rtt", feature = "transcript-rtt"))]
pub fn start_rtt() -> tapeplan_firmware::RttLink {
    let channels = rtt_target::rtt_init! {
        up: {
            0: { size: 1024, name: "defmt" }
            1: { size: 1024, name: "transcript" }
        }
    };
    rtt_target::set_defmt_channel(channels.up.0);
    tapeplan_firmware::RttLink::new(channels.up.1)
}

/// See the other `start_rtt`: under QEMU (defmt over semihosting), the transcript's channel 0.
#[cfg(all(not(feature = "rtt"), feature = "transcript-rtt"))]
pub fn start_rtt() -> tapeplan_firmware::RttLink {
    let channels = rtt_target::rtt_init! {
        up: {
            0: { size: 1024, name: "transcript" }
        }
    };
    tapeplan_firmware::RttLink::new(channels.up.0)
}

/// Feature `checkpoint`: RAM the reset handler leaves alone (`.uninit`, after `.bss`, below
/// the stack paint), holding the marker word and the RAM flash of [`crate::ckpt`].
#[cfg(feature = "checkpoint")]
struct Noinit(UnsafeCell<core::mem::MaybeUninit<[u8; crate::ckpt::NOINIT_BYTES]>>);

// SAFETY: the only access is through `take_noinit`, which hands out the one `&mut` at most
// once.
#[cfg(feature = "checkpoint")]
unsafe impl Sync for Noinit {}

#[cfg(feature = "checkpoint")]
#[link_section = ".uninit.tapeplan_checkpoint"]
static NOINIT: Noinit = Noinit(UnsafeCell::new(core::mem::MaybeUninit::uninit()));
#[cfg(feature = "checkpoint")]
static NOINIT_TAKEN: AtomicBool = AtomicBool::new(false);

/// Feature `checkpoint`: the `.uninit` region, the first time; `None` after. On a cold boot
/// its first word is not [`crate::ckpt::MARK_FRESH`] or the reset marker, and the caller
/// erases it; after a reset it holds what the previous boot wrote.
#[cfg(feature = "checkpoint")]
pub fn take_noinit() -> Option<&'static mut [u8; crate::ckpt::NOINIT_BYTES]> {
    let first = cortex_m::interrupt::free(|_| {
        let taken = NOINIT_TAKEN.load(Ordering::Relaxed);
        NOINIT_TAKEN.store(true, Ordering::Relaxed);
        !taken
    });
    // SAFETY: `first` is true exactly once, so this is the only reference ever made. The
    // bytes are RAM that always holds some value (the previous boot's, or power-on content
    // that the caller overwrites before trusting it); `u8` has no invalid values.
    first.then(|| unsafe { (*NOINIT.0.get()).assume_init_mut() })
}

/// The stack paint's word.
const PAINT: u32 = 0xA5A5_A5A5;
/// Bytes left unpainted below the stack pointer at painting time.
const PAINT_MARGIN_BYTES: usize = 256;

extern "C" {
    /// End of `.bss`/`.uninit`, 4-aligned: the lowest address the stack can grow to
    /// (`cortex-m-rt`'s `link.x`).
    static __sheap: u32;
    /// The initial stack pointer: the top of RAM (`link.x`).
    static _stack_start: u32;
}

fn stack_bounds() -> (usize, usize) {
    // Only the symbols' addresses are taken (safe since Rust 1.82); nothing is read through
    // them here.
    (
        core::ptr::addr_of!(__sheap) as usize,
        core::ptr::addr_of!(_stack_start) as usize,
    )
}

/// Fills the unused stack (from the end of the statics to just below the current stack
/// pointer) with a pattern, so [`stack_high_water_bytes`] can tell how deep it went.
/// Call first thing, before any interrupt is enabled.
pub fn paint_stack() {
    let (low, _) = stack_bounds();
    let sp = cortex_m::register::msp::read() as usize;
    let mut p = low;
    while p + 4 <= sp.saturating_sub(PAINT_MARGIN_BYTES) {
        // SAFETY: `[low, sp - margin)` is RAM between the statics and the live stack: nothing
        // lives there (no heap), and interrupts are still disabled, so no frame is below `sp`.
        unsafe { core::ptr::write_volatile(p as *mut u32, PAINT) };
        p += 4;
    }
}

/// The deepest the stack has been since [`paint_stack`], in bytes (from the top of RAM to the
/// lowest word no longer holding the paint).
pub fn stack_high_water_bytes() -> usize {
    let (low, top) = stack_bounds();
    let mut p = low;
    while p < top {
        // SAFETY: `[low, top)` is RAM, 4-aligned; reading it races with nothing (one core, and
        // the SysTick handler only touches its own static).
        if unsafe { core::ptr::read_volatile(p as *const u32) } != PAINT {
            break;
        }
        p += 4;
    }
    top - p
}

/// Whether the stack has reached the statics since [`paint_stack`]: the lowest painted word,
/// right above them, no longer holds the paint (so the statics below may be overwritten too).
pub fn stack_overflowed() -> bool {
    let (low, top) = stack_bounds();
    // SAFETY: `low` is RAM, 4-aligned, below `top` (see `stack_high_water_bytes`).
    low < top && unsafe { core::ptr::read_volatile(low as *const u32) } != PAINT
}

/// RAM the statics take below the stack (`.data`, `.bss`, `.uninit`), in bytes.
pub fn statics_bytes() -> usize {
    let (low, _) = stack_bounds();
    low.saturating_sub(0x2000_0000)
}

#[entry]
fn main() -> ! {
    crate::run()
}

#[exception]
fn SysTick() {
    crate::board::on_systick_wrap();
}

#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    crate::fail_hard(frame.pc())
}

/// The RP2040's second-stage bootloader: the boot ROM copies these 256 bytes from the start
/// of flash to RAM and runs them to set up execute-in-place from the QSPI flash
/// (`rp2040-boot2`'s build for the W25Q080 and compatible chips, as on the Pico); the linker
/// places `.boot2` first (`memory/rp2040.x`).
#[cfg(feature = "rp2040")]
#[link_section = ".boot2"]
#[used]
pub static BOOT2: [u8; 256] = rp2040_boot2::BOOT_LOADER_W25Q080;
