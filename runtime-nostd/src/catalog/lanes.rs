//! The lane-level kernels: elementwise loops and the matrix product, over vectors of `f32`
//! lanes with feature `simd` (the `wide` crate: safe, `no_std`; its add, sub, mul, div and
//! sqrt are the IEEE operations, lane by lane, and it never fuses a multiply with an add), or as
//! plain monomorphic loops without it.
//!
//! The vector width is fixed at compile time by the target's features: 16 lanes with
//! AVX-512F, 8 with AVX, else 4 (SSE2 on x86_64, `simd128` on wasm32, `wide`'s portable
//! fallback elsewhere). Host builds that want AVX2 or AVX-512 compile with
//! `-C target-cpu=native` (or `-C target-feature=+avx2` / `+avx512f`): the `no_std` runtime
//! cannot detect features at run time.
#![allow(clippy::arithmetic_side_effects)]

use super::Src;
use tapeplan_core::ops::{
    abs, add, detach, div, equal, greater, greater_equal, heaviside, maximum, minimum, mul, neg,
    relu, select as sel, sign, sqrt, sub,
};

#[cfg(feature = "simd")]
mod width {
    #[cfg(target_feature = "avx512f")]
    pub type V = wide::f32x16;
    #[cfg(target_feature = "avx512f")]
    pub const CATALOG: &str = "simd-avx512";
    /// Vectors of columns per matrix-product tile (registers: `MR * NR` accumulators, `NR` of
    /// `b`, one broadcast of `a`).
    #[cfg(target_feature = "avx512f")]
    pub const NR: usize = 4;

    #[cfg(all(not(target_feature = "avx512f"), target_feature = "avx"))]
    pub type V = wide::f32x8;
    #[cfg(all(not(target_feature = "avx512f"), target_feature = "avx"))]
    pub const CATALOG: &str = "simd-avx2";
    #[cfg(all(not(target_feature = "avx512f"), target_feature = "avx"))]
    pub const NR: usize = 2;

    #[cfg(not(any(target_feature = "avx512f", target_feature = "avx")))]
    pub type V = wide::f32x4;
    #[cfg(all(
        not(any(target_feature = "avx512f", target_feature = "avx")),
        target_feature = "sse2"
    ))]
    pub const CATALOG: &str = "simd-sse2";
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    pub const CATALOG: &str = "simd128";
    #[cfg(not(any(
        target_feature = "avx512f",
        target_feature = "avx",
        target_feature = "sse2",
        all(target_arch = "wasm32", target_feature = "simd128")
    )))]
    pub const CATALOG: &str = "simd-portable";
    #[cfg(not(any(target_feature = "avx512f", target_feature = "avx")))]
    pub const NR: usize = 2;

    pub const L: usize = core::mem::size_of::<V>() / 4;
}

#[cfg(feature = "simd")]
pub(crate) use width::{CATALOG, L, V};
#[cfg(feature = "simd")]
pub const LANES: usize = L;

#[cfg(not(feature = "simd"))]
pub(crate) const CATALOG: &str = "scalar";
#[cfg(not(feature = "simd"))]
pub const LANES: usize = 1;

/// A one-argument elementwise operation: its scalar (the reference's function) and, with
/// `simd`, its lane-wise form, which must give the same bits lane by lane. The default lane
/// form applies the scalar to each lane; operations without a lane form of their own
/// (`VECTOR = false`: the `libm` transcendentals) run the scalar loop instead.
pub(crate) trait UnOp: Copy {
    /// True when [`UnOp::v`] is a real lane-wise form.
    #[cfg(feature = "simd")]
    const VECTOR: bool = false;
    fn s(self, x: f32) -> f32;
    #[cfg(feature = "simd")]
    #[inline(always)]
    fn v(self, x: V) -> V {
        V::new(x.to_array().map(|e| self.s(e)))
    }
}

/// A two-argument elementwise operation (see [`UnOp`]).
pub(crate) trait BinOp: Copy {
    fn s(self, a: f32, b: f32) -> f32;
    #[cfg(feature = "simd")]
    fn v(self, a: V, b: V) -> V;
}

/// The lane-wise operations, each with the reference scalar it reproduces.
pub(crate) mod ops {
    use super::*;

