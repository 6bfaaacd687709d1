//! `matmul`: the matrix product `[m, k] x [k, n] -> [m, n]`, and the batched product
//! `[b, m, k] x [b, k, n] -> [b, m, n]` (one product per batch index, PyTorch's `bmm`; ONNX's
//! `MatMul` over rank-3 operands of one batch extent — an importer broadcasts other batch
//! shapes first).
//!
//! Rule: `Ā += ḡ · Bᵀ`, `B̄ += Aᵀ · ḡ` (spoken as `matmul` and `transpose`, which transposes the
//! last two axes: batch by batch at rank 3).

use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule: `[m, k] x [k, n] -> [m, n]`; `[b, m, k] x [b, k, n] -> [b, m, n]`.
///
/// # Errors
/// [`OpError::NotMatrix`] for an argument of rank other than 2 or 3;
/// [`OpError::ShapeMismatch`] for arguments of two ranks, or when the inner (or the batch)
/// extents differ.
#[inline(always)]
pub fn infer(op: Opcode, _attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    infer_transposed(op, args, Transposed { a: false, b: false })
}

/// `[batch, rows, cols]` of a matrix (`batch = 1`) or of a batch of matrices.
#[inline(never)]
pub(crate) fn batched(s: Shape) -> [usize; 3] {
    let d = s.dims();
    if s.rank() == 3 {
        [d[0], d[1], d[2]]
    } else {
        [1, d[0], d[1]]
    }
}

/// The reference kernel. Row-major `a: [m, k]`, `b: [k, n]`, `out: [m, n]`.
///
/// # Arithmetic order (the definition of the bits)
/// Each output element is accumulated on its own, starting from `+0.0`, over `p = 0, 1, …, k-1`
/// in increasing order: `acc = acc + a[i, p] * b[p, j]`, a rounded product then a rounded sum
/// (never a fused multiply-add: this is the `separate` arithmetic profile's kernel; [`kernel_fma`]
/// is the `fma` profile's). A vectorized kernel vectorizes across `j` (independent outputs)
/// and keeps this order for each output.
///
/// Stops early (writes nothing further) if a buffer is shorter than its shape needs; the
/// dispatcher [`super::eval`] checks lengths first.
pub fn kernel<E: Element>(a: &[E], b: &[E], out: &mut [E], m: usize, k: usize, n: usize) {
    accumulate(a, b, out, (m, k, n), |x, y, acc| acc + x * y);
}

/// The `fma` arithmetic profile's reference kernel ([`crate::ArithProfile::Fma`]). Row-major
/// `a: [m, k]`, `b: [k, n]`, `out: [m, n]`.
///
/// # Arithmetic order (the definition of the bits)
/// As [`kernel`], with each step one fused multiply-add: each output element starts from `+0.0`
/// and, over `p = 0, 1, …, k-1` in increasing order, becomes `acc = fma(a[i, p], b[p, j], acc)`,
/// the exact `a[i, p] · b[p, j] + acc` rounded once to nearest-even (IEEE-754
/// `fusedMultiplyAdd`; [`Element::fused_mul_add`], `libm::fmaf` for `f32`). A vectorized kernel
/// may use a hardware fused multiply-add, which gives the same bits.
///
/// Stops early (writes nothing further) if a buffer is shorter than its shape needs.
pub fn kernel_fma<E: Element>(a: &[E], b: &[E], out: &mut [E], m: usize, k: usize, n: usize) {
    accumulate(a, b, out, (m, k, n), |x, y, acc| x.fused_mul_add(y, acc));
}

/// The loop both reference kernels share: each `out[i, j]` starts at `+0.0` and becomes
/// `step(a[i, p], b[p, j], acc)` over increasing `p`. Writes nothing if a buffer is shorter
/// than its shape needs.
#[inline(always)]
fn accumulate<E: Element>(
    a: &[E],
    b: &[E],
    out: &mut [E],
    (m, k, n): (usize, usize, usize),
    step: impl Fn(E, E, E) -> E,
) {
    if a.len() < m * k || b.len() < k * n || out.len() < m * n {
        return;
    }
    for i in 0..m {
        let row = &mut out[i * n..(i + 1) * n];
        for o in row.iter_mut() {
            *o = E::ZERO;
        }
        for p in 0..k {
            let x = a[i * k + p];
            let brow = &b[p * n..(p + 1) * n];
            for (o, &y) in row.iter_mut().zip(brow) {
                *o = step(x, y, *o);
            }
        }
    }
}

