//! Forward mode over every conformance case, in its two readings, and against reverse mode.
//!
//! - Computing: the case's tape run over the dual number [`Dual`] (the element seam), which
//!   gives every node's value and tangent.
//! - Recording: [`Tape::jvp`], the tangent of every node as ordinary nodes derived from the
//!   reverse rules (the vjp recorded from a symbolic seed, then differentiated with respect to
//!   that seed), run by the oracle and, planned, by the `no_std` runtime.
//!
//! What is bitwise and what is not:
//! - the runtime equals the oracle over the recorded jvp bit for bit, every node's tangent, random
//!   and special values alike; the value half of the dual run is the f32 forward, bit for bit;
//! - the two tangents, at random points: the same bits for every opcode but three, up to the
//!   sign of a zero where a mask or a constant multiplies a tangent by 0 ([`Tangent`]); `matmul`,
//!   `sigmoid` and `softplus` (and what is computed from them) round differently in the two
//!   readings, for the reasons given at [`ROUNDS_APART`], and agree within [`TOLERANCE`];
//! - at special values (signed zeros, infinities, NaN, ties) the same, wherever both tangents are
//!   finite and no selection at a NaN or a tie is upstream; elsewhere the two readings do not
//!   define the same number (see [`special_values`]).

use tapeplan_tests::cases as common;

use common::{bits, build, cases, random_input, Built, Case};
use tapeplan_core::{NodeId, Opcode, Run, RunAs, Tape, Tensor, TensorOf};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_planner::{plan, EntrySpec, Root};
use tapeplan_runtime::{Plan as RtPlan, Session};
use tapeplan_tests::dual::{pairs, tangents, Dual};

/// A point and a direction: each input's values and direction (`None` for the inputs not
/// differentiated, such as labels), and the weight `w` of the conformance reduction (no
/// direction).
struct Point {
    values: Vec<Vec<f32>>,
    dirs: Vec<Option<Vec<f32>>>,
    w: Vec<f32>,
}

fn random_point(rng: &mut SplitMix64, case: &Case, b: &Built) -> Point {
    let values: Vec<Vec<f32>> = case
        .inputs
        .iter()
        .zip(&b.inputs)
        .enumerate()
        .map(|(k, ((_, lo, hi), x))| {
            random_input(rng, b.tape.shape(*x).unwrap(), *lo, *hi, !case.wrt[k])
        })
        .collect();
    let dirs = b
        .inputs
        .iter()
        .zip(case.wrt)
        .map(|(x, &d)| d.then(|| random_input(rng, b.tape.shape(*x).unwrap(), -1.0, 1.0, false)))
        .collect();
    let w = random_input(rng, b.tape.shape(b.w).unwrap(), -1.0, 1.0, false);
    Point { values, dirs, w }
}

/// Values that exercise the arithmetic's edges: signed zeros, infinities, NaN, ties.
const SPECIAL: [f32; 10] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    2.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    -3.0,
];

fn special_point(rng: &mut SplitMix64, b: &Built) -> Point {
    let mut draw =
        |n: usize| -> Vec<f32> { (0..n).map(|_| SPECIAL[rng.below(SPECIAL.len())]).collect() };
    let values = b
        .inputs
        .iter()
        .map(|x| draw(b.tape.shape(*x).unwrap().elems()))
        .collect();
    let dirs = b
        .inputs
        .iter()
        .map(|x| Some(draw(b.tape.shape(*x).unwrap().elems())))
        .collect();
    let w = draw(b.tape.shape(b.w).unwrap().elems());
    Point { values, dirs, w }
}

/// The recorded jvp of a case: its tape with a direction input `d{name}` for every input with a
/// direction, and [`Tape::jvp`] of every node `0..=f` (`None`: not reached, a zero tangent).
struct Recorded {
    tape: Tape,
    dirs: Vec<(NodeId, NodeId)>,
    tangents: Vec<Option<NodeId>>,
    /// The first node each [`Tape::jvp`] appended: its symbolic seed `u`.
    seeds: Vec<NodeId>,
}

