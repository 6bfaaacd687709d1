//! One conformance case per opcode, run against every reader: the oracle reverse scan
//! (`Run::backward`), the recorded gradient evaluated by the tape interpreter, the recorded
//! gradient planned and run by the `no_std` runtime from serialized bytes, and the planner's own
//! host interpreter of the unserialized plan. All must agree bit for bit; finite differences of
//! the forward must agree with the gradient within a stated tolerance.

use tapeplan_tests::cases as common;

use common::{bits, build, cases, near_kink, random_input};
use tapeplan_core::{MathProfile, NodeId, Opcode, Run, Tensor};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_planner::{plan_with, EntrySpec, PlanOptions, Root};
use tapeplan_runtime::{Plan as RtPlan, Session};

#[test]
fn every_opcode_has_a_case() {
    let covered: std::collections::BTreeSet<Opcode> = cases()
        .iter()
        .flat_map(|c| c.covers.iter().copied())
        .collect();
    for &op in Opcode::ALL {
        if matches!(op, Opcode::Input | Opcode::Parameter) {
            continue;
        }
        assert!(covered.contains(&op), "no conformance case covers {op}");
    }
}

#[test]
fn oracle_recorded_runtime_and_host_plan_agree_bit_for_bit() {
    agree(MathProfile::Precise, true);
}

/// The same readers under the `fast` math profile (micromath's `exp`, `ln` and what is built
/// on them): the oracle, the recorded gradient, the runtime and the host plan still agree bit
/// for bit. No finite differences: the rules are the profile's-independent analytic
/// derivatives, which the approximations' own slopes only approach.
#[test]
fn every_reader_agrees_under_the_fast_profile() {
    agree(MathProfile::Fast, false);
}