/// Which operands a product reads transposed: `matmul_tn` reads `a` transposed, `matmul_nt`
/// reads `b` transposed (BLAS's `transa` / `transb`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transposed {
    /// `a` is stored `[k, m]` and read as `aᵀ: [m, k]`.
    pub a: bool,
    /// `b` is stored `[n, k]` and read as `bᵀ: [k, n]`.
    pub b: bool,
}

/// The reference kernel of a product that reads an operand transposed (`matmul_tn`,
/// `matmul_nt`): `out = op(a) · op(b)` with `op(x) = xᵀ` where `t` says so. Row-major storage:
/// `a: [m, k]` (or `[k, m]` when `t.a`), `b: [k, n]` (or `[n, k]` when `t.b`), `out: [m, n]`.
///
/// # Arithmetic order (the definition of the bits)
/// [`kernel`]'s (or, with `fma`, [`kernel_fma`]'s) over the transposed operand: each output
/// element starts from `+0.0` and accumulates `op(a)[i, p] · op(b)[p, j]` over
/// `p = 0, 1, …, k-1` in increasing order, so the result is bit for bit `matmul` of the
/// materialized transpose (a transpose is a permutation: exact).
///
/// Writes nothing if a buffer is shorter than its shape needs.
pub fn kernel_transposed<E: Element>(
    a: &[E],
    b: &[E],
    out: &mut [E],
    (m, k, n): (usize, usize, usize),
    t: Transposed,
    fma: bool,
) {
    if a.len() < m * k || b.len() < k * n || out.len() < m * n {
        return;
    }
    // A build without the `fma` profile links no fused multiply-add (its readers refuse such
    // plans before anything runs).
    let fma = fma && cfg!(feature = "arith-fma");
    let step = |x: E, y: E, acc: E| {
        if fma {
            x.fused_mul_add(y, acc)
        } else {
            acc + x * y
        }
    };
    // The loops follow storage, so that the inner one walks contiguous slices (one strided
    // index per output row at most): on a core without the kernel catalog (Cortex-M) this is
    // the product's speed. Each output's order over `p` is the same either way.
    if t.b {
        // `op(b)[p, j] = b[j, p]`: each output is a dot product with `b`'s row `j`.
        for i in 0..m {
            for j in 0..n {
                let mut acc = E::ZERO;
                for (p, &y) in b[j * k..(j + 1) * k].iter().enumerate() {
                    let x = if t.a { a[p * m + i] } else { a[i * k + p] };
                    acc = step(x, y, acc);
                }
                out[i * n + j] = acc;
            }
        }
    } else {
        // `b` stored `[k, n]`: an output row accumulates `b`'s rows in increasing `p`, as
        // [`kernel`] does.
        for i in 0..m {
            let row = &mut out[i * n..(i + 1) * n];
            for o in row.iter_mut() {
                *o = E::ZERO;
            }
            for p in 0..k {
                let x = if t.a { a[p * m + i] } else { a[i * k + p] };
                for (o, &y) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                    *o = step(x, y, *o);
                }
            }
        }
    }
}

/// [`kernel_transposed`] once per batch index, for the `node` kernels of `matmul_tn` and
/// `matmul_nt`: the product's `[batch, m, k, n]` from the argument shapes (`t` says which are
/// stored transposed).
pub(crate) fn eval_transposed<E: Element>(k: Kernel<'_, E>, t: Transposed) -> Result<(), OpError> {
    let ([batch, a0, a1], [_, b0, b1]) = (batched(k.shape(0)), batched(k.shape(1)));
    let (m, kk) = if t.a { (a1, a0) } else { (a0, a1) };
    let n = if t.b { b0 } else { b1 };
    let fma = k.arith == crate::ArithProfile::Fma;
    let (a, b) = (k.arg(0), k.arg(1));
    let (ra, rb, ro) = (m * kk, kk * n, m * n);
    for i in 0..batch {
        if let (Some(a), Some(b), Some(out)) = (
            a.get(i * ra..(i + 1) * ra),
            b.get(i * rb..(i + 1) * rb),
            k.out.get_mut(i * ro..(i + 1) * ro),
        ) {
            kernel_transposed(a, b, out, (m, kk, n), t, fma);
        }
    }
    Ok(())
}