fn record(b: &Built, p: &Point) -> Recorded {
    let mut tape = b.tape.clone();
    let dirs: Vec<(NodeId, NodeId)> = b
        .inputs
        .iter()
        .zip(&p.dirs)
        .filter(|(_, d)| d.is_some())
        .map(|(x, _)| {
            let n = tape.node(*x).unwrap();
            let (name, shape) = (n.name.clone().unwrap(), n.shape);
            (*x, tape.input(&format!("d{name}"), shape))
        })
        .collect();
    let mut seeds = Vec::new();
    let tangents = (0..=b.f.index())
        .map(|i| {
            let id = tape.id(i).unwrap();
            let u = tape.len();
            let t = tape.jvp(id, &dirs).unwrap();
            seeds.push(tape.id(u).unwrap());
            t
        })
        .collect();
    Recorded {
        tape,
        dirs,
        tangents,
        seeds,
    }
}

/// The inputs of the recorded tape and their values: the case's inputs and `w`, and the
/// directions.
fn bindings(b: &Built, rec: &Recorded, p: &Point) -> Vec<(NodeId, Vec<f32>)> {
    let mut out: Vec<(NodeId, Vec<f32>)> = b.inputs.iter().copied().zip(p.values.clone()).collect();
    out.push((b.w, p.w.clone()));
    for (x, dx) in &rec.dirs {
        let k = b.inputs.iter().position(|i| i == x).unwrap();
        out.push((*dx, p.dirs[k].clone().unwrap()));
    }
    out
}

/// The oracle run over the recorded jvp.
fn oracle<'t>(b: &Built, rec: &'t Recorded, p: &Point) -> Run<'t> {
    let mut run = Run::new(&rec.tape);
    for (x, data) in bindings(b, rec, p) {
        let s = rec.tape.shape(x).unwrap();
        run.set(x, Tensor::new(s, data).unwrap()).unwrap();
    }
    run.forward().unwrap();
    run
}

/// The case's tape run over dual numbers, every node up to `f`.
fn dual_run<'t>(b: &'t Built, p: &Point) -> RunAs<'t, Dual> {
    let mut run: RunAs<Dual> = RunAs::new(&b.tape);
    for (k, x) in b.inputs.iter().enumerate() {
        let zero = vec![0.0; p.values[k].len()];
        let dir = p.dirs[k].as_ref().unwrap_or(&zero);
        let s = b.tape.shape(*x).unwrap();
        run.set(*x, TensorOf::new(s, pairs(&p.values[k], dir)).unwrap())
            .unwrap();
    }
    let w = pairs(&p.w, &vec![0.0; p.w.len()]);
    run.set(b.w, TensorOf::new(b.tape.shape(b.w).unwrap(), w).unwrap())
        .unwrap();
    run.forward_until(b.f).unwrap();
    run
}

/// How the two tangents of an element compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Tangent {
    /// The same bits (NaN as one class).
    Bitwise,
    /// The same number, one of them `-0`, the other `+0`: a mask or a constant multiplies a
    /// tangent by `0` in one reading (`t · 0` keeps the sign of `t`) where the other adds a `+0`
    /// or takes the element's `ZERO` (the dual's `relu`, `pad`, masks).
    SignOfZero,
    /// Within [`TOLERANCE`]: the two readings round differently (see [`ROUNDS_APART`]).
    Close,
    /// Otherwise.
    Apart,
}

/// The tolerance of [`Tangent::Close`], relative: `|d - r| <= TOLERANCE · max(|d|, |r|, 1)`
/// (about 8 f32 ulps at 1). The largest difference observed over these tests is 3.0e-7
/// (`sigmoid` at a special value; 1.8e-7 for `matmul` at random points).
const TOLERANCE: f32 = 1e-6;

