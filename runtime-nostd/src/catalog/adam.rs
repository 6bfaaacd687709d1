//! Adam's update of one tensor in one pass: the three fused chains a plan records for it (the
//! first moment, the second moment, the parameter; `crate::fused::adam_at` recognizes them) run
//! element by element with the values in registers, instead of one tile pass per member.
//!
//! The bits are those of the chains' members run one after another: every element goes through
//! the same operations as the members, in the same order and with the same operand order,
//! through the same lane forms (`lanes::ops`) the catalog's elementwise loops use, or their
//! reference scalars for the elements past the last whole vector. What one pass saves is the
//! tile passes' loads and stores between members and, above all, their serialization: the
//! divider (two divisions and a square root per element) then runs while the loads, products and
//! sums of the neighbouring elements go on, instead of alone in a pass of its own.
//!
//! With PyTorch's names (`torch.optim.Adam`, `foreach=False`), per element:
//!
//! ```text
//! m' = m · β₁ + g · (1 − β₁)                          (`c1` = 1 − β₁ as the plan rounds it)
//! v' = v · β₂ + (g · g) · (1 − β₂)                     (`c2`)
//! p' = p − s1 · (m' / (√v' / s2 + ε))                  (s1 = lr / (1 − β₁ᵗ), s2 = √(1 − β₂ᵗ))
//! ```
//!
//! and AdamW's (`torch.optim.AdamW`) the same with `p · d` for `p` in the last line, `d` the
//! decay factor `1 − lr · weight_decay` as the plan rounds it.
#![allow(clippy::arithmetic_side_effects)]

#[cfg(feature = "simd")]
use super::lanes::ops::MulByFinite;
use super::lanes::ops::{Add, Div, Mul, Sqrt, Sub};
use super::lanes::{BinOp, UnOp};
#[cfg(feature = "simd")]
use super::lanes::{L, V};

/// Where one Adam update reads and writes, as arena offsets in elements: each range `n` elements
/// long (`s1`, `s2` one element). Every pair of ranges is equal or disjoint, and the ranges
/// written (`m_out`, `v_out`, `p_out`) meet no range but the one each replaces (`m`, `v`, `p`
/// respectively), which `crate::fused::adam_at` checks: then one pass gives the bits of the
/// three chains run one after another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AdamAt {
    pub n: usize,
    pub m: usize,
    pub v: usize,
    pub p: usize,
    pub g: usize,
    pub m_out: usize,
    pub v_out: usize,
    pub p_out: usize,
}

/// The update's constants, in the plan's bits: `β₁`, `1 − β₁`, `β₂`, `1 − β₂`, `ε` and
/// AdamW's decay factor from the chains' `fill`s, `s1` and `s2` the arena scalars the chains
/// broadcast.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AdamConsts {
    pub beta1: f32,
    pub c1: f32,
    pub beta2: f32,
    pub c2: f32,
    pub eps: f32,
    pub s1: f32,
    pub s2: f32,
    /// AdamW's `1 − lr · weight_decay`; `None` for Adam.
    pub decay: Option<f32>,
}

/// One element: `(m', v', p')` from `(m, v, p, g)`, the members' operations in their order.
#[inline(always)]
fn element(k: &AdamConsts, m: f32, v: f32, p: f32, g: f32) -> (f32, f32, f32) {
    let m_out = Add.s(Mul.s(m, k.beta1), Mul.s(g, k.c1));
    let v_out = Add.s(Mul.s(v, k.beta2), Mul.s(Mul.s(g, g), k.c2));
    let denom = Add.s(Div.s(Sqrt.s(v_out), k.s2), k.eps);
    let p = k.decay.map_or(p, |d| Mul.s(p, d));
    let p_out = Sub.s(p, Mul.s(k.s1, Div.s(m_out, denom)));
    (m_out, v_out, p_out)
}