fn agree(math: MathProfile, finite_differences: bool) {
    let mut rng = SplitMix64::new(2026);
    for case in cases() {
        for trial in 0..4 {
            let b = build(&case);
            let values: Vec<Vec<f32>> = case
                .inputs
                .iter()
                .zip(&b.inputs)
                .enumerate()
                .map(|(k, ((_, lo, hi), x))| {
                    let labels = !case.wrt[k];
                    random_input(&mut rng, b.tape.shape(*x).unwrap(), *lo, *hi, labels)
                })
                .collect();
            let w_shape = b.tape.shape(b.w).unwrap();
            let w_vals = random_input(&mut rng, w_shape, -1.0, 1.0, false);
            let set = |run: &mut Run| {
                for (x, v) in b.inputs.iter().zip(&values) {
                    let s = b.tape.shape(*x).unwrap();
                    run.set(*x, Tensor::new(s, v.clone()).unwrap()).unwrap();
                }
                run.set(b.w, Tensor::new(w_shape, w_vals.clone()).unwrap())
                    .unwrap();
            };

            // 1. The oracle.
            let mut run = Run::with_math(&b.tape, math);
            set(&mut run);
            let wrt: Vec<NodeId> = b
                .inputs
                .iter()
                .zip(case.wrt)
                .filter(|(_, &d)| d)
                .map(|(x, _)| *x)
                .collect();
            let oracle = run.backward(b.f, Tensor::scalar(1.0), &wrt).unwrap();
            let f_val = run.value(b.f).unwrap().data[0];

            // 2. The recorded gradient, interpreted.
            let mut run2 = Run::with_math(&b.tape, math);
            set(&mut run2);
            run2.forward().unwrap();
            for (k, (x, g)) in b.inputs.iter().zip(&b.grads).enumerate() {
                let o = oracle.get(*x).map(|t| t.data.clone());
                let r = g.map(|g| run2.value(g).unwrap().data.clone());
                assert_eq!(
                    o.as_ref().map(|v| bits(v)),
                    r.as_ref().map(|v| bits(v)),
                    "{} trial {trial}: recorded vs oracle, input {k}",
                    case.name
                );
            }

            // 3. Planned, serialized, decoded and run by the runtime; 4. the host interpreter.
            let mut roots = vec![Root::Output {
                name: "f".into(),
                node: b.f,
            }];
            for (k, g) in b.grads.iter().enumerate() {
                if let Some(g) = g {
                    if !matches!(b.tape.nodes()[g.index()].op, Opcode::Input) {
                        roots.push(Root::Output {
                            name: format!("d{k}"),
                            node: *g,
                        });
                    }
                }
            }
            let p = plan_with(
                &b.tape,
                &[EntrySpec {
                    name: "grad".into(),
                    roots,
                    guarded: false,
                }],
                PlanOptions {
                    math,
                    ..PlanOptions::default()
                },
            )
            .unwrap();
            let bytes = p.to_bytes();
            let rt = RtPlan::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", case.name));
            assert_eq!(rt.math(), math);
            let mut arena = vec![f32::NAN; rt.arena_elems()];
            let e = rt.entry("grad").unwrap();
            let mut host_arena = vec![f32::NAN; p.arena_elems];
            let pe = p.entry("grad").unwrap();
            {
                let mut s = Session::bind(&rt, &mut arena).unwrap();
                for (k, v) in values.iter().enumerate() {
                    let name = format!("x{k}");
                    if rt.input(e, &name).is_some() {
                        s.set_input(e, &name, v).unwrap();
                    }
                }
                s.set_input(e, "w", &w_vals).unwrap();
                s.run(e).unwrap();
                for (name, t) in &pe.inputs {
                    let info = p.tensors[*t as usize];
                    let src = if name == "w" {
                        &w_vals
                    } else {
                        &values[name[1..].parse::<usize>().unwrap()]
                    };
                    host_arena[info.offset_elems..info.offset_elems + src.len()]
                        .copy_from_slice(src);
                }
                p.run_host("grad", &mut host_arena).unwrap();
                let host_out = |name: &str| {
                    let (_, t) = pe.outputs.iter().find(|(n, _)| n == name).unwrap();
                    let info = p.tensors[*t as usize];
                    host_arena[info.offset_elems..info.offset_elems + info.shape.elems()].to_vec()
                };
                assert_eq!(
                    s.output(e, "f").unwrap()[0].to_bits(),
                    f_val.to_bits(),
                    "{}: runtime loss",
                    case.name
                );
                assert_eq!(bits(&host_out("f")), vec![f_val.to_bits()]);
                for (k, x) in b.inputs.iter().enumerate() {
                    let name = format!("d{k}");
                    if let Ok(rt_grad) = s.output(e, &name) {
                        let o = oracle.get(*x).unwrap();
                        assert_eq!(
                            bits(rt_grad),
                            bits(&o.data),
                            "{} trial {trial}: runtime vs oracle, input {k}",
                            case.name
                        );
                        assert_eq!(
                            bits(&host_out(&name)),
                            bits(&o.data),
                            "{}: host plan",
                            case.name
                        );
                    }
                }
            }

            // Finite differences of the forward, in f32, central, h = 1e-2:
            // |fd - g| <= 2e-2 * (1 + |g|).
            // (A stop-gradient's rule is not the derivative of its forward: no finite differences.)
            if finite_differences && trial == 0 && case.name != "detach" {
                for (k, x) in b.inputs.iter().enumerate() {
                    if !case.wrt[k] {
                        continue;
                    }
                    let g = oracle
                        .get(*x)
                        .map(|t| t.data.clone())
                        .unwrap_or_else(|| vec![0.0; values[k].len()]);
                    for i in 0..values[k].len() {
                        let h = 1e-2f32;
                        let eval = |delta: f32| {
                            let mut run = Run::with_math(&b.tape, math);
                            set(&mut run);
                            let mut v = values[k].clone();
                            v[i] += delta;
                            run.set(*x, Tensor::new(b.tape.shape(*x).unwrap(), v).unwrap())
                                .unwrap();
                            run.forward_until(b.f).unwrap();
                            run.value(b.f).unwrap().data[0]
                        };
                        let fd = (eval(h) - eval(-h)) / (2.0 * h);
                        let tol = 2e-2 * (1.0 + g[i].abs());
                        // Piecewise-constant ops and kinks: skip points within 2h of a kink.
                        if !near_kink(case.name, &values, i) {
                            assert!(
                                (fd - g[i]).abs() <= tol,
                                "{}: d/dx{k}[{i}] finite difference {fd} vs gradient {}",
                                case.name,
                                g[i]
                            );
                        }
                    }
                }
            }
        }
    }
}
