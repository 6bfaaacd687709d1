//! The embedded training rows: the digits as `u8` pixel counts (the default build), or with
//! feature `cnn` MNIST-1D's rows as little-endian `f32` features.

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

/// Writes row `row`'s `D_IN` features into `dst`.
#[cfg(not(feature = "cnn"))]
#[inline(always)]
pub fn load(dst: &mut [f32], row: usize) {
    let start = row * gen::D_IN;
    for (d, &p) in dst.iter_mut().zip(&gen::PIXELS[start..start + gen::D_IN]) {
        *d = f32::from(p) * PIXEL_SCALE;
    }
}

/// Writes row `row`'s `D_IN` features into `dst`.
#[cfg(feature = "cnn")]
#[inline(always)]
pub fn load(dst: &mut [f32], row: usize) {
    let start = row * gen::D_IN * 4;
    let src = &gen::FEATURES[start..start + gen::D_IN * 4];
    for (d, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}