    macro_rules! bin {
        ($name:ident, $f:path, |$a:ident, $b:ident| $v:expr) => {
            #[derive(Clone, Copy)]
            pub(crate) struct $name;
            impl BinOp for $name {
                #[inline(always)]
                fn s(self, a: f32, b: f32) -> f32 {
                    $f(a, b)
                }
                #[cfg(feature = "simd")]
                #[inline(always)]
                fn v(self, $a: V, $b: V) -> V {
                    $v
                }
            }
        };
    }

    macro_rules! un {
        ($name:ident, $f:path, |$x:ident| $v:expr) => {
            #[derive(Clone, Copy)]
            pub(crate) struct $name;
            impl UnOp for $name {
                #[cfg(feature = "simd")]
                const VECTOR: bool = true;
                #[inline(always)]
                fn s(self, x: f32) -> f32 {
                    $f(x)
                }
                #[cfg(feature = "simd")]
                #[inline(always)]
                fn v(self, $x: V) -> V {
                    $v
                }
            }
        };
    }

    #[cfg(feature = "simd")]
    #[inline(always)]
    fn splat(x: f32) -> V {
        V::splat(x)
    }

    bin!(Add, add::scalar, |a, b| a + b);
    bin!(Sub, sub::scalar, |a, b| a - b);
    // The IEEE product, except `0 · ±inf`: NaN from non-NaN operands becomes the zero signed by
    // the exclusive or of the operands' sign bits (`mul`'s zero preservation).
    bin!(Mul, mul::scalar, |a, b| {
        let p = a * b;
        let zero_times_inf = p.is_nan() & !(a.is_nan() | b.is_nan());
        zero_times_inf.select((a ^ b) & splat(-0.0), p)
    });
    bin!(Div, div::scalar, |a, b| a / b);
    // Masks: ordered comparisons (false when either side is NaN), as in the scalar code.
    bin!(Equal, equal::scalar, |a, b| a
        .simd_eq(b)
        .select(splat(1.0), splat(0.0)));
    bin!(Greater, greater::scalar, |a, b| a
        .simd_gt(b)
        .select(splat(1.0), splat(0.0)));
    bin!(GreaterEqual, greater_equal::scalar, |a, b| a
        .simd_ge(b)
        .select(splat(1.0), splat(0.0)));
    // NaN in either argument gives NaN; ties give `a`.
    bin!(Maximum, maximum::scalar, |a, b| (a.is_nan() | b.is_nan())
        .select(splat(f32::NAN), a.simd_ge(b).select(a, b)));
    bin!(Minimum, minimum::scalar, |a, b| (a.is_nan() | b.is_nan())
        .select(splat(f32::NAN), a.simd_le(b).select(a, b)));

    // `-x` and `|x|` are sign-bit operations (NaN included).
    un!(Neg, neg::scalar, |x| -x);
    un!(Abs, abs::scalar, |x| x.abs());
    un!(Detach, detach::scalar, |x| x);
    // `sqrt` is correctly rounded in IEEE 754, in `libm` and in every vector unit.
    un!(Sqrt, sqrt::scalar, |x| x.sqrt());
    // `x` where `x > 0` or NaN, else `+0.0`.
    un!(Relu, relu::scalar, |x| (x.simd_gt(splat(0.0)) | x.is_nan())
        .select(x, splat(0.0)));
    // `1` where `x > 0`, NaN stays, else `0`.
    un!(Heaviside, heaviside::scalar, |x| x
        .simd_gt(splat(0.0))
        .select(splat(1.0), x.is_nan().select(x, splat(0.0))));
    // `1`, `-1`, NaN stays, else `+0.0`.
    un!(Sign, sign::scalar, |x| x.simd_gt(splat(0.0)).select(
        splat(1.0),
        x.simd_lt(splat(0.0))
            .select(splat(-1.0), x.is_nan().select(x, splat(0.0)))
    ));
}

// ---------------------------------------------------------------------------------------------
// Elementwise loops.

/// `out[i] = op(a[i])`, `a` its own buffer or the output itself.
#[inline(always)]
pub(crate) fn unary<O: UnOp>(op: O, a: Src<'_>, out: &mut [f32]) {
    match a {
        Src::Buf(x) => un_buf(op, x, out),
        Src::Out => un_out(op, out),
    }
}

/// `out[i] = op(a[i], b[i])`, each argument its own buffer or the output itself.
#[inline(always)]
pub(crate) fn binary<O: BinOp>(op: O, a: Src<'_>, b: Src<'_>, out: &mut [f32]) {
    match (a, b) {
        (Src::Buf(x), Src::Buf(y)) => bin_bufs(op, x, y, out),
        (Src::Out, Src::Buf(y)) => bin_lhs(op, y, out),
        (Src::Buf(x), Src::Out) => bin_rhs(op, x, out),
        (Src::Out, Src::Out) => bin_both(op, out),
    }
}