/// The shape rule of a product that reads operands transposed (`t`): `matmul`'s over the
/// transposed shapes.
pub(crate) fn infer_transposed(
    op: Opcode,
    args: &[Shape],
    t: Transposed,
) -> Result<Shape, OpError> {
    let (a, b) = (super::nth(args, 0), super::nth(args, 1));
    for s in [a, b] {
        if s.rank() != 2 && s.rank() != 3 {
            return Err(OpError::NotMatrix { op, shape: s });
        }
    }
    let bad = OpError::ShapeMismatch { op, lhs: a, rhs: b };
    if a.rank() != b.rank() {
        return Err(bad);
    }
    let ([batch, a0, a1], [batch2, b0, b1]) = (batched(a), batched(b));
    let (m, k) = if t.a { (a1, a0) } else { (a0, a1) };
    let (k2, n) = if t.b { (b1, b0) } else { (b0, b1) };
    if k != k2 || batch != batch2 {
        return Err(bad);
    }
    if a.rank() == 2 {
        Ok(Shape::new(&[m, n])?)
    } else {
        Ok(Shape::new(&[batch, m, n])?)
    }
}

/// Through [`kernel`] (or [`kernel_fma`] under the `fma` arithmetic profile), once per batch index (a matrix is one batch).
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let [batch, m, kk] = batched(k.shape(0));
    let n = batched(k.shape(1))[2];
    let (a, b) = (k.arg(0), k.arg(1));
    for i in 0..batch {
        let (ra, rb, ro) = (m * kk, kk * n, m * n);
        if let (Some(a), Some(b), Some(out)) = (
            a.get(i * ra..(i + 1) * ra),
            b.get(i * rb..(i + 1) * rb),
            k.out.get_mut(i * ro..(i + 1) * ro),
        ) {
            match k.arith {
                #[cfg(feature = "arith-fma")]
                crate::ArithProfile::Fma => kernel_fma(a, b, out, m, kk, n),
                _ => kernel(a, b, out, m, kk, n),
            }
        }
    }
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let g = v.cotangent;
    let (a, b) = (v.args[0], v.args[1]);
    let da = want(v.wants[0], || {
        let bt = r.transpose(b)?;
        r.matmul(g, &bt)
    })?;
    let db = want(v.wants[1], || {
        let at = r.transpose(a)?;
        r.matmul(&at, g)
    })?;
    Ok([da, db, None])
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    /// `kernel` (`matmul_tn`'s or `matmul_nt`'s, reading operands transposed as `t` says) gives
    /// the bits of `matmul` over the materialized transposes, in both arithmetic profiles: odd
    /// extents, sums that round, and the order over `p` that shows (`1e8 + 1 − 1e8`).
    #[allow(clippy::type_complexity)]
    pub(crate) fn assert_same_bits_as_matmul_of_the_transpose(
        t: Transposed,
        kernel: fn(&[f32], &[f32], &mut [f32], (usize, usize, usize), bool),
    ) {
        let transposed = |x: &[f32], r: usize, c: usize| {
            let mut out = vec![0.0f32; r * c];
            crate::ops::transpose::kernel(x, &mut out, r, c);
            out
        };
        for (m, k, n) in [(1, 1, 1), (3, 3, 1), (2, 5, 3), (3, 17, 2), (17, 33, 3)] {
            let val = |i: usize, s: usize| {
                let x = (i * 7 + s) as f32 * 0.37 - 1.3;
                if i.is_multiple_of(5) {
                    x * 1e8
                } else {
                    x
                }
            };
            let a: Vec<f32> = (0..m * k).map(|i| val(i, 1)).collect();
            let b: Vec<f32> = (0..k * n).map(|i| val(i, 2)).collect();
            // Stored as the product reads them: `a` as `[k, m]`, `b` as `[n, k]`, when transposed.
            let sa = if t.a { transposed(&a, m, k) } else { a.clone() };
            let sb = if t.b { transposed(&b, k, n) } else { b.clone() };
            for fma in [false, cfg!(feature = "arith-fma")] {
                let mut plain = vec![0.0f32; m * n];
                if fma {
                    kernel_fma(&a, &b, &mut plain, m, k, n);
                } else {
                    super::kernel(&a, &b, &mut plain, m, k, n);
                }
                let mut out = vec![9.0f32; m * n];
                kernel(&sa, &sb, &mut out, (m, k, n), fma);
                let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&out), bits(&plain), "{m}x{k}x{n}, fma {fma}");
            }
        }
    }

    #[test]
    fn literal() {
        // [[1, 2], [3, 4]] x [[5, 6], [7, 8]] = [[19, 22], [43, 50]]
        let mut out = [0.0f32; 4];
        kernel(&[1., 2., 3., 4.], &[5., 6., 7., 8.], &mut out, 2, 2, 2);
        assert_eq!(out, [19., 22., 43., 50.]);
    }

    #[test]
    fn order_is_increasing_k_from_zero() {
        // 1e8 + 1 - 1e8 in f32, left to right: (0 + 1e8) + 1 = 1e8, then - 1e8 = 0.
        let mut out = [9.0f32];
        kernel(&[1e8, 1.0, -1e8], &[1.0, 1.0, 1.0], &mut out, 1, 3, 1);
        assert_eq!(out, [0.0]);
    }

    #[test]
    fn fma_rounds_once() {
        // (1 + 2^-12)^2 = 1 + 2^-11 + 2^-24: separately, the product rounds to 1 + 2^-11 (a
        // tie, to even) and the sum with -1 gives 2^-11; fused, the exact 2^-11 + 2^-24.
        let x = 1.0 + f32::EPSILON * 2048.0; // 1 + 2^-12
        let (a, b) = ([-1.0f32, x], [1.0f32, x]);
        let (mut sep, mut fused) = ([0.0f32], [0.0f32]);
        kernel(&a, &b, &mut sep, 1, 2, 1);
        kernel_fma(&a, &b, &mut fused, 1, 2, 1);
        assert_eq!(sep[0], 2.0f32.powi(-11));
        assert_eq!(fused[0], 2.0f32.powi(-11) + 2.0f32.powi(-24));
    }

    #[test]
    fn fma_order_is_increasing_k_from_zero() {
        // fma(1e8, 1, 0) = 1e8; fma(1, 1, 1e8) = 1e8; fma(-1e8, 1, 1e8) = 0.
        let mut out = [9.0f32];
        kernel_fma(&[1e8, 1.0, -1e8], &[1.0, 1.0, 1.0], &mut out, 1, 3, 1);
        assert_eq!(out, [0.0]);
    }

    #[test]
    fn shape_rule() {
        let a = Shape::matrix(2, 3);
        let (op, none) = (Opcode::MatMul, Attr::None);
        assert_eq!(
            infer(op, none, &[a, Shape::matrix(3, 4)]),
            Ok(Shape::matrix(2, 4))
        );
        assert!(infer(op, none, &[a, Shape::matrix(2, 4)]).is_err());
        assert!(infer(op, none, &[Shape::vector(3), a]).is_err());
        // Batched: one batch extent, inner extents agree; ranks do not mix.
        let a3 = Shape::new(&[5, 2, 3]).unwrap();
        let b3 = Shape::new(&[5, 3, 4]).unwrap();
        assert_eq!(
            infer(op, none, &[a3, b3]),
            Ok(Shape::new(&[5, 2, 4]).unwrap())
        );
        assert!(infer(op, none, &[a3, Shape::new(&[4, 3, 4]).unwrap()]).is_err());
        assert!(infer(op, none, &[a3, Shape::matrix(3, 4)]).is_err());
        assert!(infer(op, none, &[Shape::new(&[1, 1, 2, 3]).unwrap(), a]).is_err());
    }

    #[test]
    fn batched_literal() {
        // Two batches: [[1, 2]] x [[3], [4]] = [[11]], [[5, 6]] x [[7], [8]] = [[83]].
        let (a, b) = (
            Shape::new(&[2, 1, 2]).unwrap(),
            Shape::new(&[2, 2, 1]).unwrap(),
        );
        let mut out = [0.0f32; 2];
        crate::ops::eval(
            Opcode::MatMul,
            Attr::None,
            crate::MathProfile::Precise,
            &[&[1., 2., 5., 6.], &[3., 4., 7., 8.]],
            &[a, b],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [11., 83.]);
    }
}
