//! Optimizers as recorded spec: each update is written once against [`Recordable`], so recording
//! it appends update nodes to the training tape (the compiled path) and computing it is the
//! oracle's update. One body, two readings, the same bits.
//!
//! Each optimizer names its state (moments, running powers, the step counter) as extra
//! persistent values next to the parameters (`w1.m`, `opt.step`; the names and the rule that
//! tells state from model tensors are [`crate::model::names`]); the plan's `init` entry writes
//! its initial values, and host-side initializers (Glorot) skip it.
//!
//! The update rules are PyTorch's documented algorithms (`torch.optim.SGD`, `Adam`, `AdamW`,
//! the pseudocode boxes of their documentation); the arithmetic order is ours and stated per
//! optimizer, so bits are equal across tapeplan's targets, not to PyTorch's.

use tapeplan_core::{Recordable, Shape};

use crate::model::names::{
    optimizer_state_name, OPT_BETA1_POW, OPT_BETA1_POW_LO, OPT_BETA2_POW, OPT_BETA2_POW_LO,
    OPT_STEP,
};

/// Plain SGD's learning rate: shorthand for [`Optimizer::Sgd`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sgd {
    /// The learning rate.
    pub lr: f32,
}

impl From<Sgd> for Optimizer {
    fn from(s: Sgd) -> Optimizer {
        Optimizer::Sgd { lr: s.lr }
    }
}

/// An optimizer and its hyperparameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    /// Plain SGD: `p ← p − lr·g`, as `sub(p, mul(g, fill(lr)))`.
    Sgd {
        /// Learning rate.
        lr: f32,
    },
    /// SGD with momentum (dampening 0): `b ← μ·b + g`; then `p ← p − lr·b`, or with Nesterov
    /// `p ← p − lr·(g + μ·b)`. The buffer starts at zero, so the first step gives `b = g` as in
    /// PyTorch (which clones the first gradient; the two differ only for a `-0` gradient).
    Momentum {
        /// Learning rate.
        lr: f32,
        /// Momentum `μ`.
        momentum: f32,
        /// Nesterov momentum.
        nesterov: bool,
    },
    /// Adam (Kingma & Ba, 2015) and, with `decoupled_weight_decay > 0`, AdamW (Loshchilov &
    /// Hutter, 2019): `p ← p·(1 − lr·λ)` first (decoupled decay), then
    /// `m ← β1·m + (1−β1)·g`, `v ← β2·v + (1−β2)·g²`, the running powers `c1 = β1^t`,
    /// `c2 = β2^t` advanced one step, and
    /// `p ← p − (lr / (1 − c1)) · m / (sqrt(v) / sqrt(1 − c2) + ε)`: epsilon added after the
    /// bias-corrected square root, as PyTorch places it.
    ///
    /// # Bias correction
    /// Each running power is kept as an unevaluated sum `hi + lo` of two `f32` (double-`f32`
    /// arithmetic): `hi · β` is split exactly into a product and its rounding error (Dekker's
    /// product over Veltkamp's split, no fused multiply-add), the error and `lo · β` carried in
    /// `lo`, and the pair renormalized; the correction is `(1 − hi) − lo`. So `1 − β^t` is within
    /// about one ulp of its value for the `f32` `β` (the `β` the moments decay by), where a
    /// running `f32` power `β^t` drifts by an ulp of `β^t` per step and `1 − β^t` cancels it
    /// into hundreds of ulp (`β2 = 0.999` at `t = 2`: 1 − β² ≈ 0.002 carries the rounding of
    /// `β²` ≈ 1). Only `+ − ×` on scalars: exact in both math profiles, the same bits on every
    /// target. PyTorch computes `1 − β^t` in `f64` from the decimal `β`; the moments here decay
    /// by the `f32` `β`, and the correction matches that decay.
    Adam {
        /// Learning rate.
        lr: f32,
        /// `β1`.
        beta1: f32,
        /// `β2`.
        beta2: f32,
        /// `ε`.
        eps: f32,
        /// AdamW's decoupled weight decay `λ` (0 for Adam).
        decoupled_weight_decay: f32,
    },
}

/// Veltkamp's splitting constant for `f32`: `2^12 + 1` (a 24-bit significand splits into two
/// halves of at most 12 bits, whose products are exact).
const SPLITTER: f32 = 4097.0;

/// `(hi, lo)` of `c`: `c = hi + lo` exactly, each half of at most 12 significant bits (Veltkamp's
/// split, in `f32` arithmetic as the recorded form computes it).
fn split(c: f32) -> (f32, f32) {
    let t = c * SPLITTER;
    let hi = t - (t - c);
    (hi, c - hi)
}

