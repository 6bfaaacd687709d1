//! The embedded training rows, as the library's [`Rows`]: the digits as `u8` pixel counts (the
//! default build), or with feature `cnn` MNIST-1D's rows as little-endian `f32` features.

use tapeplan_firmware::Rows;
use tapeplan_runtime::protocol::data_digest;

use crate::gen;

/// Factor from a pixel count to a feature: `1/16`, exact (the host's `DIGITS_PIXEL_SCALE`).
#[cfg(not(feature = "cnn"))]
const PIXEL_SCALE: f32 = 0.0625;

/// The rows' bytes as the data digest hashes them (before the labels).
#[cfg(not(feature = "cnn"))]
pub const BYTES: &[u8] = gen::PIXELS;
/// The rows' bytes as the data digest hashes them (before the labels).
#[cfg(feature = "cnn")]
pub const BYTES: &[u8] = gen::FEATURES;

/// The embedded rows.
pub struct Embedded;

/// The embedded rows.
pub const ROWS: Embedded = Embedded;

impl Rows for Embedded {
    fn len(&self) -> usize {
        gen::SAMPLES
    }

    #[cfg(not(feature = "cnn"))]
    #[inline(always)]
    fn load(&self, row: usize, dst: &mut [f32]) {
        let start = row * gen::D_IN;
        for (d, &p) in dst.iter_mut().zip(&gen::PIXELS[start..start + gen::D_IN]) {
            *d = f32::from(p) * PIXEL_SCALE;
        }
    }

    #[cfg(feature = "cnn")]
    #[inline(always)]
    fn load(&self, row: usize, dst: &mut [f32]) {
        let start = row * gen::D_IN * 4;
        let src = &gen::FEATURES[start..start + gen::D_IN * 4];
        for (d, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
            *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }

    #[inline(always)]
    fn label(&self, row: usize) -> f32 {
        f32::from(gen::LABELS[row])
    }

    fn digest(&self) -> u64 {
        data_digest(BYTES, gen::LABELS)
    }
}