/// The opcodes whose two tangents round differently. The recorded tangent is the reverse rule
/// transposed; the dual's is the kernel's own arithmetic over pairs:
/// - `matmul`: the kernel accumulates each output's tangent from `+0` over increasing `p` as
///   `Σₚ (a'ᵢₚ·bₚⱼ + aᵢₚ·b'ₚⱼ)`, one product rule per step; the recorded jvp is `a'·b + a·b'`,
///   two products summed (the transposes of the rule's `g·bᵀ` and `aᵀ·g`): the same terms,
///   added in another order;
/// - `sigmoid`: the kernel is `1 / (1 + e^(-x))`, so the dual differentiates that composition,
///   `(0 - y·(-t·e^(-x))) / (1 + e^(-x))`; the rule is `t·(y·(1 - y))`;
/// - `softplus`: the kernel is `ln_1p(e^x)`, so the dual forms `t·e^x / (1 + e^x)`; the rule is
///   `t·sigmoid(x)`;
/// - `prod_to`: the kernel multiplies left to right, so the dual's tangent is the product rule
///   applied step by step; the recorded jvp sums `t_i · (before_i · after_i)` (the exclusive
///   products of the rule): the same terms, formed and added in another order;
/// - `affine_scan`: the dual forms `b'[p] + (c'[p]·z[p] + c[p]·z'[p])` at each step; the
///   recorded jvp is the transpose of the rule's reverse scan, `affine_scan(c, b' + c'·z)`:
///   the tangent of `c` is multiplied in first and added to `b'` before the recurrence;
/// - `logsumexp`: the kernel's dual carries the shift's tangent through `exp(x − c)`, the sum
///   and `ln(acc) + c`; the rule's transpose is `Σ t·exp(x − y)`;
/// - `bce_with_logits`: the dual differentiates the stable form (`x − x·z + log1p(e^−x)` or its
///   other branch), `t − (t·z + x·t_z) − t·e^−x/(1 + e^−x)`; the rule is `t·(σ(x) − z) − x·t_z`;
/// - `matmul_tn`, `matmul_nt`: as `matmul` (the same accumulation over a transposed operand);
/// - `sgd_matmul`: as `matmul` for its product `aᵀ·b` (then `mul` by `lr` and `sub` from `w`,
///   which the rule's transpose forms alike);
/// - `conv`, `conv_transpose`, `conv_weight_grad`: as `matmul`, bilinear kernels whose dual
///   accumulates `x'·w + x·w'` one tap at a time, while the recorded jvp adds two whole
///   convolutions.
///
/// Every other kernel applies to its element the arithmetic its rule's transpose records (the
/// dual's slopes are formed as the rules form them), so the two readings reach the same bits.
const ROUNDS_APART: [Opcode; 13] = [
    Opcode::MatMul,
    Opcode::MatMulTn,
    Opcode::MatMulNt,
    Opcode::SgdMatMul,
    Opcode::Sigmoid,
    Opcode::Softplus,
    Opcode::ProdTo,
    Opcode::AffineScan,
    Opcode::LogSumExp,
    Opcode::BceWithLogits,
    Opcode::Conv,
    Opcode::ConvTranspose,
    Opcode::ConvWeightGrad,
];

/// The selections whose reverse rule and kernel choose differently at a NaN or a tie: the
/// kernel passes a NaN argument (and its tangent) through and `max_to` keeps the first of tied
/// maxima, while the rules' masks (`heaviside`, `greater_equal`, `equal`) send a NaN's cotangent
/// nowhere (or multiply it by NaN) and `max_to`'s rule splits it among the tied maxima.
const SELECTIONS: [Opcode; 6] = [
    Opcode::Relu,
    Opcode::Heaviside,
    Opcode::Sign,
    Opcode::Maximum,
    Opcode::Minimum,
    Opcode::MaxTo,
];

fn compare(d: f32, r: f32) -> Tangent {
    if bits(&[d]) == bits(&[r]) {
        Tangent::Bitwise
    } else if d == r {
        Tangent::SignOfZero
    } else if (d - r).abs() <= TOLERANCE * d.abs().max(r.abs()).max(1.0) {
        Tangent::Close
    } else {
        Tangent::Apart
    }
}

/// For every node `0..=last`: whether it is one of `ops` or computed from one.
fn downstream(b: &Built, ops: &[Opcode]) -> Vec<bool> {
    let mut out: Vec<bool> = Vec::new();
    for node in &b.tape.nodes()[..=b.f.index()] {
        let from = node.arg_indices().iter().any(|&a| out[a as usize]);
        out.push(from || ops.contains(&node.op));
    }
    out
}

/// What [`readings_agree`] saw: elements by kind of agreement, elements that differ where the
/// readings do not define the same number (special values only), and the largest relative
/// difference of a [`Tangent::Close`] element.
#[derive(Default)]
struct Seen {
    counts: [usize; 3],
    skipped: usize,
    max_rel: f32,
}