/// `(hi + lo) · beta` in double-`f32` arithmetic, recorded: the exact product `hi · beta = p + e`
/// (Dekker's two-product over Veltkamp's split of `hi`, `beta` split on the host), then
/// `lo' = lo · beta + e` and the renormalization `s = p + lo'`, `lo'' = lo' − (s − p)`
/// (`|lo'| ≤ ulp(p)` so the fast two-sum is exact). Answers `(s, lo'')`.
fn times_constant_compensated<R: Recordable>(
    r: &mut R,
    hi: &R::Value,
    lo: &R::Value,
    beta: f32,
) -> Result<(R::Value, R::Value), R::Error> {
    let (b_hi, b_lo) = split(beta);
    let t = r.scale(hi, SPLITTER)?;
    let t_minus = r.sub(&t, hi)?;
    let a_hi = r.sub(&t, &t_minus)?;
    let a_lo = r.sub(hi, &a_hi)?;
    let p = r.scale(hi, beta)?;
    let hh = r.scale(&a_hi, b_hi)?;
    let e = r.sub(&hh, &p)?;
    let hl = r.scale(&a_hi, b_lo)?;
    let e = r.add(&e, &hl)?;
    let lh = r.scale(&a_lo, b_hi)?;
    let e = r.add(&e, &lh)?;
    let ll = r.scale(&a_lo, b_lo)?;
    let e = r.add(&e, &ll)?;
    let lo_beta = r.scale(lo, beta)?;
    let lo_new = r.add(&lo_beta, &e)?;
    let s = r.add(&p, &lo_new)?;
    let moved = r.sub(&s, &p)?;
    let lo_new = r.sub(&lo_new, &moved)?;
    Ok((s, lo_new))
}

/// `1 − (hi + lo)` as `(1 − hi) − lo`: `1 − hi` is exact for `hi` in `[0.5, 1]` (Sterbenz), so
/// the one rounding is the last; for smaller `hi` the result exceeds `0.5` and nothing cancels.
fn one_minus_compensated<R: Recordable>(
    r: &mut R,
    hi: &R::Value,
    lo: &R::Value,
) -> Result<R::Value, R::Error> {
    let one = r.fill(1.0, Shape::SCALAR)?;
    let d = r.sub(&one, hi)?;
    r.sub(&d, lo)
}

/// One piece of optimizer state: its name, shape and initial value.
#[derive(Clone, Debug, PartialEq)]
pub struct StateSpec {
    /// The persistent name (see [`crate::model::names`]).
    pub name: String,
    /// Its shape.
    pub shape: Shape,
    /// The value every element starts at.
    pub init: f32,
}

/// The new values an optimizer step answers: per parameter, then per piece of state (`None`:
/// unchanged).
pub type Updated<V> = (Vec<Option<V>>, Vec<Option<V>>);

impl Optimizer {
    /// SGD with learning rate `lr`.
    pub fn sgd(lr: f32) -> Optimizer {
        Optimizer::Sgd { lr }
    }

