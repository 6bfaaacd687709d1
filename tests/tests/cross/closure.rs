//! Closure under adjoints, proved by test: for every conformance case (every opcode is covered),
//! the recorded first-order gradient is differentiated again — a Hessian-vector product with an
//! explicit seed `v`. The second-order recorded result, planned and run by the runtime, equals
//! the oracle reverse scan over the recorded first-order graph bit for bit, and agrees with
//! finite differences of the first derivative. Every opcode a rule speaks is itself covered.

use tapeplan_tests::cases as common;

use std::collections::BTreeSet;

use common::{bits, build, cases, near_kink, random_input};
use tapeplan_core::{NodeId, Opcode, Run, Tensor};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_planner::{plan, EntrySpec, Root};
use tapeplan_runtime::{Plan as RtPlan, Session};

#[test]
fn every_opcode_a_rule_speaks_has_a_tested_rule() {
    let covered: BTreeSet<Opcode> = cases()
        .iter()
        .flat_map(|c| c.covers.iter().copied())
        .collect();
    let mut spoken = BTreeSet::new();
    for case in cases() {
        let b = build(&case);
        for n in &b.tape.nodes()[b.f.index() + 1..] {
            spoken.insert(n.op);
        }
    }
    for op in spoken {
        assert!(
            covered.contains(&op),
            "a rule speaks {op}, which no conformance case tests"
        );
    }
}

#[test]
fn second_order_recorded_runtime_and_oracle_agree_and_match_finite_differences() {
    let mut rng = SplitMix64::new(31337);
    let mut checked_hvps = 0usize;
    for case in cases() {
        for trial in 0..2 {
            let mut b = build(&case);
            // The first differentiated input's recorded gradient is the new root.
            let Some((k0, g0)) = b
                .grads
                .iter()
                .enumerate()
                .find_map(|(k, g)| g.map(|g| (k, g)))
            else {
                continue;
            };
            let g_shape = b.tape.shape(g0).unwrap();
            let v = b.tape.input("v", g_shape);
            let wrt: Vec<NodeId> = b
                .inputs
                .iter()
                .zip(case.wrt)
                .filter(|(_, &d)| d)
                .map(|(x, _)| *x)
                .collect();
            let second = b.tape.vjp(g0, v, &wrt).unwrap();

            let values: Vec<Vec<f32>> = case
                .inputs
                .iter()
                .zip(&b.inputs)
                .enumerate()
                .map(|(k, ((_, lo, hi), x))| {
                    random_input(&mut rng, b.tape.shape(*x).unwrap(), *lo, *hi, !case.wrt[k])
                })
                .collect();
            let w_shape = b.tape.shape(b.w).unwrap();
            let w_vals = random_input(&mut rng, w_shape, -1.0, 1.0, false);
            let v_vals = random_input(&mut rng, g_shape, -1.0, 1.0, false);
            let set = |run: &mut Run, xs: &[Vec<f32>]| {
                for (x, val) in b.inputs.iter().zip(xs) {
                    let s = b.tape.shape(*x).unwrap();
                    run.set(*x, Tensor::new(s, val.clone()).unwrap()).unwrap();
                }
                run.set(b.w, Tensor::new(w_shape, w_vals.clone()).unwrap())
                    .unwrap();
                run.set(v, Tensor::new(g_shape, v_vals.clone()).unwrap())
                    .unwrap();
            };

            // The oracle: the engine reverse scan over the recorded first-order graph.
            let mut run = Run::new(&b.tape);
            set(&mut run, &values);
            let oracle = run
                .backward(g0, Tensor::new(g_shape, v_vals.clone()).unwrap(), &wrt)
                .unwrap();

            // The recorded second order, interpreted.
            let mut run2 = Run::new(&b.tape);
            set(&mut run2, &values);
            run2.forward().unwrap();
            let mut roots = Vec::new();
            for (k, x) in b.inputs.iter().enumerate() {
                let o = oracle.get(*x).map(|t| bits(&t.data));
                let r = second.get(*x).map(|h| bits(&run2.value(*h).unwrap().data));
                assert_eq!(o, r, "{} trial {trial}: HVP input {k}", case.name);
                if let Some(h) = second.get(*x) {
                    if b.tape.nodes()[h.index()].op != Opcode::Input {
                        roots.push(Root::Output {
                            name: format!("h{k}"),
                            node: *h,
                        });
                    }
                }
            }

            // Planned and run by the runtime.
            if !roots.is_empty() {
                let p = plan(
                    &b.tape,
                    &[EntrySpec {
                        name: "hvp".into(),
                        roots,
                        guarded: false,
                    }],
                )
                .unwrap();
                let bytes = p.to_bytes();
                let rt = RtPlan::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", case.name));
                let e = rt.entry("hvp").unwrap();
                let mut arena = vec![f32::NAN; rt.arena_elems()];
                let mut s = Session::bind(&rt, &mut arena).unwrap();
                for (k, val) in values.iter().enumerate() {
                    let name = format!("x{k}");
                    if rt.input(e, &name).is_some() {
                        s.set_input(e, &name, val).unwrap();
                    }
                }
                for (name, val) in [("w", &w_vals), ("v", &v_vals)] {
                    if rt.input(e, name).is_some() {
                        s.set_input(e, name, val).unwrap();
                    }
                }
                s.run(e).unwrap();
                for (k, x) in b.inputs.iter().enumerate() {
                    if let Ok(h) = s.output(e, &format!("h{k}")) {
                        assert_eq!(
                            bits(h),
                            bits(&oracle.get(*x).unwrap().data),
                            "{} trial {trial}: runtime HVP input {k}",
                            case.name
                        );
                        checked_hvps += 1;
                    }
                }
            }

            // Finite differences of the first derivative along each coordinate:
            // d/dx_k[j] (g0 · v), central, h = 1e-2, |fd - hv| <= 3e-2 (1 + |hv|).
            if trial == 0 && case.name != "detach" {
                let s_of = |xs: &[Vec<f32>]| {
                    let mut run = Run::new(&b.tape);
                    set(&mut run, xs);
                    run.forward_until(g0).unwrap();
                    run.value(g0)
                        .unwrap()
                        .data
                        .iter()
                        .zip(&v_vals)
                        .map(|(a, b)| (*a as f64) * (*b as f64))
                        .sum::<f64>()
                };
                for (k, x) in b.inputs.iter().enumerate() {
                    if !case.wrt[k] {
                        continue;
                    }
                    let hv = oracle
                        .get(*x)
                        .map(|t| t.data.clone())
                        .unwrap_or_else(|| vec![0.0; values[k].len()]);
                    for j in 0..values[k].len() {
                        if near_kink(case.name, &values, j) {
                            continue;
                        }
                        let h = 1e-2f32;
                        let mut up = values.clone();
                        up[k][j] += h;
                        let mut down = values.clone();
                        down[k][j] -= h;
                        let fd = ((s_of(&up) - s_of(&down)) / (2.0 * h as f64)) as f32;
                        assert!(
                            (fd - hv[j]).abs() <= 3e-2 * (1.0 + hv[j].abs()),
                            "{}: d/dx{k}[{j}] (g{k0}·v): finite difference {fd} vs HVP {}",
                            case.name,
                            hv[j]
                        );
                    }
                }
            }
        }
    }
    assert!(
        checked_hvps > 20,
        "only {checked_hvps} runtime HVPs checked"
    );
}