/// Compares the two readings on every node of the case up to its output: the value half of the
/// dual run with the f32 forward (bitwise), and the two tangents (as [`compare`] says, within
/// what the module's documentation allows). With `special`, they may also differ where one is not
/// finite or a selection is upstream (see [`special_values`]).
fn readings_agree(case: &Case, b: &Built, p: &Point, special: bool, seen: &mut Seen) -> Recorded {
    let rec = record(b, p);
    let run = oracle(b, &rec, p);
    let dual = dual_run(b, p);
    let rounds_apart = downstream(b, &ROUNDS_APART);
    let selected = downstream(b, &SELECTIONS);
    for i in 0..=b.f.index() {
        let id = b.tape.id(i).unwrap();
        let op = b.tape.nodes()[i].op;
        let both = &dual.value(id).unwrap().data;
        let dv: Vec<f32> = both.iter().map(|d| d.v).collect();
        let dt = tangents(both);
        let rv = &run.value(id).unwrap().data;
        let rt = match rec.tangents[i] {
            Some(t) => run.value(t).unwrap().data.clone(),
            None => vec![0.0; dt.len()],
        };
        let at = || {
            format!(
                "{}: node {i} ({op}) at {:?} along {:?}",
                case.name, p.values, p.dirs
            )
        };
        assert_eq!(bits(&dv), bits(rv), "{}: value", at());
        for (e, (&d, &r)) in dt.iter().zip(&rt).enumerate() {
            let c = compare(d, r);
            let allowed = if rounds_apart[i] {
                Tangent::Close
            } else {
                Tangent::SignOfZero
            };
            if c > allowed && special && (!d.is_finite() || !r.is_finite() || selected[i]) {
                seen.skipped += 1;
                continue;
            }
            assert!(
                c <= allowed,
                "{}: element {e}: dual tangent {d:e}, recorded {r:e}: {c:?}",
                at()
            );
            seen.counts[c as usize] += 1;
            if c == Tangent::Close {
                seen.max_rel = seen
                    .max_rel
                    .max((d - r).abs() / d.abs().max(r.abs()).max(1.0));
            }
        }
    }
    rec
}

/// The cases cover every opcode, so the tests below take every opcode through both readings
/// (the recorded one has nothing per opcode to miss: it is the reverse rules, twice).
#[test]
fn every_opcode_has_a_forward_mode_case() {
    let covered: std::collections::BTreeSet<Opcode> = cases()
        .iter()
        .flat_map(|c| c.covers.iter().copied())
        .collect();
    for &op in Opcode::ALL {
        if !matches!(op, Opcode::Input | Opcode::Parameter) {
            assert!(covered.contains(&op), "no case takes {op} forward");
        }
    }
}

#[test]
fn dual_and_recorded_tangents_agree() {
    let mut rng = SplitMix64::new(2027);
    let mut seen = Seen::default();
    for case in cases() {
        for _ in 0..4 {
            let b = build(&case);
            let p = random_point(&mut rng, &case, &b);
            readings_agree(&case, &b, &p, false, &mut seen);
        }
    }
    let [bitwise, zero_sign, close] = seen.counts;
    eprintln!(
        "random: {bitwise} tangents bitwise, {zero_sign} up to the sign of zero, {close} within \
         {TOLERANCE:e} (largest {:e})",
        seen.max_rel
    );
    assert_eq!(seen.skipped, 0);
}

/// Signed zeros, infinities, NaN and ties, in values and directions alike. The readings agree as
/// at random points, except that where a tangent is not finite, or a selection (see
/// [`SELECTIONS`]) is upstream, they do not define the same number, and only the recorded jvp's
/// own bits are checked there (oracle against runtime, in
/// `recorded_jvp_planned_and_run_by_the_runtime_matches_the_oracle`): IEEE's `0 · ∞ = NaN`
/// lets the dual's zero tangents (of constants, masks, detached values and inputs without a
/// direction) poison products that the reverse rules never form (the ancestor mask skips what
/// does not depend on a direction), and at a NaN or a tie the kernels and the rules choose
/// differently.
#[test]
fn special_values() {
    let mut rng = SplitMix64::new(7);
    let mut seen = Seen::default();
    for case in cases() {
        for _ in 0..40 {
            let b = build(&case);
            let p = special_point(&mut rng, &b);
            readings_agree(&case, &b, &p, true, &mut seen);
        }
    }
    let [bitwise, zero_sign, close] = seen.counts;
    eprintln!(
        "special: {bitwise} tangents bitwise, {zero_sign} up to the sign of zero, {close} within \
         {TOLERANCE:e} (largest {:e}), {} apart where they cannot agree",
        seen.max_rel, seen.skipped
    );
    assert!(bitwise > 4 * seen.skipped, "most special tangents agree");
}