    /// Adam with PyTorch's defaults for `β1 = 0.9`, `β2 = 0.999`, `ε = 1e-8`.
    pub fn adam(lr: f32) -> Optimizer {
        Optimizer::Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            decoupled_weight_decay: 0.0,
        }
    }

    /// AdamW with PyTorch's defaults (`β1 = 0.9`, `β2 = 0.999`, `ε = 1e-8`, `λ = 0.01`).
    pub fn adamw(lr: f32) -> Optimizer {
        Optimizer::Adam {
            lr,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            decoupled_weight_decay: 0.01,
        }
    }

    /// The command-line name.
    pub fn name(&self) -> &'static str {
        match self {
            Optimizer::Sgd { .. } => "sgd",
            Optimizer::Momentum {
                nesterov: false, ..
            } => "momentum",
            Optimizer::Momentum { nesterov: true, .. } => "nesterov",
            Optimizer::Adam {
                decoupled_weight_decay,
                ..
            } if *decoupled_weight_decay > 0.0 => "adamw",
            Optimizer::Adam { .. } => "adam",
        }
    }

    /// The state this optimizer keeps for `params` (names and shapes in order): per parameter
    /// first (`<name>.m`, `<name>.v` or `<name>.b`, shortened for a long name by
    /// [`optimizer_state_name`]), then the shared scalars (Adam's running
    /// powers `opt.beta1_pow`, `opt.beta2_pow` and their low parts `opt.beta1_pow_lo`,
    /// `opt.beta2_pow_lo`), then the step counter `opt.step`. Plain SGD keeps none (not even the counter).
    pub fn state(&self, params: &[(String, Shape)]) -> Vec<StateSpec> {
        let mut out = Vec::new();
        let per = |suffix: &str, out: &mut Vec<StateSpec>| {
            for (n, s) in params {
                out.push(StateSpec {
                    name: optimizer_state_name(n, suffix),
                    shape: *s,
                    init: 0.0,
                });
            }
        };
        match self {
            Optimizer::Sgd { .. } => {}
            Optimizer::Momentum { .. } => per("b", &mut out),
            Optimizer::Adam { .. } => {
                per("m", &mut out);
                per("v", &mut out);
                // The running powers' high parts (start at 1), then their low parts (start
                // at 0): see the bias correction of [`Optimizer::Adam`].
                for (n, init) in [
                    (OPT_BETA1_POW, 1.0),
                    (OPT_BETA2_POW, 1.0),
                    (OPT_BETA1_POW_LO, 0.0),
                    (OPT_BETA2_POW_LO, 0.0),
                ] {
                    out.push(StateSpec {
                        name: n.into(),
                        shape: Shape::SCALAR,
                        init,
                    });
                }
            }
        }
        if !out.is_empty() {
            out.push(StateSpec {
                name: OPT_STEP.into(),
                shape: Shape::SCALAR,
                init: 0.0,
            });
        }
        out
    }

    /// `Parameters::step`: the new value of every parameter and of every piece of state (in
    /// [`Optimizer::state`] order). A parameter whose gradient was never reached (`None`) and its
    /// state keep their values (no node is recorded for them).
    ///
    /// # Errors
    /// The payload's.
    pub fn step<R: Recordable>(
        &self,
        r: &mut R,
        params: &[R::Value],
        grads: &[Option<R::Value>],
        state: &[R::Value],
    ) -> Result<Updated<R::Value>, R::Error> {
        let n = params.len();
        let mut new_params = Vec::with_capacity(n);
        let mut new_state: Vec<Option<R::Value>> = vec![None; state.len()];
        match *self {
            Optimizer::Sgd { lr } => {
                for (p, g) in params.iter().zip(grads) {
                    new_params.push(match g {
                        Some(g) => {
                            let step = r.scale(g, lr)?;
                            Some(r.sub(p, &step)?)
                        }
                        None => None,
                    });
                }
            }
            Optimizer::Momentum {
                lr,
                momentum,
                nesterov,
            } => {
                for (i, (p, g)) in params.iter().zip(grads).enumerate() {
                    let Some(g) = g else {
                        new_params.push(None);
                        continue;
                    };
                    let b = &state[i];
                    let decayed = r.scale(b, momentum)?;
                    let b_new = r.add(&decayed, g)?;
                    let direction = if nesterov {
                        let look = r.scale(&b_new, momentum)?;
                        r.add(g, &look)?
                    } else {
                        b_new.clone()
                    };
                    let step = r.scale(&direction, lr)?;
                    new_params.push(Some(r.sub(p, &step)?));
                    new_state[i] = Some(b_new);
                }
            }
            Optimizer::Adam {
                lr,
                beta1,
                beta2,
                eps,
                decoupled_weight_decay,
            } => {
                let (c1, c2) = (&state[2 * n], &state[2 * n + 1]);
                let (c1_lo, c2_lo) = (&state[2 * n + 2], &state[2 * n + 3]);
                let (c1_new, c1_lo_new) = times_constant_compensated(r, c1, c1_lo, beta1)?;
                let (c2_new, c2_lo_new) = times_constant_compensated(r, c2, c2_lo, beta2)?;
                let bc1 = one_minus_compensated(r, &c1_new, &c1_lo_new)?;
                let bc2 = one_minus_compensated(r, &c2_new, &c2_lo_new)?;
                let lr_t = r.fill(lr, Shape::SCALAR)?;
                let step_size = r.div(&lr_t, &bc1)?;
                let bc2_sqrt = r.sqrt(&bc2)?;
                for (i, (p, g)) in params.iter().zip(grads).enumerate() {
                    let Some(g) = g else {
                        new_params.push(None);
                        continue;
                    };
                    let s = r.shape_of(p);
                    let p = if decoupled_weight_decay > 0.0 {
                        r.scale(p, 1.0 - lr * decoupled_weight_decay)?
                    } else {
                        p.clone()
                    };
                    let (m, v) = (&state[i], &state[n + i]);
                    let m_decayed = r.scale(m, beta1)?;
                    let g_part = r.scale(g, 1.0 - beta1)?;
                    let m_new = r.add(&m_decayed, &g_part)?;
                    let v_decayed = r.scale(v, beta2)?;
                    let gg = r.mul(g, g)?;
                    let gg_part = r.scale(&gg, 1.0 - beta2)?;
                    let v_new = r.add(&v_decayed, &gg_part)?;
                    let root = r.sqrt(&v_new)?;
                    let bc2_b = r.broadcast(&bc2_sqrt, s)?;
                    let corrected = r.div(&root, &bc2_b)?;
                    let eps_t = r.fill(eps, s)?;
                    let denom = r.add(&corrected, &eps_t)?;
                    let ratio = r.div(&m_new, &denom)?;
                    let size_b = r.broadcast(&step_size, s)?;
                    let step = r.mul(&size_b, &ratio)?;
                    new_params.push(Some(r.sub(&p, &step)?));
                    new_state[i] = Some(m_new);
                    new_state[n + i] = Some(v_new);
                }
                new_state[2 * n] = Some(c1_new);
                new_state[2 * n + 1] = Some(c2_new);
                new_state[2 * n + 2] = Some(c1_lo_new);
                new_state[2 * n + 3] = Some(c2_lo_new);
            }
        }
        // The step counter, last.
        if let Some(counter) = state.last() {
            let one = r.fill(1.0, Shape::SCALAR)?;
            let next = r.add(counter, &one)?;
            if let Some(slot) = new_state.last_mut() {
                *slot = Some(next);
            }
        }
        Ok((new_params, new_state))
    }
}
