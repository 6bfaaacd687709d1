//! The eager entry point: values recorded as they are computed, `Eager::backward` over the
//! retained values, the recorded gradient interpreted, and the recorded gradient planned and run
//! by the runtime all agree bit for bit on a small model.

use tapeplan_core::{Eager, Run, Shape, Tensor};
use tapeplan_planner::model::{glorot_uniform, softmax_cross_entropy, Activation, Mlp};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_planner::{plan, EntrySpec, Root};
use tapeplan_runtime::{Plan, Session};

#[test]
fn eager_recorded_and_runtime_gradients_agree() {
    let mlp = Mlp {
        sizes: vec![5, 4, 3],
        activation: Activation::Tanh,
    };
    let shapes = mlp.parameter_shapes();
    let init = glorot_uniform(&shapes, 9);
    let mut rng = SplitMix64::new(2);
    let xs: Vec<f32> = (0..10).map(|_| rng.next_f32() - 0.5).collect();
    let labels = vec![2.0, 0.0];

    let mut e = Eager::new();
    let x = e.input("x", Tensor::new(Shape::matrix(2, 5), xs.clone()).unwrap());
    let y = e.input(
        "labels",
        Tensor::new(Shape::vector(2), labels.clone()).unwrap(),
    );
    let params: Vec<_> = shapes
        .iter()
        .zip(&init)
        .map(|((n, s), v)| e.parameter(n, Tensor::new(*s, v.clone()).unwrap()))
        .collect();
    let logits = mlp.logits(&mut e, &x, &params).unwrap();
    let loss = softmax_cross_entropy(&mut e, &logits, &y).unwrap();
    let eager = e.backward(loss, &params).unwrap();

    let mut tape = e.tape().clone();
    let grads = tape.differentiate(loss, &params).unwrap();
    let mut run = Run::new(&tape);
    run.set(x, e.value(x).unwrap().clone()).unwrap();
    run.set(y, e.value(y).unwrap().clone()).unwrap();
    for p in &params {
        run.set(*p, e.value(*p).unwrap().clone()).unwrap();
    }
    run.forward().unwrap();
    let roots = params
        .iter()
        .enumerate()
        .map(|(k, p)| Root::Output {
            name: format!("d{k}"),
            node: *grads.get(*p).unwrap(),
        })
        .collect();
    let p = plan(
        &tape,
        &[EntrySpec {
            name: "grad".into(),
            roots,
            guarded: false,
        }],
    )
    .unwrap();
    let bytes = p.to_bytes();
    let rt = Plan::parse(&bytes).unwrap();
    let entry = rt.entry("grad").unwrap();
    let mut arena = vec![0.0; rt.arena_elems()];
    let mut s = Session::bind(&rt, &mut arena).unwrap();
    for ((n, _), v) in shapes.iter().zip(&init) {
        s.load_parameter(n, v).unwrap();
    }
    s.set_input(entry, "x", &xs).unwrap();
    s.set_input(entry, "labels", &labels).unwrap();
    s.run(entry).unwrap();
    for (k, param) in params.iter().enumerate() {
        let eager_g = &eager.get(*param).unwrap().data;
        let recorded = &run.value(*grads.get(*param).unwrap()).unwrap().data;
        let runtime = s.output(entry, &format!("d{k}")).unwrap();
        assert_eq!(eager_g, recorded, "parameter {k}: eager vs recorded");
        assert_eq!(
            eager_g.as_slice(),
            runtime,
            "parameter {k}: eager vs runtime"
        );
    }
}
