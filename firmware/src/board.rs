//! The board boundary. Training needs three things from a board, all behind traits, so a new
//! board supplies them and touches nothing else:
//!
//! - a link for the transcript: any [`embedded_io::Write`](https://docs.rs/embedded-io/0.7/embedded_io/trait.Write.html) (a UART from the board's HAL, an
//!   RTT up channel, USB CDC);
//! - a [`Clock`] to time each step (SysTick, or the HAL's monotonic timer);
//! - an [`embedded_hal::delay::DelayNs`](https://docs.rs/embedded-hal/1/embedded_hal/delay/trait.DelayNs.html) to pause between epochs (the HAL's delay, or
//!   [`ClockDelay`] on the clock).

use embedded_hal::delay::DelayNs;

/// A free-running tick counter.
pub trait Clock {
    /// Ticks since the clock started.
    fn now_ticks(&self) -> u64;
    /// Ticks per second.
    fn ticks_per_second(&self) -> u32;
}

/// [`DelayNs`](https://docs.rs/embedded-hal/1/embedded_hal/delay/trait.DelayNs.html) by busy-waiting on a [`Clock`].
pub struct ClockDelay<'c, C: Clock>(pub &'c C);

impl<C: Clock> DelayNs for ClockDelay<'_, C> {
    fn delay_ns(&mut self, ns: u32) {
        let ticks = u64::from(ns) * u64::from(self.0.ticks_per_second()) / 1_000_000_000;
        let start = self.0.now_ticks();
        while self.0.now_ticks().wrapping_sub(start) < ticks {}
    }
}

/// A clock for runs off a device (the host, WebAssembly), where step times are not measured:
/// it advances one tick each time it is read, at a nominal 1 MHz.
#[derive(Debug, Default)]
pub struct CountingClock(core::cell::Cell<u64>);

impl CountingClock {
    /// A clock at tick 0.
    pub const fn new() -> CountingClock {
        CountingClock(core::cell::Cell::new(0))
    }
}

impl Clock for CountingClock {
    fn now_ticks(&self) -> u64 {
        self.0.set(self.0.get() + 1);
        self.0.get()
    }
    fn ticks_per_second(&self) -> u32 {
        1_000_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    /// A clock that advances 10 ticks each time it is read, at 1 kHz.
    struct Steps(Cell<u64>);

    impl Clock for Steps {
        fn now_ticks(&self) -> u64 {
            self.0.set(self.0.get() + 10);
            self.0.get()
        }
        fn ticks_per_second(&self) -> u32 {
            1000
        }
    }

    #[test]
    fn clock_delay_waits_the_ticks_of_the_time_asked() {
        let clock = Steps(Cell::new(0));
        // 50 ms at 1 kHz is 50 ticks: reads at 10 (start), 20, …, 60 (done).
        ClockDelay(&clock).delay_ms(50);
        assert_eq!(clock.0.get(), 60);
        ClockDelay(&clock).delay_ms(0);
        assert_eq!(clock.0.get(), 80);
    }
}
