//! `sgd_matmul`: plain SGD's update of a weight fused with its gradient's matrix product,
//! `w − lr · (aᵀ · b)` for `w: [m, n]`, `a: [k, m]`, `b: [k, n]` (the weight gradient of
//! `y = x · w` is `xᵀ · ḡ`: `a` is the layer's input `x`, `b` the cotangent `ḡ` of its output, `k`
//! the batch). The planner writes it over `w` in place (the one non-elementwise instruction that
//! may: validation allows it over its first argument only), so no gradient buffer exists: the
//! fused SGD update of issue 14 ("Memory, beyond the anchors").
//!
//! It earns an instruction because no composition of the others computes it without the
//! `[m, n]` gradient buffer it exists to save. Its bits are exactly those of the unfused
//! `sub(w, mul(matmul(transpose(a), b), fill(lr)))`, the SGD step the optimizer records: each
//! gradient element is `matmul`'s dot product in `matmul`'s order (under the plan's arithmetic
//! profile), then `mul`'s rounded product with `lr` (zero preservation included), then `sub`'s
//! rounded difference. The planner also uses it for the transposed form of a `[n, m]` weight
//! (`nn::Linear`'s `y = x · wᵀ`, whose gradient is `(xᵀ · ḡ)ᵀ = ḡᵀ · x`): `a = ḡ`, `b = x`. Each
//! step's product is then `ḡ · x` where the unfused plan forms `x · ḡ`, which IEEE-754 rounds
//! identically (multiplication, and fused multiply-add in its first two operands, are
//! commutative; only a NaN's payload may differ, and NaNs compare as one class).
//!
//! Rule: `w̄ += ḡ`, `ā += −lr · (b · ḡᵀ)`, `b̄ += −lr · (a · ḡ)` (spoken as `matmul`, `transpose`
//! and a scale: `mul` by a `fill`).

use super::{mul, nth, sub, want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule: `w: [m, n]`, `a: [k, m]`, `b: [k, n]` give `[m, n]`.
///
/// # Errors
/// [`OpError::NotMatrix`] for an argument of rank other than 2; [`OpError::ShapeMismatch`] when
/// `a`'s second extent is not `w`'s first, `b`'s second is not `w`'s second, or `a` and `b`
/// differ in their first (the batch).
#[inline(always)]
pub fn infer(op: Opcode, _attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (w, a, b) = (nth(args, 0), nth(args, 1), nth(args, 2));
    for s in [w, a, b] {
        if s.rank() != 2 {
            return Err(OpError::NotMatrix { op, shape: s });
        }
    }
    let (wd, ad, bd) = (w.dims(), a.dims(), b.dims());
    if ad[1] != wd[0] {
        return Err(OpError::ShapeMismatch { op, lhs: w, rhs: a });
    }
    if bd[1] != wd[1] || bd[0] != ad[0] {
        return Err(OpError::ShapeMismatch { op, lhs: a, rhs: b });
    }
    Ok(w)
}

/// The reference kernel, in place: `w: [m, n]` holds the weight and receives
/// `w[i, j] − lr · Σ_p a[p, i] · b[p, j]`; row-major `a: [k, m]`, `b: [k, n]`.
///
/// # Arithmetic order (the definition of the bits)
/// For each `(i, j)`: `g` starts at `+0.0` and accumulates over `p = 0, 1, …, k − 1` in
/// increasing order, `g = g + a[p, i] · b[p, j]` (a rounded product, then a rounded sum: the
/// `separate` arithmetic profile, [`crate::ops::matmul::kernel`]'s step), or with `fma`,
/// `g = fma(a[p, i], b[p, j], g)` (the `fma` profile, [`crate::ops::matmul::kernel_fma`]'s step);
/// then `s = mul(g, lr)` ([`crate::ops::mul::scalar`]: rounded, `0 · ±inf = ±0`) and
/// `w[i, j] = sub(w[i, j], s)` ([`crate::ops::sub::scalar`]: rounded). The profile changes only
/// the sum, as it changes only `matmul`. Each `w[i, j]` is read once, before it is written, and
/// no other element of `w` is read: the order of `(i, j)` cannot show.
///
/// Writes nothing if a buffer is shorter than its shape needs.
pub fn kernel<E: Element>(
    w: &mut [E],
    a: &[E],
    b: &[E],
    (k, m, n): (usize, usize, usize),
    lr: E,
    fma: bool,
) {
    if w.len() < m * n || a.len() < k * m || b.len() < k * n {
        return;
    }
    // A build without the `fma` profile links no fused multiply-add (its readers refuse such
    // plans before anything runs).
    let fma = fma && cfg!(feature = "arith-fma");
    for i in 0..m {
        for j in 0..n {
            let mut g = E::ZERO;
            for p in 0..k {
                let (x, y) = (a[p * m + i], b[p * n + j]);
                g = if fma {
                    x.fused_mul_add(y, g)
                } else {
                    g + x * y
                };
            }
            let o = &mut w[i * n + j];
            *o = sub::scalar(*o, mul::scalar(g, lr));
        }
    }
}

/// Through [`kernel`], out of place: `out` first receives `w`, then the update. (The runtime
/// runs the in-place form over `w`'s own range: the same bits.)
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let [kk, m] = dims2(k.shape(1));
    let n = dims2(k.shape(2))[1];
    let w = k.arg(0);
    if k.out.len() != w.len() {
        return Ok(());
    }
    k.out.copy_from_slice(w);
    let lr = E::from_f32(k.attr.scalar());
    kernel(
        k.out,
        k.arg(1),
        k.arg(2),
        (kk, m, n),
        lr,
        k.arith == crate::ArithProfile::Fma,
    );
    Ok(())
}

