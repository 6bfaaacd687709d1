//! The board's side of the library's boundary ([`tapeplan_firmware::board`]): a
//! [`Clock`] from SysTick, and how the firmware stops. The transcript's link is the board's
//! UART ([`crate::uart`]).

use core::sync::atomic::{AtomicU32, Ordering};

use cortex_m::peripheral::syst::SystClkSource;
use cortex_m::peripheral::SYST;
use tapeplan_firmware::Clock;

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

/// The status of a finished run.
pub const EXIT_OK: i32 = 0;
/// The status of a failed run.
pub const EXIT_FAILED: i32 = 1;

/// Stops the firmware. Under QEMU: semihosting's `SYS_EXIT` (QEMU exits with `status`). On a
/// real board: sleeps for good (semihosting would halt a board with no debugger attached); the
/// transcript's `end` line has already said how the run ended.
pub fn exit(status: i32) -> ! {
    #[cfg(feature = "qemu")]
    semihosting::process::exit(status);
    #[cfg(not(feature = "qemu"))]
    {
        let _ = status;
        loop {
            cortex_m::asm::wfi();
        }
    }
}