#[cfg(not(feature = "simd"))]
mod loops {
    use super::{BinOp, UnOp};

    pub(super) fn un_buf<O: UnOp>(op: O, x: &[f32], out: &mut [f32]) {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = op.s(v);
        }
    }
    pub(super) fn un_out<O: UnOp>(op: O, out: &mut [f32]) {
        for o in out.iter_mut() {
            *o = op.s(*o);
        }
    }
    pub(super) fn bin_bufs<O: BinOp>(op: O, x: &[f32], y: &[f32], out: &mut [f32]) {
        for ((o, &a), &b) in out.iter_mut().zip(x).zip(y) {
            *o = op.s(a, b);
        }
    }
    pub(super) fn bin_lhs<O: BinOp>(op: O, y: &[f32], out: &mut [f32]) {
        for (o, &b) in out.iter_mut().zip(y) {
            *o = op.s(*o, b);
        }
    }
    pub(super) fn bin_rhs<O: BinOp>(op: O, x: &[f32], out: &mut [f32]) {
        for (o, &a) in out.iter_mut().zip(x) {
            *o = op.s(a, *o);
        }
    }
    pub(super) fn bin_both<O: BinOp>(op: O, out: &mut [f32]) {
        for o in out.iter_mut() {
            *o = op.s(*o, *o);
        }
    }
}

#[cfg(feature = "simd")]
mod loops {
    use super::{BinOp, UnOp, L, V};

    #[inline(always)]
    fn ld(c: &[f32; L]) -> V {
        V::new(*c)
    }

    pub(super) fn un_buf<O: UnOp>(op: O, x: &[f32], out: &mut [f32]) {
        if !O::VECTOR {
            for (o, &v) in out.iter_mut().zip(x) {
                *o = op.s(v);
            }
            return;
        }
        let (oc, ot) = out.as_chunks_mut::<L>();
        let (xc, xt) = x.as_chunks::<L>();
        for (o, a) in oc.iter_mut().zip(xc) {
            *o = op.v(ld(a)).to_array();
        }
        for (o, &a) in ot.iter_mut().zip(xt) {
            *o = op.s(a);
        }
    }
    pub(super) fn un_out<O: UnOp>(op: O, out: &mut [f32]) {
        if !O::VECTOR {
            for o in out.iter_mut() {
                *o = op.s(*o);
            }
            return;
        }
        let (oc, ot) = out.as_chunks_mut::<L>();
        for o in oc.iter_mut() {
            *o = op.v(ld(o)).to_array();
        }
        for o in ot.iter_mut() {
            *o = op.s(*o);
        }
    }
    pub(super) fn bin_bufs<O: BinOp>(op: O, x: &[f32], y: &[f32], out: &mut [f32]) {
        let (oc, ot) = out.as_chunks_mut::<L>();
        let (xc, xt) = x.as_chunks::<L>();
        let (yc, yt) = y.as_chunks::<L>();
        for ((o, a), b) in oc.iter_mut().zip(xc).zip(yc) {
            *o = op.v(ld(a), ld(b)).to_array();
        }
        for ((o, &a), &b) in ot.iter_mut().zip(xt).zip(yt) {
            *o = op.s(a, b);
        }
    }
    pub(super) fn bin_lhs<O: BinOp>(op: O, y: &[f32], out: &mut [f32]) {
        let (oc, ot) = out.as_chunks_mut::<L>();
        let (yc, yt) = y.as_chunks::<L>();
        for (o, b) in oc.iter_mut().zip(yc) {
            *o = op.v(ld(o), ld(b)).to_array();
        }
        for (o, &b) in ot.iter_mut().zip(yt) {
            *o = op.s(*o, b);
        }
    }
    pub(super) fn bin_rhs<O: BinOp>(op: O, x: &[f32], out: &mut [f32]) {
        let (oc, ot) = out.as_chunks_mut::<L>();
        let (xc, xt) = x.as_chunks::<L>();
        for (o, a) in oc.iter_mut().zip(xc) {
            *o = op.v(ld(a), ld(o)).to_array();
        }
        for (o, &a) in ot.iter_mut().zip(xt) {
            *o = op.s(a, *o);
        }
    }
    pub(super) fn bin_both<O: BinOp>(op: O, out: &mut [f32]) {
        let (oc, ot) = out.as_chunks_mut::<L>();
        for o in oc.iter_mut() {
            let v = ld(o);
            *o = op.v(v, v).to_array();
        }
        for o in ot.iter_mut() {
            *o = op.s(*o, *o);
        }
    }
}

