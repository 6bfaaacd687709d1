//! Forward mode over every conformance case, in its three readings: the pairs computed through
//! the element seam (the tape run over the dual number `Dual`), the pair payload `Pairs` over
//! `Compute`, and the pair payload over `Trace` (the tangent computation recorded as ordinary
//! nodes on a new tape), run by the oracle and, planned, by the `no_std` runtime. The readings
//! agree bit for bit on every node, random and special values alike (NaN compared as one class);
//! the runtime agrees with the oracle bit for bit; and the tangent of the output agrees with
//! reverse mode's `grad · v` within the tolerance stated in
//! `directional_derivative_matches_reverse_mode`.
//!
//! The pair arithmetic lives in `core/examples/dual/mod.rs` (forward mode is an example, not a
//! crate type) and is included here by path.

use tapeplan_tests::cases as common;
#[path = "../../../core/examples/dual/mod.rs"]
mod dual;

use common::{bits, build, cases, random_input, Built, Case};
use dual::{record_pairs, replay, Dual, Pair, Pairs, RecordedPairs};
use tapeplan_core::{Compute, NodeId, Opcode, Run, RunAs, Tensor, TensorOf};
use tapeplan_planner::rng::SplitMix64;
use tapeplan_planner::{plan, EntrySpec, Root};
use tapeplan_runtime::{Plan as RtPlan, Session};

/// A point and a direction: each input's values and tangent (zero for the inputs not
/// differentiated, such as labels), and the weight `w` of the conformance reduction (tangent 0).
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

/// Values that exercise the order of the pair arithmetic: signed zeros, infinities, NaN, ties.
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

/// The seed pair of every leaf of the case's tape, as tensors.
fn leaf_pairs(b: &Built, p: &Point) -> Vec<(NodeId, Pair<Tensor>)> {
    let mut out = Vec::new();
    for (k, x) in b.inputs.iter().enumerate() {
        let s = b.tape.shape(*x).unwrap();
        let t = p.dirs[k]
            .clone()
            .unwrap_or_else(|| vec![0.0; p.values[k].len()]);
        out.push((
            *x,
            Pair {
                v: Tensor::new(s, p.values[k].clone()).unwrap(),
                t: Tensor::new(s, t).unwrap(),
            },
        ));
    }
    let ws = b.tape.shape(b.w).unwrap();
    out.push((
        b.w,
        Pair {
            v: Tensor::new(ws, p.w.clone()).unwrap(),
            t: Tensor::zeros(ws),
        },
    ));
    out
}

/// The oracle run over the recorded pairs, its leaves set from the seeds (a tangent that is a
/// `d{name}` input is set; the others are recorded zero fills).
fn recorded<'t>(rec: &'t RecordedPairs, seeds: &[(NodeId, Pair<Tensor>)]) -> Run<'t> {
    let mut run = Run::new(&rec.tape);
    for (x, seed) in seeds {
        let pair = rec.pair(*x).unwrap();
        run.set(pair.v, seed.v.clone()).unwrap();
        if rec.tape.nodes()[pair.t.index()].op == Opcode::Input {
            run.set(pair.t, seed.t.clone()).unwrap();
        }
    }
    run.forward().unwrap();
    run
}

/// The recorded pairs of a case: a tangent input `d{name}` for every input with a direction.
fn record(b: &Built, p: &Point) -> RecordedPairs {
    let seeded: Vec<String> = b
        .inputs
        .iter()
        .zip(&p.dirs)
        .filter(|(_, d)| d.is_some())
        .map(|(x, _)| b.tape.nodes()[x.index()].name.clone().unwrap())
        .collect();
    record_pairs(&b.tape, b.f, |node| {
        node.name.as_ref().is_some_and(|n| seeded.contains(n))
    })
    .unwrap()
}

