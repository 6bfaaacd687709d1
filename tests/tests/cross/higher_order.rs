//! Higher order is ordinary plan: the Plate 1 HVP planned and run by the runtime, and a third
//! derivative recorded, planned and run.

use tapeplan_core::{Recordable, Run, Shape, Tape, Tensor};
use tapeplan_planner::{plan, EntrySpec, Root};
use tapeplan_runtime::{Plan, Session};

fn run_entry(tape: &Tape, out: tapeplan_core::NodeId, inputs: &[(&str, Vec<f32>)]) -> Vec<f32> {
    let p = plan(
        tape,
        &[EntrySpec {
            name: "e".into(),
            roots: vec![Root::Output {
                name: "out".into(),
                node: out,
            }],
            guarded: false,
        }],
    )
    .unwrap();
    let bytes = p.to_bytes();
    let rt = Plan::parse(&bytes).unwrap();
    let e = rt.entry("e").unwrap();
    let mut arena = vec![0.0; rt.arena_elems()];
    let mut s = Session::bind(&rt, &mut arena).unwrap();
    for (name, v) in inputs {
        s.set_input(e, name, v).unwrap();
    }
    s.run(e).unwrap();
    s.output(e, "out").unwrap().to_vec()
}

#[test]
fn plate_1_hvp_is_an_ordinary_planned_entry() {
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::vector(3));
    let f = {
        let mut t = tape.trace();
        let xx = t.mul(&x, &x).unwrap();
        let xxx = t.mul(&xx, &x).unwrap();
        t.sum_all(&xxx).unwrap()
    };
    let g = *tape.differentiate(f, &[x]).unwrap().get(x).unwrap();
    let v = tape.input("v", Shape::vector(3));
    let hv = *tape.vjp(g, v, &[x]).unwrap().get(x).unwrap();
    let xs = vec![0.5, -0.25, 1.5];
    let vs = vec![0.25, 1.0, -0.5];
    let out = run_entry(&tape, hv, &[("x", xs.clone()), ("v", vs.clone())]);
    assert_eq!(out, [0.75, -1.5, -4.5]);
    let mut run = Run::new(&tape);
    run.set(x, Tensor::new(Shape::vector(3), xs).unwrap())
        .unwrap();
    let oracle = run
        .backward(g, Tensor::new(Shape::vector(3), vs).unwrap(), &[x])
        .unwrap();
    let o: Vec<u32> = oracle
        .get(x)
        .unwrap()
        .data
        .iter()
        .map(|v| v.to_bits())
        .collect();
    let r: Vec<u32> = out.iter().map(|v| v.to_bits()).collect();
    assert_eq!(o, r);
}

#[test]
fn third_derivative_of_x_to_the_fourth_is_24x() {
    // x⁴ at 1.5: 4x³ = 13.5, 12x² = 27, 24x = 36, all exact in f32.
    let mut tape = Tape::new();
    let x = tape.input("x", Shape::SCALAR);
    let f = {
        let mut t = tape.trace();
        let x2 = t.mul(&x, &x).unwrap();
        t.mul(&x2, &x2).unwrap()
    };
    let d1 = *tape.differentiate(f, &[x]).unwrap().get(x).unwrap();
    let d2 = *tape.differentiate(d1, &[x]).unwrap().get(x).unwrap();
    let d3 = *tape.differentiate(d2, &[x]).unwrap().get(x).unwrap();
    for (node, expected) in [(d1, 13.5f32), (d2, 27.0), (d3, 36.0)] {
        let out = run_entry(&tape, node, &[("x", vec![1.5])]);
        assert_eq!(out, [expected]);
    }
    // The oracle over the recorded second derivative agrees.
    let mut run = Run::new(&tape);
    run.set(x, Tensor::scalar(1.5)).unwrap();
    let o = run.backward(d2, Tensor::scalar(1.0), &[x]).unwrap();
    assert_eq!(o.get(x).unwrap().data, [36.0]);
}
