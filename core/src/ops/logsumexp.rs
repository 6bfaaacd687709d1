//! `logsumexp`: `log(Σ exp(x))` of `x` down to a target shape that broadcasts back (the reduced
//! axes are those the target keeps at extent 1, as `sum_to`'s; PyTorch's `torch.logsumexp` with
//! `keepdim=True` over those axes).
//!
//! An instruction, not a composition of `max_to`, `exp`, `sum_to`, `log` and `add`: the
//! composition needs an arena buffer of `x`'s size (the shifted exponentials, before they are
//! summed) where this kernel streams, and a fully masked row (every element `-inf`) needs a
//! shift the composition cannot form from its own `max_to` without a further select (DESIGN.md,
//! "what earns an instruction"). `log_softmax` and `softmax` are compositions over it (see
//! [`crate::Recordable::log_softmax`]).
//!
//! # Non-finite rows
//! A row of `-inf` (fully masked) gives `-inf` (PyTorch's and JAX's forward), not
//! `-inf − (-inf) = NaN`; a row holding `+inf` gives `+inf`; a row holding NaN gives NaN.
//!
//! Rule: `x̄ += broadcast(ḡ) · exp(x − broadcast(ŷ))`, the softmax weights, with
//! `ŷ = select(equal(y, -inf), 0, y)`: where the row is fully masked (`y = -inf`) every weight is
//! `exp(-inf − 0) = 0`, so a fully masked row gets a zero gradient (PyTorch's is
//! `exp(-inf − (-inf)) = NaN`): its value does not move when any of its `-inf` elements moves by
//! a finite amount. Partially masked rows give their `-inf` elements the weight `0` as well.

use crate::Element;

use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{MathProfile, Recordable, Shape, MAX_RANK};

/// The shape rule: `sum_to`'s (the target broadcasts back to `x`'s shape).
pub(crate) use super::sum_to::infer;

/// Calls `f` with the flat index of every element of `x` that reduces into output `o`, in
/// increasing index order. `out_shape` broadcasts to `x_shape` (the shape rule checked it).
fn for_each_in_group(x_shape: Shape, out_shape: Shape, o: usize, mut f: impl FnMut(usize)) {
    let (xd, rank) = (x_shape.dims(), x_shape.rank());
    let off = rank.saturating_sub(out_shape.rank());
    let od = out_shape.dims();
    // Per axis of x: (extent, row-major stride, reduced); the first element of the group.
    let mut axes = [(1usize, 0usize, false); MAX_RANK];
    let (mut stride, mut rem, mut first) = (1usize, o, 0usize);
    for (a, slot) in axes.iter_mut().enumerate().take(rank).rev() {
        let extent = xd.get(a).copied().unwrap_or(1);
        let kept = a
            .checked_sub(off)
            .and_then(|b| od.get(b).copied())
            .unwrap_or(1);
        if kept != 1 {
            first += rem.checked_rem(kept).unwrap_or(0) * stride;
            rem = rem.checked_div(kept).unwrap_or(0);
        }
        *slot = (extent, stride, kept == 1);
        stride = stride.saturating_mul(extent);
    }
    // An odometer over the reduced axes, the last one fastest: row-major order.
    let total = axes
        .iter()
        .take(rank)
        .filter(|a| a.2)
        .fold(1usize, |t, a| t.saturating_mul(a.0));
    let mut count = [0usize; MAX_RANK];
    let mut i = first;
    for _ in 0..total {
        f(i);
        for (&(extent, stride, reduced), c) in axes.iter().zip(count.iter_mut()).take(rank).rev() {
            if !reduced {
                continue;
            }
            *c += 1;
            i += stride;
            if *c < extent {
                break;
            }
            i -= stride * extent;
            *c = 0;
        }
    }
}