use loops::{bin_both, bin_bufs, bin_lhs, bin_rhs, un_buf, un_out};

/// `out[i] = if c[i] != 0 { a[i] } else { b[i] }` (the reference's `select`).
pub(crate) fn select(c: &[f32], a: &[f32], b: &[f32], out: &mut [f32]) {
    #[cfg(feature = "simd")]
    let (out, c, a, b) = {
        let (oc, ot) = out.as_chunks_mut::<L>();
        let (cc, ct) = c.as_chunks::<L>();
        let (ac, at) = a.as_chunks::<L>();
        let (bc, bt) = b.as_chunks::<L>();
        let zero = V::splat(0.0);
        for (((o, c), a), b) in oc.iter_mut().zip(cc).zip(ac).zip(bc) {
            // `c != 0` (NaN included) is `!(c == 0)` with an ordered equality.
            *o = V::new(*c)
                .simd_eq(zero)
                .select(V::new(*b), V::new(*a))
                .to_array();
        }
        (ot, ct, at, bt)
    };
    for (((o, &c), &a), &b) in out.iter_mut().zip(c).zip(a).zip(b) {
        *o = sel::scalar(c, a, b);
    }
}

/// The transpose of an 8×8 block (a permutation: exact whatever the method). With `simd`,
/// `wide`'s `f32x8::transpose` (AVX shuffles where present).
#[inline(always)]
pub(crate) fn transpose8(rows: [[f32; 8]; 8]) -> [[f32; 8]; 8] {
    #[cfg(feature = "simd")]
    {
        wide::f32x8::transpose(rows.map(wide::f32x8::new)).map(wide::f32x8::to_array)
    }
    #[cfg(not(feature = "simd"))]
    {
        let mut t = [[0.0f32; 8]; 8];
        for (r, row) in rows.iter().enumerate() {
            for (c, &v) in row.iter().enumerate() {
                if let Some(slot) = t.get_mut(c).and_then(|tc| tc.get_mut(r)) {
                    *slot = v;
                }
            }
        }
        t
    }
}

// ---------------------------------------------------------------------------------------------
// The matrix product.

/// `out = a · b` for row-major `a: [m, k]`, `b: [k, n]`, `out: [m, n]` (lengths checked by
/// the caller). Each `out[i, j]` starts at `+0.0` and accumulates `a[i, p] * b[p, j]` over
/// increasing `p`, product rounded, then sum rounded: the reference's order.
#[cfg(not(feature = "simd"))]
pub(crate) fn matmul(a: &[f32], b: &[f32], out: &mut [f32], m: usize, k: usize, n: usize) {
    tapeplan_core::ops::matmul::kernel(a, b, out, m, k, n);
}

/// Rows per matrix-product tile. 4 everywhere: with AVX-512, 6 rows (24 accumulators) spilled
/// and measured slower (183 against 261 GFLOP/s on `[784, 64] x [64, 128]`).
#[cfg(feature = "simd")]
const MR: usize = 4;

/// `out = a · b` for row-major `a: [m, k]`, `b: [k, n]`, `out: [m, n]` (lengths checked by
/// the caller).
///
/// # Arithmetic order
/// Each `out[i, j]` starts at `+0.0` and accumulates `acc = acc + a[i, p] * b[p, j]` (product
/// rounded, then sum rounded) over `p = 0, 1, …, k-1`, exactly the reference's order. The
/// kernel keeps a tile of `MR` rows by `NR` vectors of columns in registers over the whole `p`
/// loop: lanes are distinct `j`s, never distinct `p`s. Rows left over run in tiles of 2 and 1
/// rows.
#[cfg(feature = "simd")]
pub(crate) fn matmul(a: &[f32], b: &[f32], out: &mut [f32], m: usize, k: usize, n: usize) {
    if n == 0 || m == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let mut done = rows::<MR>(a, b, out, k, n);
    for step in [2usize, 1] {
        if done >= m {
            break;
        }
        let (Some(ar), Some(or)) = (a.get(done * k..), out.get_mut(done * n..)) else {
            return;
        };
        done += match step {
            2 => rows::<2>(ar, b, or, k, n),
            _ => rows::<1>(ar, b, or, k, n),
        };
    }
}

