//! The `simd` catalog's kernel for `max_pool`, `max_pool_gather` and `max_pool_scatter` over
//! windows that tile the input ([`Tiling`]: stride equal to the kernel, dilation 1, no padding
//! reached; PyTorch's `MaxPool2d(k)`, the digits CNN's two pools, C2 of `cargo xtask bench
//! --peers`).
//!
//! Lanes are eight planes (`N · C`) at once, so every window's selection is lane-wise and
//! branch-free. Per band of a plane (the `kernel[0]` input rows of one output row) each plane's
//! elements are transposed into a stack buffer, one vector per band position holding that
//! position of eight planes (`lanes::transpose8`, an exact permutation); each window then
//! walks its taps in row-major window order with the reference's rule, lane by lane: a tap
//! takes over when it is NaN or greater than the maximum so far, unless the maximum so far is
//! NaN (`tapeplan_core::ops::pool::argmax`), so each lane selects the reference's first
//! maximum, and the outputs are exact selections of its elements:
//!
//! - `max_pool(x)`: the selected `x`, bit for bit (NaN payloads and `-0` included);
//! - `max_pool_gather(x, h)`: `h` at the selected tap;
//! - `max_pool_scatter(x, g)`: `+0 + g` at the selected tap (the reference starts every element
//!   at `+0.0` and adds each window's `g` at its first maximum; tiles never overlap, so each
//!   element receives at most one term), `+0.0` everywhere else.
//!
//! The vectors are `wide::f32x8` on every target (two `f32x4` under SSE2 and `simd128`): the
//! lanes are planes, not a register width. Bounds: a band is at most [`MAX_BAND_ELEMS`]
//! elements (three stack buffers of that many vectors, 12 KiB); [`fits`] says whether a tiling
//! is taken, the reference runs otherwise. The catalog runs on hosts and wasm only.
//!
//! Index arithmetic is bounded by the lengths of buffers the caller checked against the tiling
//! (see [`run`]), so it cannot overflow.
#![allow(clippy::arithmetic_side_effects)]

use super::lanes::transpose8;
use tapeplan_core::ops::pool::Tiling;
use tapeplan_core::Opcode;
use wide::f32x8;

/// The most elements of one band (`kernel[0] · cols`) the kernel takes: each of its stack
/// buffers holds one vector (eight planes) per band element, 4 KiB.
pub(crate) const MAX_BAND_ELEMS: usize = 128;

/// Planes per group: the lanes of `f32x8`.
const PLANES: usize = 8;

/// Whether the kernel takes `t`.
pub(crate) fn fits(t: &Tiling) -> bool {
    let [kh, kw] = t.kernel;
    kh >= 1
        && kw >= 1
        && t.out[0].saturating_mul(kh) <= t.rows
        && t.out[1].saturating_mul(kw) <= t.cols
        && kh.saturating_mul(t.cols) <= MAX_BAND_ELEMS
}

/// Runs `op` (`max_pool` over `[x]`, `max_pool_gather` over `[x, h]`, `max_pool_scatter` over
/// `[x, g]`) into `out`; `false` (nothing written) for another opcode, a tiling [`fits`]
/// refuses, or lengths that do not match it.
///
/// # Shapes
/// `x`, `h`: `planes · rows · cols`; `g`: `planes · out[0] · out[1]`; `out`: the pooled length
/// for `max_pool` and `max_pool_gather`, `x`'s for `max_pool_scatter`.
pub(crate) fn run(op: Opcode, t: &Tiling, args: &[&[f32]], out: &mut [f32]) -> bool {
    if !fits(t) {
        return false;
    }
    let in_plane = t.rows * t.cols;
    let out_plane = t.out[0] * t.out[1];
    let (x_len, pooled_len) = (t.planes * in_plane, t.planes * out_plane);
    match (op, args) {
        (Opcode::MaxPool, &[x]) if x.len() == x_len && out.len() == pooled_len => {
            gather(t, x, None, out);
        }
        (Opcode::MaxPoolGather, &[x, h])
            if x.len() == x_len && h.len() == x_len && out.len() == pooled_len =>
        {
            gather(t, x, Some(h), out);
        }
        (Opcode::MaxPoolScatter, &[x, g])
            if x.len() == x_len && g.len() == pooled_len && out.len() == x_len =>
        {
            scatter(t, x, g, out);
        }
        _ => return false,
    }
    true
}

/// `buf[pos]` = element `start + pos` of planes `p0 ..` (lane `i` plane `p0 + i`; `+0.0` in
/// the lanes of planes past the last), for `pos < buf.len()`, each plane `plane_elems` long.
#[inline(always)]
fn load(src: &[f32], plane_elems: usize, p0: usize, start: usize, buf: &mut [f32x8]) {
    for (c, chunk) in buf.chunks_mut(PLANES).enumerate() {
        let n = chunk.len();
        let mut rows = [[0.0f32; PLANES]; PLANES];
        for (i, row) in rows.iter_mut().enumerate() {
            let at = (p0 + i) * plane_elems + start + c * PLANES;
            if let Some(s) = src.get(at..at + n) {
                // A whole chunk as one fixed-size copy (a copy of `n` elements is a call).
                match <[f32; PLANES]>::try_from(s) {
                    Ok(whole) => *row = whole,
                    Err(_) => row.iter_mut().zip(s).for_each(|(r, &v)| *r = v),
                }
            }
        }
        for (v, col) in chunk.iter_mut().zip(transpose8(rows)) {
            *v = f32x8::new(col);
        }
    }
}