/// Element seam, pair payload over `Compute`, recorded pairs run by the oracle: every node of
/// the case's tape up to its output, value and tangent, bit for bit.
fn three_readings_agree(case: &Case, b: &Built, p: &Point, what: &str) -> RecordedPairs {
    let seeds = leaf_pairs(b, p);
    // 1. The element seam.
    let mut seam: RunAs<Dual> = RunAs::new(&b.tape);
    for (x, s) in &seeds {
        let d = s.v.data.iter().zip(&s.t.data);
        let d = d.map(|(&v, &t)| Dual::new(v, t)).collect();
        seam.set(*x, TensorOf::new(s.v.shape, d).unwrap()).unwrap();
    }
    seam.forward_until(b.f).unwrap();
    // 2. The pair payload over Compute.
    let computed = replay(
        &b.tape,
        b.f,
        &mut Pairs {
            inner: Compute::default(),
        },
        |_, i, _| {
            let (_, s) = seeds.iter().find(|(x, _)| x.index() == i).unwrap();
            Ok(s.clone())
        },
    )
    .unwrap();
    // 3. The recorded pairs, run by the oracle.
    let rec = record(b, p);
    let oracle = recorded(&rec, &seeds);
    for (i, c) in computed.iter().enumerate() {
        let id = b.tape.id(i).unwrap();
        let op = b.tape.nodes()[i].op;
        let s = seam.value(id).unwrap();
        let sv: Vec<f32> = s.data.iter().map(|d| d.v).collect();
        let st: Vec<f32> = s.data.iter().map(|d| d.t).collect();
        let r = rec.pair(id).unwrap();
        let rv = &oracle.value(r.v).unwrap().data;
        let rt = &oracle.value(r.t).unwrap().data;
        let at = || {
            format!(
                "{} ({what}): node {i} ({op}) at {:?} along {:?}",
                case.name, p.values, p.dirs
            )
        };
        assert_eq!(bits(&sv), bits(&c.v.data), "{}: payload value", at());
        assert_eq!(bits(&st), bits(&c.t.data), "{}: payload tangent", at());
        assert_eq!(bits(&sv), bits(rv), "{}: recorded value", at());
        assert_eq!(bits(&st), bits(rt), "{}: recorded tangent", at());
    }
    rec
}

/// The cases cover every opcode, so the tests below replay every opcode over pairs (the pair
/// arithmetic itself matches every opcode exhaustively: there is no fallback to miss).
#[test]
fn every_opcode_is_replayed_over_pairs() {
    let covered: std::collections::BTreeSet<Opcode> = cases()
        .iter()
        .flat_map(|c| c.covers.iter().copied())
        .collect();
    for &op in Opcode::ALL {
        if !matches!(op, Opcode::Input | Opcode::Parameter) {
            assert!(covered.contains(&op), "no case replays {op} over pairs");
        }
    }
}

#[test]
fn computed_and_recorded_pairs_agree_bit_for_bit() {
    let mut rng = SplitMix64::new(2027);
    for case in cases() {
        for _ in 0..4 {
            let b = build(&case);
            let p = random_point(&mut rng, &case, &b);
            three_readings_agree(&case, &b, &p, "random");
        }
    }
}

#[test]
fn computed_and_recorded_pairs_agree_on_special_values() {
    // Signed zeros, infinities, NaN and ties, in values and tangents alike: the recorded
    // arithmetic follows the element's order and its NaN and tie rules, not just its math.
    let mut rng = SplitMix64::new(7);
    for case in cases() {
        for _ in 0..40 {
            let b = build(&case);
            let p = special_point(&mut rng, &b);
            three_readings_agree(&case, &b, &p, "special");
        }
    }
}

#[test]
fn recorded_pairs_planned_and_run_by_the_runtime_match_the_oracle() {
    let mut rng = SplitMix64::new(2028);
    for case in cases() {
        for trial in 0..3 {
            let b = build(&case);
            let p = if trial == 2 {
                special_point(&mut rng, &b)
            } else {
                random_point(&mut rng, &case, &b)
            };
            let rec = three_readings_agree(&case, &b, &p, "runtime");
            let seeds = leaf_pairs(&b, &p);
            let oracle = recorded(&rec, &seeds);
            // Every replayed pair that is not a leaf of the new tape is an output.
            let mut roots = Vec::new();
            let mut names = Vec::new();
            for (i, pair) in rec.pairs.iter().enumerate() {
                for (half, node) in [("v", pair.v), ("t", pair.t)] {
                    if node.index() >= rec.replay_start {
                        let name = format!("{half}{i}");
                        roots.push(Root::Output {
                            name: name.clone(),
                            node,
                        });
                        names.push((name, node));
                    }
                }
            }
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
            for (x, seed) in &seeds {
                let pair = rec.pair(*x).unwrap();
                for (node, data) in [(pair.v, &seed.v.data), (pair.t, &seed.t.data)] {
                    let n = &rec.tape.nodes()[node.index()];
                    if n.op == Opcode::Input {
                        let name = n.name.as_deref().unwrap();
                        if rt.input(e, name).is_some() {
                            s.set_input(e, name, data).unwrap();
                        }
                    }
                }
            }
            s.run(e).unwrap();
            for (name, node) in &names {
                assert_eq!(
                    bits(s.output(e, name).unwrap()),
                    bits(&oracle.value(*node).unwrap().data),
                    "{} trial {trial}: runtime vs oracle, output {name}",
                    case.name
                );
            }
        }
    }
}