#[test]
fn recorded_jvp_planned_and_run_by_the_runtime_matches_the_oracle() {
    let mut rng = SplitMix64::new(2028);
    let mut seen = Seen::default();
    for case in cases() {
        for trial in 0..3 {
            let b = build(&case);
            let special = trial == 2;
            let p = if special {
                special_point(&mut rng, &b)
            } else {
                random_point(&mut rng, &case, &b)
            };
            let rec = readings_agree(&case, &b, &p, special, &mut seen);
            let run = oracle(&b, &rec, &p);
            // Every node's tangent that is not a leaf is an output.
            let mut names: Vec<(String, NodeId)> = Vec::new();
            for (i, t) in rec.tangents.iter().enumerate() {
                let Some(t) = *t else { continue };
                let leaf = rec.tape.node(t).unwrap().op == Opcode::Input;
                if !leaf && !names.iter().any(|(_, n)| *n == t) {
                    names.push((format!("t{i}"), t));
                }
            }
            let roots = names
                .iter()
                .map(|(name, node)| Root::Output {
                    name: name.clone(),
                    node: *node,
                })
                .collect();
            let pl = plan(
                &rec.tape,
                &[EntrySpec {
                    name: "jvp".into(),
                    roots,
                    guarded: false,
                }],
            )
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let bytes = pl.to_bytes();
            let rt = RtPlan::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            let e = rt.entry("jvp").unwrap();
            let mut arena = vec![f32::NAN; rt.arena_elems()];
            let mut s = Session::bind(&rt, &mut arena).unwrap();
            for (x, data) in bindings(&b, &rec, &p) {
                let name = rec.tape.node(x).unwrap().name.clone().unwrap();
                if rt.input(e, &name).is_some() {
                    s.set_input(e, &name, &data).unwrap();
                }
            }
            s.run(e).unwrap();
            for (name, node) in &names {
                assert_eq!(
                    bits(s.output(e, name).unwrap()),
                    bits(&run.value(*node).unwrap().data),
                    "{} trial {trial}: runtime vs oracle, output {name}",
                    case.name
                );
            }
        }
    }
}

/// The vjp is linear in its seed, so its vjp with respect to the seed does not read the seed:
/// every tangent keeps its bits when each symbolic seed `u` is overridden with NaN.
#[test]
fn the_recorded_jvp_does_not_read_its_seed() {
    let mut rng = SplitMix64::new(2030);
    for case in cases() {
        let b = build(&case);
        let p = random_point(&mut rng, &case, &b);
        let rec = record(&b, &p);
        assert_eq!(rec.seeds.len(), b.f.index() + 1);
        let run = oracle(&b, &rec, &p);
        let mut poisoned = Run::new(&rec.tape);
        for (x, data) in bindings(&b, &rec, &p) {
            let s = rec.tape.shape(x).unwrap();
            poisoned.set(x, Tensor::new(s, data).unwrap()).unwrap();
        }
        for u in &rec.seeds {
            assert_eq!(rec.tape.node(*u).unwrap().op, Opcode::Fill);
            let s = rec.tape.shape(*u).unwrap();
            let nan = Tensor::new(s, vec![f32::NAN; s.elems()]).unwrap();
            poisoned.set(*u, nan).unwrap();
        }
        poisoned.forward().unwrap();
        for t in rec.tangents.iter().flatten() {
            assert_eq!(
                bits(&poisoned.value(*t).unwrap().data),
                bits(&run.value(*t).unwrap().data),
                "{}: a tangent reads its seed",
                case.name
            );
        }
    }
}

