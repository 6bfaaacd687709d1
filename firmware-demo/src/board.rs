//! The board boundary. The trainer ([`crate::trainer`]) needs three things from a board, all
//! behind traits, so porting the firmware means supplying them, not touching the training:
//!
//! - a link for the transcript: any [`embedded_io::Write`] (a UART from the board's HAL;
//!   here semihosting's standard error);
//! - a [`Clock`] to time each step (here SysTick; on a HAL, its monotonic timer);
//! - an [`embedded_hal::delay::DelayNs`] the trainer pauses with between epochs (here built
//!   on the clock; on a HAL, its delay).
//!
//! The QEMU implementations live here; the entry point ([`crate::rt`]) wires them up.

use core::sync::atomic::{AtomicU32, Ordering};

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::SYST;
use embedded_hal::delay::DelayNs;
use semihosting::io::Write as _;

/// A free-running tick counter.
pub trait Clock {
    /// Ticks since the clock started.
    fn now_ticks(&self) -> u64;
    /// Ticks per second.
    fn ticks_per_second(&self) -> u32;
}

/// SysTick wraps counted by its exception (one writer: the handler).
static SYSTICK_WRAPS: AtomicU32 = AtomicU32::new(0);

/// SysTick's reload value: the full 24 bits.
const SYSTICK_RELOAD: u32 = 0x00FF_FFFF;

/// Called by the SysTick exception ([`crate::rt`]).
pub fn on_systick_wrap() {
    // Only the handler writes, so a load and a store suffice (thumbv6m has no fetch_add).
    let n = SYSTICK_WRAPS.load(Ordering::Relaxed);
    SYSTICK_WRAPS.store(n.wrapping_add(1), Ordering::Relaxed);
}

/// [`Clock`] from SysTick counting core clock cycles, extended to 56 bits by counting wraps.
/// Under QEMU the core clock is virtual: ticks follow the host's time unless QEMU runs with
/// `-icount`, where they count instructions.
pub struct SysTickClock {
    _syst: SYST,
    core_hz: u32,
}

impl SysTickClock {
    /// Starts SysTick free-running on the core clock, with its wrap exception enabled.
    pub fn start(mut syst: SYST, core_hz: u32) -> SysTickClock {
        syst.set_clock_source(SystClkSource::Core);
        syst.set_reload(SYSTICK_RELOAD);
        syst.clear_current();
        syst.enable_interrupt();
        syst.enable_counter();
        SysTickClock {
            _syst: syst,
            core_hz,
        }
    }
}

impl Clock for SysTickClock {
    fn now_ticks(&self) -> u64 {
        loop {
            let before = SYSTICK_WRAPS.load(Ordering::Relaxed);
            let down = SYST::get_current();
            if SYSTICK_WRAPS.load(Ordering::Relaxed) == before {
                let up = SYSTICK_RELOAD.saturating_sub(down);
                return (u64::from(before) << 24) | u64::from(up);
            }
        }
    }

    fn ticks_per_second(&self) -> u32 {
        self.core_hz
    }
}

/// [`DelayNs`] by busy-waiting on a [`Clock`].
pub struct ClockDelay<'c, C: Clock>(pub &'c C);

impl<C: Clock> DelayNs for ClockDelay<'_, C> {
    fn delay_ns(&mut self, ns: u32) {
        let ticks = u64::from(ns) * u64::from(self.0.ticks_per_second()) / 1_000_000_000;
        let start = self.0.now_ticks();
        while self.0.now_ticks().wrapping_sub(start) < ticks {}
    }
}

/// The transcript link under QEMU: semihosting's standard error (QEMU's own stderr), apart
/// from standard output, which carries defmt's binary frames.
pub struct SemihostingLink(semihosting::io::Stderr);

impl SemihostingLink {
    /// Opens semihosting's standard error; `None` when the debugger refuses.
    pub fn stderr() -> Option<SemihostingLink> {
        semihosting::io::stderr().ok().map(SemihostingLink)
    }
}

/// The semihosting call failed.
#[derive(Debug)]
pub struct LinkError;

impl core::fmt::Display for LinkError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("semihosting write failed")
    }
}

impl core::error::Error for LinkError {}

impl embedded_io::Error for LinkError {
    fn kind(&self) -> embedded_io::ErrorKind {
        embedded_io::ErrorKind::Other
    }
}

impl embedded_io::ErrorType for SemihostingLink {
    type Error = LinkError;
}

impl embedded_io::Write for SemihostingLink {
    fn write(&mut self, buf: &[u8]) -> Result<usize, LinkError> {
        self.0.write_all(buf).map_err(|_| LinkError)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> Result<(), LinkError> {
        Ok(())
    }
}