/// Runs as many whole blocks of `R` rows as fit; answers the rows done.
#[cfg(feature = "simd")]
fn rows<const R: usize>(a: &[f32], b: &[f32], out: &mut [f32], k: usize, n: usize) -> usize {
    let mut done = 0;
    for (ab, ob) in a.chunks_exact(R * k).zip(out.chunks_exact_mut(R * n)) {
        row_block::<R>(ab, b, ob, k, n);
        done += R;
    }
    done
}

#[cfg(feature = "simd")]
#[inline(always)]
fn row_block<const R: usize>(a: &[f32], b: &[f32], out: &mut [f32], k: usize, n: usize) {
    use width::NR;
    let mut j = 0;
    while j + NR * L <= n {
        tile::<R, NR>(a, b, out, j, k, n);
        j += NR * L;
    }
    if NR > 2 && j + 2 * L <= n {
        tile::<R, 2>(a, b, out, j, k, n);
        j += 2 * L;
    }
    while j + L <= n {
        tile::<R, 1>(a, b, out, j, k, n);
        j += L;
    }
    if j < n {
        tile_partial::<R>(a, b, out, j, n - j, k, n);
    }
}

/// Columns `j..j + C·L` of rows `0..R` of the block.
#[cfg(feature = "simd")]
#[inline(always)]
fn tile<const R: usize, const C: usize>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    j: usize,
    k: usize,
    n: usize,
) {
    let mut acc = [[V::splat(0.0); C]; R];
    let a_rows: [&[f32]; R] = core::array::from_fn(|r| a.get(r * k..(r + 1) * k).unwrap_or(&[]));
    // Checked once, so the loop's own checks fold away.
    if a_rows.iter().any(|r| r.len() != k) || j + C * L > n || b.len() < k * n {
        return;
    }
    for p in 0..k {
        let at = p * n + j;
        let Some(bs) = b.get(at..at + C * L) else {
            return;
        };
        let (bc, _) = bs.as_chunks::<L>();
        let bv: [V; C] = core::array::from_fn(|c| bc.get(c).map_or(V::splat(0.0), |x| V::new(*x)));
        for (acc_r, a_r) in acc.iter_mut().zip(&a_rows) {
            let x = V::splat(a_r.get(p).copied().unwrap_or(0.0));
            for (s, &y) in acc_r.iter_mut().zip(&bv) {
                *s += x * y;
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        let at = r * n + j;
        let Some(os) = out.get_mut(at..at + C * L) else {
            return;
        };
        let (oc, _) = os.as_chunks_mut::<L>();
        for (o, s) in oc.iter_mut().zip(acc_r) {
            *o = s.to_array();
        }
    }
}

/// The last `w < L` columns `j..j + w` of rows `0..R` of the block: one vector per row with
/// the unused lanes computed on zeros and never stored.
#[cfg(feature = "simd")]
#[inline(always)]
fn tile_partial<const R: usize>(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    j: usize,
    w: usize,
    k: usize,
    n: usize,
) {
    let mut acc = [V::splat(0.0); R];
    let a_rows: [&[f32]; R] = core::array::from_fn(|r| a.get(r * k..(r + 1) * k).unwrap_or(&[]));
    for (p, brow) in b.chunks_exact(n).enumerate() {
        // A whole vector from `b[p, j..]`: lanes past `w` read the next row's values (any
        // values: lanes are independent and those are never stored); only near the end of
        // `b` is the row copied into zeros.
        let at = p * n + j;
        let y = match b
            .get(at..at + L)
            .and_then(|s| <&[f32; L]>::try_from(s).ok())
        {
            Some(v) => V::new(*v),
            None => {
                let mut lanes = [0.0f32; L];
                if let (Some(dst), Some(src)) = (lanes.get_mut(..w), brow.get(j..j + w)) {
                    dst.copy_from_slice(src);
                }
                V::new(lanes)
            }
        };
        for (s, a_r) in acc.iter_mut().zip(&a_rows) {
            let x = V::splat(a_r.get(p).copied().unwrap_or(0.0));
            *s += x * y;
        }
    }
    for (r, s) in acc.iter().enumerate() {
        let at = r * n + j;
        if let (Some(dst), Some(src)) = (out.get_mut(at..at + w), s.as_array().get(..w)) {
            dst.copy_from_slice(src);
        }
    }
}