/// [`element`] on a vector of lanes: the lane forms of the same operations, each product of a
/// constant by `mul` (`Mul`, or `MulByFinite` when every constant is finite and nonzero: then no
/// product is `0 · inf`, and the two give the same bits) and `g · g` as the plain product (a
/// square is never `0 · inf` either).
#[cfg(feature = "simd")]
#[inline(always)]
fn lanes<M: BinOp>(mul: M, k: &AdamConsts, m: V, v: V, p: V, g: V) -> (V, V, V) {
    let s = V::splat;
    let m_out = Add.v(mul.v(m, s(k.beta1)), mul.v(g, s(k.c1)));
    let v_out = Add.v(mul.v(v, s(k.beta2)), mul.v(MulByFinite.v(g, g), s(k.c2)));
    let denom = Add.v(Div.v(Sqrt.v(v_out), s(k.s2)), s(k.eps));
    let p = k.decay.map_or(p, |d| mul.v(p, s(d)));
    let p_out = Sub.v(p, mul.v(s(k.s1), Div.v(m_out, denom)));
    (m_out, v_out, p_out)
}

/// The whole vectors of the update with [`lanes`]; answers the elements done. Every range is
/// within `arena` (the caller checked).
#[cfg(feature = "simd")]
#[inline(always)]
fn run_lanes<M: BinOp>(mul: M, arena: &mut [f32], at: &AdamAt, k: &AdamConsts) -> usize {
    let load = |arena: &[f32], o: usize, i: usize| -> V {
        let mut x = [0.0f32; L];
        if let Some(src) = arena.get(o + i..o + i + L) {
            x.copy_from_slice(src);
        }
        V::new(x)
    };
    let store = |arena: &mut [f32], o: usize, i: usize, x: V| {
        if let Some(dst) = arena.get_mut(o + i..o + i + L) {
            dst.copy_from_slice(&x.to_array());
        }
    };
    let mut i = 0usize;
    while i + L <= at.n {
        let (m, v, p, g) = (
            load(arena, at.m, i),
            load(arena, at.v, i),
            load(arena, at.p, i),
            load(arena, at.g, i),
        );
        let (m_out, v_out, p_out) = lanes(mul, k, m, v, p, g);
        store(arena, at.m_out, i, m_out);
        store(arena, at.v_out, i, v_out);
        store(arena, at.p_out, i, p_out);
        i += L;
    }
    i
}

/// Runs the update over `arena`: answers `false`, having written nothing, when a range lies
/// outside it.
pub(crate) fn update(arena: &mut [f32], at: &AdamAt, k: &AdamConsts) -> bool {
    let n = at.n;
    let fits = [at.m, at.v, at.p, at.g, at.m_out, at.v_out, at.p_out]
        .iter()
        .all(|&o| o.checked_add(n).is_some_and(|end| end <= arena.len()));
    if !fits {
        return false;
    }
    // Every offset plus `n` is within the arena, so no index below overflows or misses.
    #[cfg(not(feature = "simd"))]
    let mut i = 0usize;
    #[cfg(feature = "simd")]
    let mut i = {
        // The products by a constant without `Mul`'s `0 · inf` test where no constant can
        // make one: five fewer operations per product, and the divider's work overlaps more
        // of its neighbours' (W2's step 586 -> 538 µs, AMD EPYC, peers A/B, 2026-12-05).
        let finite = |x: f32| x.is_finite() && x != 0.0;
        let consts = [k.beta1, k.c1, k.beta2, k.c2, k.s1];
        if consts.into_iter().chain(k.decay).all(finite) {
            run_lanes(MulByFinite, arena, at, k)
        } else {
            run_lanes(Mul, arena, at, k)
        }
    };
    while i < n {
        let get = |o: usize| arena.get(o + i).copied().unwrap_or(0.0);
        let (m_out, v_out, p_out) = element(k, get(at.m), get(at.v), get(at.p), get(at.g));
        for (o, x) in [(at.m_out, m_out), (at.v_out, v_out), (at.p_out, p_out)] {
            if let Some(d) = arena.get_mut(o + i) {
                *d = x;
            }
        }
        i += 1;
    }
    true
}