/// The reference kernel.
///
/// # Arithmetic order (the definition of the bits)
/// For each output, over its inputs in increasing row-major index order: first the maximum `m`
/// as `max_to` takes it (from `-inf`; NaN wins; the first of equal values); the shift `c` is `m`
/// when `m` is finite, else `+0`; then `acc` starts at `+0` and adds `exp(x − c)` for each
/// input in the same order; the output is `ln(acc) + c`. `exp` and `ln` are the math profile's.
pub fn kernel<E: Element>(
    x: &[E],
    x_shape: Shape,
    out: &mut [E],
    out_shape: Shape,
    math: MathProfile,
) {
    let fast = matches!(math, MathProfile::Fast);
    let at = |i: usize| x.get(i).copied().unwrap_or(E::ZERO);
    for (o, y) in out.iter_mut().enumerate() {
        let mut m = E::NEG_INFINITY;
        for_each_in_group(x_shape, out_shape, o, |i| {
            let v = at(i);
            if !m.is_nan() && (v.is_nan() || v > m) {
                m = v;
            }
        });
        let finite = m > E::NEG_INFINITY && m < -E::NEG_INFINITY;
        let c = if finite { m } else { E::ZERO };
        let mut acc = E::ZERO;
        for_each_in_group(x_shape, out_shape, o, |i| {
            let d = at(i) - c;
            acc = acc + if fast { d.exp_fast() } else { d.exp() };
        });
        *y = if fast { acc.ln_fast() } else { acc.ln() } + c;
    }
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    kernel(k.arg(0), k.shape(0), k.out, k.out_shape, k.math);
    Ok(())
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let d = want(v.wants[0], || {
        let x = v.args[0];
        let (s, ys) = (r.shape_of(x), r.shape_of(v.out));
        let neg_inf = r.fill(f32::NEG_INFINITY, ys)?;
        let masked = r.equal(v.out, &neg_inf)?;
        let zero = r.fill(0.0, ys)?;
        let shift = r.select(&masked, &zero, v.out)?;
        let shift = r.broadcast(&shift, s)?;
        let centred = r.sub(x, &shift)?;
        let weights = r.exp(&centred)?;
        let g = r.broadcast(v.cotangent, s)?;
        r.mul(&g, &weights)
    })?;
    Ok([d, None, None])
}

#[cfg(test)]
mod tests {
    use crate::{MathProfile, Shape};

    fn lse(x: &[f32], xs: Shape, outs: Shape) -> [f32; 4] {
        let mut out = [0.0f32; 4];
        super::kernel(x, xs, &mut out[..outs.elems()], outs, MathProfile::Precise);
        out
    }

    #[test]
    fn literal_against_f64() {
        let x = [1.0f32, 2.0, 3.0, -1.0, 0.5, 100.0];
        let rows = lse(&x, Shape::matrix(2, 3), Shape::matrix(2, 1));
        let f64_lse = |r: &[f32]| {
            let m = r
                .iter()
                .fold(f64::NEG_INFINITY, |a, &b| a.max(f64::from(b)));
            (r.iter().map(|&v| (f64::from(v) - m).exp()).sum::<f64>()).ln() + m
        };
        for (k, row) in x.chunks(3).enumerate() {
            let want = f64_lse(row);
            assert!((f64::from(rows[k]) - want).abs() <= 2e-7 * want.abs().max(1.0));
        }
        // Over the columns (axis 0): [lse(1,-1), lse(2,0.5), lse(3,100)].
        let cols = lse(&x, Shape::matrix(2, 3), Shape::matrix(1, 3));
        for c in 0..3 {
            let want = f64_lse(&[x[c], x[3 + c]]);
            assert!((f64::from(cols[c]) - want).abs() <= 2e-7 * want.abs().max(1.0));
        }
        // Over everything, to a scalar.
        let all = lse(&x, Shape::matrix(2, 3), Shape::SCALAR);
        assert!((f64::from(all[0]) - f64_lse(&x)).abs() <= 2e-5);
        // Large values do not overflow: lse(1000, 1000) = 1000 + ln 2.
        let big = lse(&[1000.0, 1000.0], Shape::vector(2), Shape::vector(1));
        assert_eq!(big[0], 1000.0 + core::f32::consts::LN_2);
    }

    #[test]
    fn non_finite_rows() {
        let inf = f32::INFINITY;
        let x = [-inf, -inf, -inf, 0.0, -inf, 1.0, inf, 2.0, f32::NAN];
        let out = lse(&x[..], Shape::matrix(3, 3), Shape::matrix(3, 1));
        assert_eq!(out[0], -inf, "a fully masked row is -inf, not NaN");
        assert_eq!(out[1], libm::logf(1.0 + libm::expf(1.0)));
        assert!(out[2].is_nan());
        let out = lse(&[inf, 2.0], Shape::vector(2), Shape::vector(1));
        assert_eq!(out[0], inf);
        // The work cap counts both passes: 2 · 6 + 2.
        let w = crate::ops::work(
            crate::Opcode::LogSumExp,
            &[Shape::matrix(2, 3)],
            Shape::matrix(2, 1),
        );
        assert_eq!(w, 14);
        // An empty reduction is ln(0) = -inf.
        let out = lse(&[], Shape::matrix(0, 3), Shape::matrix(1, 3));
        assert_eq!(&out[..3], &[-inf; 3]);
    }
}
