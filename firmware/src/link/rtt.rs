//! Feature `rtt`: the transcript over a SEGGER RTT up channel ([`rtt-target`](https://docs.rs/rtt-target/0.6/rtt_target/)), read by a debug
//! probe (`probe-rs`) or, under QEMU, by `cargo xtask firmware`'s reader over QEMU's gdbstub.
//!
//! RTT is a ring buffer in the target's RAM that the host reads through the debug port while
//! the core runs. A transcript must not lose lines, so [`RttLink`] puts its channel in
//! [`ChannelMode::BlockIfFull`](https://docs.rs/rtt-target/0.6/rtt_target/enum.ChannelMode.html): a write waits while the ring is full, and
//! `flush` waits until the host has read everything written. Both wait
//! for as long as no host reads: a transcript over RTT needs a probe attached (a board without
//! one sends it through its UART, [`super::LineLink`] over the UART driver).

use core::convert::Infallible;

use rtt_target::{ChannelMode, UpChannel};

/// An RTT up channel as an `embedded_io::Write` link that never drops a byte.
pub struct RttLink {
    channel: UpChannel,
}

impl RttLink {
    /// The link over `channel` (set up by `rtt_target::rtt_init!`), switched to
    /// `ChannelMode::BlockIfFull`.
    pub fn new(mut channel: UpChannel) -> RttLink {
        channel.set_mode(ChannelMode::BlockIfFull);
        RttLink { channel }
    }
}

impl embedded_io::ErrorType for RttLink {
    type Error = Infallible;
}

impl embedded_io::Write for RttLink {
    /// Writes all of `buf` (waiting while the ring is full) and answers its length.
    fn write(&mut self, buf: &[u8]) -> Result<usize, Infallible> {
        let mut rest = buf;
        while !rest.is_empty() {
            let n = self.channel.write(rest);
            rest = rest.get(n..).unwrap_or(&[]);
        }
        Ok(buf.len())
    }

    /// Waits until the host has read every byte written.
    fn flush(&mut self) -> Result<(), Infallible> {
        self.channel.flush();
        Ok(())
    }
}
