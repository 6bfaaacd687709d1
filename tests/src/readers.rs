//! One function evaluated by every reader at given inputs: the oracle reverse scan, the recorded
//! gradient interpreted, and the recorded gradient planned, serialized and run by the `no_std`
//! runtime. The numerics tests use it to state a literal value once and hold every reader to it.

use tapeplan_core::{MathProfile, NodeId, Run, Tape, Tensor};
use tapeplan_planner::{plan_with, EntrySpec, PlanOptions, Root};
use tapeplan_runtime::{Plan as RtPlan, Session};

use crate::cases::bits;

/// `f`'s value and its gradient with respect to each of `inputs` (`None`: not reached), after
/// checking that the three readings give the same bits (NaNs as one class).
///
/// # Panics
/// When a reading fails or the readings disagree.
pub fn value_and_gradients(
    tape: &mut Tape,
    f: NodeId,
    inputs: &[(NodeId, Vec<f32>)],
) -> (Vec<f32>, Vec<Option<Vec<f32>>>) {
    let math = MathProfile::Precise;
    let wrt: Vec<NodeId> = inputs.iter().map(|(x, _)| *x).collect();
    let set = |run: &mut Run, tape: &Tape| {
        for (x, v) in inputs {
            let s = tape.shape(*x).unwrap();
            run.set(*x, Tensor::new(s, v.clone()).unwrap()).unwrap();
        }
    };
    // The oracle.
    let (value, oracle) = {
        let mut run = Run::with_math(tape, math);
        set(&mut run, tape);
        let adj = run.backward(f, Tensor::scalar(1.0), &wrt).unwrap();
        let value = run.value(f).unwrap().data.clone();
        let grads: Vec<Option<Vec<f32>>> = wrt
            .iter()
            .map(|x| adj.get(*x).map(|t| t.data.clone()))
            .collect();
        (value, grads)
    };
    // The recorded gradient, interpreted.
    let recorded = tape.differentiate(f, &wrt).unwrap();
    let grads: Vec<Option<NodeId>> = wrt.iter().map(|x| recorded.get(*x).copied()).collect();
    {
        let mut run = Run::with_math(tape, math);
        set(&mut run, tape);
        run.forward().unwrap();
        for (k, g) in grads.iter().enumerate() {
            let r = g.map(|g| bits(&run.value(g).unwrap().data));
            assert_eq!(
                r,
                oracle[k].as_ref().map(|v| bits(v)),
                "recorded, input {k}"
            );
        }
    }
    // Planned, serialized and run by the runtime.
    let mut roots = vec![Root::Output {
        name: "f".into(),
        node: f,
    }];
    for (k, g) in grads.iter().enumerate() {
        if let Some(g) = g {
            roots.push(Root::Output {
                name: format!("d{k}"),
                node: *g,
            });
        }
    }
    let p = plan_with(
        tape,
        &[EntrySpec {
            name: "e".into(),
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
    let rt = RtPlan::parse(&bytes).unwrap();
    let mut arena = vec![f32::NAN; rt.arena_elems()];
    let e = rt.entry("e").unwrap();
    let mut s = Session::bind(&rt, &mut arena).unwrap();
    for (x, v) in inputs {
        let name = tape.nodes()[x.index()].name.clone().unwrap_or_default();
        if rt.input(e, &name).is_some() {
            s.set_input(e, &name, v).unwrap();
        }
    }
    s.run(e).unwrap();
    assert_eq!(
        bits(s.output(e, "f").unwrap()),
        bits(&value),
        "runtime value"
    );
    for (k, g) in grads.iter().enumerate() {
        if g.is_some() {
            let rt_grad = s.output(e, &format!("d{k}")).unwrap();
            assert_eq!(
                Some(bits(rt_grad)),
                oracle[k].as_ref().map(|v| bits(v)),
                "runtime, input {k}"
            );
        }
    }
    (value, oracle)
}
