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