/// [`load`]'s inverse: element `start + pos` of planes `p0 ..` (those within `dst`) from
/// `vecs[pos]`.
#[inline(always)]
fn store(vecs: &[f32x8], dst: &mut [f32], plane_elems: usize, p0: usize, start: usize) {
    for (c, chunk) in vecs.chunks(PLANES).enumerate() {
        let n = chunk.len();
        let mut rows = [[0.0f32; PLANES]; PLANES];
        for (row, v) in rows.iter_mut().zip(chunk) {
            *row = v.to_array();
        }
        for (i, col) in transpose8(rows).iter().enumerate() {
            let at = (p0 + i) * plane_elems + start + c * PLANES;
            if let Some(d) = dst.get_mut(at..at + n) {
                match <&mut [f32; PLANES]>::try_from(&mut *d) {
                    Ok(whole) => *whole = *col,
                    Err(_) => d.iter_mut().zip(col).for_each(|(d, &v)| *d = v),
                }
            }
        }
    }
}

/// The reference's rule, lane by lane (`tapeplan_core::ops::pool::argmax`): the mask of the
/// lanes where tap `v` takes over from the maximum so far `best` (`v` NaN or greater, `best`
/// not NaN). Ordered comparisons: `simd_gt` is false when either side is NaN.
#[inline(always)]
fn takes_over(best: f32x8, v: f32x8) -> f32x8 {
    !best.is_nan() & (v.is_nan() | v.simd_gt(best))
}

/// The vectors of window column `ow`'s taps in `buf` (a band), in row-major window order.
#[inline(always)]
fn window<'a>(t: &Tiling, buf: &'a [f32x8], ow: usize) -> impl Iterator<Item = &'a f32x8> {
    let ([kh, kw], cols) = (t.kernel, t.cols);
    (0..kh).flat_map(move |a| {
        let at = a * cols + ow * kw;
        buf.get(at..at + kw).unwrap_or(&[]).iter()
    })
}

/// `max_pool` (`h` = `None`: the selected `x`) or `max_pool_gather` (`h` at the selection).
fn gather(t: &Tiling, x: &[f32], h: Option<&[f32]>, out: &mut [f32]) {
    let band = t.kernel[0] * t.cols;
    let (in_plane, out_plane) = (t.rows * t.cols, t.out[0] * t.out[1]);
    let zero = f32x8::splat(0.0);
    let mut xb = [zero; MAX_BAND_ELEMS];
    let mut hb = [zero; MAX_BAND_ELEMS];
    let mut ob = [zero; MAX_BAND_ELEMS];
    let (Some(xb), Some(hb), Some(ob)) = (
        xb.get_mut(..band),
        hb.get_mut(..band),
        ob.get_mut(..t.out[1]),
    ) else {
        return;
    };
    for p0 in (0..t.planes).step_by(PLANES) {
        for oh in 0..t.out[0] {
            let start = oh * band;
            load(x, in_plane, p0, start, xb);
            if let Some(h) = h {
                load(h, in_plane, p0, start, hb);
            }
            let (xb, hb): (&[f32x8], &[f32x8]) = (xb, if h.is_some() { hb } else { xb });
            for (ow, o) in ob.iter_mut().enumerate() {
                let mut taps = window(t, xb, ow).zip(window(t, hb, ow));
                let Some((&first, &first_h)) = taps.next() else {
                    continue;
                };
                let (mut best, mut sel) = (first, first_h);
                for (&v, &w) in taps {
                    let m = takes_over(best, v);
                    best = m.select(v, best);
                    sel = m.select(w, sel);
                }
                *o = sel;
            }
            store(ob, out, out_plane, p0, oh * t.out[1]);
        }
    }
}

/// `max_pool_scatter`: `+0 + g` at each window's selection, `+0.0` elsewhere.
fn scatter(t: &Tiling, x: &[f32], g: &[f32], out: &mut [f32]) {
    let ([kh, kw], cols) = (t.kernel, t.cols);
    let band = kh * cols;
    let (in_plane, out_plane) = (t.rows * cols, t.out[0] * t.out[1]);
    let zero = f32x8::splat(0.0);
    if t.out[0] * kh < t.rows {
        // Rows past the last band belong to no window.
        out.fill(0.0);
    }
    let mut xb = [zero; MAX_BAND_ELEMS];
    let mut gb = [zero; MAX_BAND_ELEMS];
    let mut ob = [zero; MAX_BAND_ELEMS];
    let (Some(xb), Some(gb), Some(ob)) = (
        xb.get_mut(..band),
        gb.get_mut(..t.out[1]),
        ob.get_mut(..band),
    ) else {
        return;
    };
    for p0 in (0..t.planes).step_by(PLANES) {
        for oh in 0..t.out[0] {
            let start = oh * band;
            load(x, in_plane, p0, start, xb);
            load(g, out_plane, p0, oh * t.out[1], gb);
            // Columns past the last window stay `+0.0`.
            ob.fill(zero);
            for (ow, &gv) in gb.iter().enumerate() {
                // The selected tap's number (exact in `f32`: at most `MAX_BAND_ELEMS` taps).
                let mut taps = window(t, xb, ow);
                let Some(&first) = taps.next() else {
                    continue;
                };
                let (mut best, mut which, mut k) = (first, zero, 0.0f32);
                for &v in taps {
                    k += 1.0;
                    let m = takes_over(best, v);
                    best = m.select(v, best);
                    which = m.select(f32x8::splat(k), which);
                }
                let term = zero + gv;
                let mut k = 0.0f32;
                for a in 0..kh {
                    let at = a * cols + ow * kw;
                    for o in ob.get_mut(at..at + kw).unwrap_or(&mut []) {
                        *o = which.simd_eq(f32x8::splat(k)).select(term, zero);
                        k += 1.0;
                    }
                }
            }
            store(ob, out, in_plane, p0, start);
        }
    }
}