/// The stated tolerance of forward against reverse mode: the two form different products and
/// sum them in different orders (reverse: `Σ gᵢ vᵢ` of the gradient, here in f64; forward: the
/// tangent accumulated along the graph in f32), so they agree to
/// `|fwd - rev| <= 1e-6 · (Σ |gᵢ vᵢ| + |fwd|) + 1e-7`, a few f32 roundings relative to the
/// magnitudes summed (the largest relative difference observed over these cases is 6.3e-8).
/// The example's scalar case reaches the same bits.
#[test]
fn directional_derivative_matches_reverse_mode() {
    let mut rng = SplitMix64::new(2029);
    for case in cases() {
        for trial in 0..4 {
            let b = build(&case);
            let p = random_point(&mut rng, &case, &b);
            let rec = record(&b, &p);
            let run = oracle(&b, &rec, &p);
            let fwd = rec.tangents[b.f.index()].map_or(0.0, |t| run.value(t).unwrap().data[0]);
            // Reverse mode: the oracle's gradient, dotted with the direction.
            let mut rev = Run::new(&b.tape);
            for (x, data) in bindings(&b, &rec, &p) {
                if x.index() < b.tape.len() {
                    let s = b.tape.shape(x).unwrap();
                    rev.set(x, Tensor::new(s, data).unwrap()).unwrap();
                }
            }
            let wrt: Vec<NodeId> = rec.dirs.iter().map(|(x, _)| *x).collect();
            let g = rev.backward(b.f, Tensor::scalar(1.0), &wrt).unwrap();
            let (mut dot, mut mag) = (0.0f64, 0.0f64);
            for (k, x) in b.inputs.iter().enumerate() {
                let (Some(d), Some(gx)) = (&p.dirs[k], g.get(*x)) else {
                    continue;
                };
                for (gi, vi) in gx.data.iter().zip(d) {
                    dot += f64::from(*gi) * f64::from(*vi);
                    mag += (f64::from(*gi) * f64::from(*vi)).abs();
                }
            }
            let tol = 1e-6 * (mag + f64::from(fwd).abs()) + 1e-7;
            assert!(
                (f64::from(fwd) - dot).abs() <= tol,
                "{} trial {trial}: forward {fwd} vs reverse {dot} (tolerance {tol})",
                case.name
            );
        }
    }
}

/// Forward over reverse: the recorded gradient is ordinary graph, so its tangent along `v` is
/// the Hessian-vector product. Plate 1's `f = sum(x³)`: the tangent of `∇f = 3x²` along `v` is
/// `6x·v`, exact here; the recorded jvp of the gradient, the gradient run over dual numbers and
/// reverse over reverse (the oracle's reverse scan of the gradient seeded with `v`) reach the
/// same bits, and so does the runtime over the planned jvp.
#[test]
fn forward_over_reverse_is_the_plate_1_hvp() {
    use tapeplan_core::{Recordable, Shape};
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(3));
    let f = {
        let mut t = tape.trace();
        let xx = t.mul(&x, &x).unwrap();
        let xxx = t.mul(&xx, &x).unwrap();
        t.sum_all(&xxx).unwrap()
    };
    let g = *tape.differentiate(f, &[x]).unwrap().get(x).unwrap();
    let (xs, vs) = (vec![0.5, -0.25, 1.5], vec![0.25, 1.0, -0.5]);
    let s = Shape::vector(3);

    // Forward over reverse, recorded: the jvp of the gradient, run by the oracle.
    let dx = tape.input("dx", s);
    let hv = tape.jvp(g, &[(x, dx)]).unwrap().unwrap();
    let mut run = Run::new(&tape);
    run.set(x, Tensor::new(s, xs.clone()).unwrap()).unwrap();
    run.set(dx, Tensor::new(s, vs.clone()).unwrap()).unwrap();
    run.forward().unwrap();
    let fwd = run.value(hv).unwrap().data.clone();
    assert_eq!(fwd, [0.75, -1.5, -4.5]);

    // Forward over reverse, computed: the gradient run over dual numbers.
    let mut dual: RunAs<Dual> = RunAs::new(&tape);
    dual.set(x, TensorOf::new(s, pairs(&xs, &vs)).unwrap())
        .unwrap();
    dual.forward_until(g).unwrap();
    let dt = tangents(&dual.value(g).unwrap().data);
    assert_eq!(bits(&dt), bits(&fwd));

    // Reverse over reverse: the oracle's reverse scan of the gradient, seeded with v.
    let rr = run
        .backward(g, Tensor::new(s, vs.clone()).unwrap(), &[x])
        .unwrap();
    assert_eq!(bits(&fwd), bits(&rr.get(x).unwrap().data));

    // Planned and run by the runtime.
    let pl = plan(
        &tape,
        &[EntrySpec {
            name: "hvp".into(),
            roots: vec![Root::Output {
                name: "hv".into(),
                node: hv,
            }],
            guarded: false,
        }],
    )
    .unwrap();
    let bytes = pl.to_bytes();
    let rt = RtPlan::parse(&bytes).unwrap();
    let e = rt.entry("hvp").unwrap();
    let mut arena = vec![f32::NAN; rt.arena_elems()];
    let mut sess = Session::bind(&rt, &mut arena).unwrap();
    sess.set_input(e, "x", &xs).unwrap();
    sess.set_input(e, "dx", &vs).unwrap();
    sess.run(e).unwrap();
    assert_eq!(bits(sess.output(e, "hv").unwrap()), bits(&fwd));
}
