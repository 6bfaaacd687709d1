//! The embedded training rows, as the library's [`Rows`]: the digits as `u8` pixel counts (the
//! default build), or with feature `cnn` `f32` rows (MNIST-1D's, the digits' for the CNN, a
//! CSV's) as little-endian `f32` features, and a regression run's targets as `f32`s.

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

    /// A regression run's targets (`gen::TARGETS_PER_ROW` little-endian `f32`s a row, where
    /// the labels would be); a classification run's label.
    #[cfg(feature = "cnn")]
    fn load_target(&self, row: usize, dst: &mut [f32]) {
        if gen::TARGETS_PER_ROW == 0 {
            dst.fill(self.label(row));
            return;
        }
        let start = row * gen::TARGETS_PER_ROW * 4;
        let src = &gen::LABELS[start..start + gen::TARGETS_PER_ROW * 4];
        for (d, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
            *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }

    fn digest(&self) -> u64 {
        data_digest(BYTES, gen::LABELS)
    }
}