/// A matrix's two extents.
pub(crate) fn dims2(s: Shape) -> [usize; 2] {
    let d = s.dims();
    [
        d.first().copied().unwrap_or(0),
        d.get(1).copied().unwrap_or(0),
    ]
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let g = v.cotangent;
    let (a, b) = (v.args[1], v.args[2]);
    let lr = v.attr.scalar();
    let dw = want(v.wants[0], || Ok(g.clone()))?;
    let da = want(v.wants[1], || {
        let gt = r.transpose(g)?;
        let p = r.matmul(b, &gt)?;
        r.scale(&p, -lr)
    })?;
    let db = want(v.wants[2], || {
        let p = r.matmul(a, g)?;
        r.scale(&p, -lr)
    })?;
    Ok([dw, da, db])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::matmul;
    use alloc::vec;
    use alloc::vec::Vec;

    /// The unfused SGD step over whole buffers: `matmul(aᵀ, b)`, `mul` by `lr`, `sub` from `w`.
    fn unfused(
        w: &[f32],
        a: &[f32],
        b: &[f32],
        (k, m, n): (usize, usize, usize),
        lr: f32,
    ) -> Vec<f32> {
        let mut at = vec![0.0f32; m * k];
        for p in 0..k {
            for i in 0..m {
                at[i * k + p] = a[p * m + i];
            }
        }
        let mut g = vec![0.0f32; m * n];
        matmul::kernel(&at, b, &mut g, m, k, n);
        w.iter()
            .zip(&g)
            .map(|(&w, &g)| sub::scalar(w, mul::scalar(g, lr)))
            .collect()
    }

    #[test]
    fn literal() {
        // w = [[1, 2]], a = [[1], [2]] (k = 2, m = 1), b = [[3, 4], [5, 6]]:
        // aᵀ·b = [[1·3 + 2·5, 1·4 + 2·6]] = [[13, 16]]; w − 0.5 · that = [[−5.5, −6]].
        let mut w = [1.0f32, 2.0];
        kernel(
            &mut w,
            &[1.0, 2.0],
            &[3.0, 4.0, 5.0, 6.0],
            (2, 1, 2),
            0.5,
            false,
        );
        assert_eq!(w, [-5.5, -6.0]);
    }

    #[test]
    fn same_bits_as_the_unfused_step() {
        // Sums that round, and the order over `p` that shows (1e8 + 1 − 1e8 = 0 left to right).
        let (k, m, n) = (3, 2, 2);
        let a = [1e8f32, 0.1, 1.0, 0.3, -1e8, 0.7];
        let b = [1.0f32, 0.2, 1.0, -0.4, 1.0, 0.9];
        let w = [0.25f32, -1.5, 3.0, 1e-3];
        let lr = 0.1f32;
        let mut fused = w;
        kernel(&mut fused, &a, &b, (k, m, n), lr, false);
        let expected = unfused(&w, &a, &b, (k, m, n), lr);
        let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&fused), bits(&expected));
        assert_eq!(fused[0], 0.25, "1e8 + 1 − 1e8 sums to 0 in increasing p");
    }

    #[test]
    fn zero_learning_rate_keeps_an_infinite_gradient_out() {
        // mul's zero preservation: inf · 0 = 0, so w stays (IEEE would give NaN).
        let mut w = [2.0f32];
        kernel(&mut w, &[f32::INFINITY], &[1.0], (1, 1, 1), 0.0, false);
        assert_eq!(w, [2.0]);
    }

    #[test]
    fn shape_rule() {
        let op = Opcode::SgdMatMul;
        let (w, a, b) = (
            Shape::matrix(3, 4),
            Shape::matrix(5, 3),
            Shape::matrix(5, 4),
        );
        assert_eq!(infer(op, Attr::NONE, &[w, a, b]), Ok(w));
        assert!(infer(op, Attr::NONE, &[w, b, a]).is_err());
        assert!(infer(op, Attr::NONE, &[w, a, Shape::matrix(6, 4)]).is_err());
        assert!(infer(op, Attr::NONE, &[Shape::vector(12), a, b]).is_err());
    }
}
