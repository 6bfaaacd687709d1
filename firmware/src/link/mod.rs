//! The transcript over a device link: [`LineLink`] formats each line into a buffer of `N`
//! bytes and writes it whole (with its `\n`) to any [`embedded_io::Write`](https://docs.rs/embedded-io/0.7/embedded_io/trait.Write.html), so a line leaves in
//! one write (a UART's FIFO, an RTT channel's packet). A line longer than `N - 1` bytes is cut,
//! not lost. [`Transcript`] is the run protocol's writer
//! ([`tapeplan_runtime::protocol::TranscriptWriter`]) over it.

use core::fmt::{self, Write as _};

use embedded_io::Write;
use tapeplan_runtime::protocol::{LineSink, TranscriptWriter};

#[cfg(feature = "rtt")]
mod rtt;
#[cfg(feature = "rtt")]
pub use rtt::RttLink;

/// The transcript's link: lines of at most `N` bytes (newline included) to `W`.
pub struct LineLink<'w, W: Write, const N: usize> {
    link: &'w mut W,
    line: LineBuf<N>,
}

/// One line being formatted.
struct LineBuf<const N: usize> {
    bytes: [u8; N],
    len: usize,
}

impl<const N: usize> fmt::Write for LineBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        // Keep one byte for the newline.
        let room = N.saturating_sub(1).saturating_sub(self.len);
        let n = s.len().min(room);
        if let (Some(dst), Some(src)) = (
            self.bytes.get_mut(self.len..self.len + n),
            s.as_bytes().get(..n),
        ) {
            dst.copy_from_slice(src);
            self.len += n;
        }
        if n < s.len() {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

impl<'w, W: Write, const N: usize> LineLink<'w, W, N> {
    /// A line link over `link`.
    pub fn new(link: &'w mut W) -> Self {
        LineLink {
            link,
            line: LineBuf {
                bytes: [0; N],
                len: 0,
            },
        }
    }
}

impl<W: Write, const N: usize> LineSink for LineLink<'_, W, N> {
    type Error = W::Error;

    fn write_line(&mut self, line: fmt::Arguments<'_>) -> Result<(), W::Error> {
        self.line.len = 0;
        let _cut = self.line.write_fmt(line); // an over-long line is cut, not lost
        let end = self.line.len.min(N.saturating_sub(1));
        if let Some(b) = self.line.bytes.get_mut(end) {
            *b = b'\n';
        }
        let whole = self.line.bytes.get(..=end).unwrap_or(&[]);
        self.link.write_all(whole)?;
        self.link.flush()
    }
}

/// The transcript (`tapeplan_runtime::protocol`'s format and writer) over a link, in lines of
/// at most `N` bytes.
pub type Transcript<'w, W, const N: usize> = TranscriptWriter<LineLink<'w, W, N>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_is_one_write_with_its_newline_and_a_long_line_is_cut() {
        let mut buf = [0u8; 64];
        let mut link = &mut buf[..];
        let mut out: Transcript<'_, _, 16> = Transcript::new(LineLink::new(&mut link));
        out.loss(3, 1.0).unwrap();
        out.info("a line much longer than sixteen bytes").unwrap();
        out.end_ok().unwrap();
        let left = link.len();
        let text = &buf[..64 - left];
        assert_eq!(text, b"loss 3 3f800000\ninfo a line muc\nend ok\n");
    }

    #[test]
    fn a_full_link_is_an_error() {
        let mut buf = [0u8; 8];
        let mut link = &mut buf[..];
        let mut out: Transcript<'_, _, 32> = Transcript::new(LineLink::new(&mut link));
        assert!(out.end_ok().is_ok());
        assert!(out.end_ok().is_err());
    }
}