/// The stated tolerance of forward against reverse mode: the two form different products and
/// sum them in different orders (reverse: `Σ gᵢ vᵢ` of the gradient, here in f64; forward: the
/// tangent accumulated along the graph in f32), so they agree to
/// `|fwd - rev| <= 1e-6 · (Σ |gᵢ vᵢ| + |fwd|) + 1e-7`, a few f32 roundings relative to the
/// magnitudes summed (the largest relative difference observed over these cases is 1.0e-7).
/// The example's scalar case reaches the same bits.
#[test]
fn directional_derivative_matches_reverse_mode() {
    let mut rng = SplitMix64::new(2029);
    for case in cases() {
        for trial in 0..4 {
            let b = build(&case);
            let p = random_point(&mut rng, &case, &b);
            let rec = three_readings_agree(&case, &b, &p, "reverse");
            let seeds = leaf_pairs(&b, &p);
            let oracle = recorded(&rec, &seeds);
            let fwd = oracle.value(rec.pair(b.f).unwrap().t).unwrap().data[0];
            // Reverse mode: the oracle's gradient, dotted with the direction.
            let mut run = Run::new(&b.tape);
            for (x, s) in &seeds {
                run.set(*x, s.v.clone()).unwrap();
            }
            let wrt: Vec<NodeId> = b
                .inputs
                .iter()
                .zip(case.wrt)
                .filter(|(_, &d)| d)
                .map(|(x, _)| *x)
                .collect();
            let g = run.backward(b.f, Tensor::scalar(1.0), &wrt).unwrap();
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

/// Forward over reverse: the recorded gradient is ordinary graph, so replaying it over pairs
/// gives the Hessian-vector product as the gradient's tangent. Plate 1's `f = sum(x³)`: the
/// tangent of `∇f = 3x²` along `v` is `6x·v`, exact here, the same bits as reverse over reverse
/// (`Tape::vjp` of the gradient), and the same again planned and run by the runtime.
#[test]
fn forward_over_reverse_is_the_plate_1_hvp() {
    use tapeplan_core::{Recordable, Shape, Tape};
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

    // Forward over reverse: the gradient replayed over pairs, run by the oracle.
    let rec = record_pairs(&tape, g, |n| n.name.as_deref() == Some("x")).unwrap();
    let leaf = rec.pair(x).unwrap();
    let hv = rec.pair(g).unwrap().t;
    let mut run = Run::new(&rec.tape);
    run.set(leaf.v, Tensor::new(s, xs.clone()).unwrap())
        .unwrap();
    run.set(leaf.t, Tensor::new(s, vs.clone()).unwrap())
        .unwrap();
    run.forward().unwrap();
    let fwd = run.value(hv).unwrap().data.clone();
    assert_eq!(fwd, [0.75, -1.5, -4.5]);

    // Reverse over reverse: the oracle's reverse scan of the gradient, seeded with v.
    let mut rev = Run::new(&tape);
    rev.set(x, Tensor::new(s, xs.clone()).unwrap()).unwrap();
    let rr = rev
        .backward(g, Tensor::new(s, vs.clone()).unwrap(), &[x])
        .unwrap();
    assert_eq!(bits(&fwd), bits(&rr.get(x).unwrap().data));

    // Planned and run by the runtime.
    let pl = plan(
        &rec.tape,
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
