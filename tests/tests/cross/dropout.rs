//! Dropout with replayed randomness: the reverse pass multiplies by the forward's mask, the
//! draw is a pure function of the persistent (key, counter), training with dropout through the
//! runtime equals the oracle bit for bit, and inference (`forward`) never drops.

use tapeplan_core::{Recordable, Run, Shape, Tape, Tensor};
use tapeplan_planner::exec::Oracle;
use tapeplan_planner::exec::RuntimeModel;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{glorot_uniform, Activation, Loss, Mlp};
use tapeplan_planner::model::{JobOptions, TrainingJob};
use tapeplan_planner::protocol::SplitMix64;

#[test]
fn the_gradient_uses_the_forward_mask() {
    let mut tape = Tape::new();
    let s = Shape::matrix(4, 8);
    let x = tape.input("x", s);
    let w = tape.input("w", s);
    let key = tape.parameter("rng.key", Shape::SCALAR);
    let counter = tape.parameter("rng.counter", Shape::SCALAR);
    let (y, f) = {
        let mut t = tape.trace();
        let y = t.dropout(&x, 0.5, &key, &counter).unwrap();
        let yw = t.mul(&y, &w).unwrap();
        (y, t.sum_all(&yw).unwrap())
    };
    let dx = *tape.differentiate(f, &[x]).unwrap().get(x).unwrap();
    let mut rng = SplitMix64::new(4);
    let xs: Vec<f32> = (0..32).map(|_| 0.5 + rng.next_f32()).collect(); // never 0
    let ws: Vec<f32> = (0..32).map(|_| rng.next_f32() - 0.5).collect();
    let mut run = Run::new(&tape);
    run.set(x, Tensor::new(s, xs.clone()).unwrap()).unwrap();
    run.set(w, Tensor::new(s, ws.clone()).unwrap()).unwrap();
    run.set(key, Tensor::scalar(7.0)).unwrap();
    run.set(counter, Tensor::scalar(3.0)).unwrap();
    run.forward().unwrap();
    let (yv, gv) = (&run.value(y).unwrap().data, &run.value(dx).unwrap().data);
    let kept = yv.iter().filter(|v| **v != 0.0).count();
    assert!(kept > 4 && kept < 28, "p = 0.5 kept {kept} of 32");
    for i in 0..32 {
        if yv[i] == 0.0 {
            assert_eq!(
                gv[i], 0.0,
                "element {i} dropped in the forward but not the reverse"
            );
        } else {
            assert_eq!(yv[i], xs[i] * 2.0);
            assert_eq!(
                gv[i],
                ws[i] * 2.0,
                "element {i} kept: gradient is w / (1 - p)"
            );
        }
    }
}

fn train(seed: u64, steps: usize) -> (Vec<f32>, Vec<f32>) {
    let mlp = Mlp {
        sizes: vec![8, 16, 3],
        activation: Activation::Relu,
    };
    let options = JobOptions {
        guarded: true,
        dropout: 0.25,
        seed,
        ..Default::default()
    };
    let job = TrainingJob::build_with(
        mlp,
        Loss::SoftmaxCrossEntropy,
        Optimizer::sgd(0.1),
        4,
        options,
    )
    .unwrap();
    let bytes = job.schedule.to_bytes();
    let mut model = RuntimeModel::new(&bytes).unwrap();
    let shapes = job.parameter_shapes();
    let init = glorot_uniform(&shapes, 1);
    for ((n, _), v) in shapes.iter().zip(&init) {
        model.load_parameter(n, v).unwrap();
    }
    let mut oracle = Oracle::new(&job, &init).unwrap();
    let mut rng = SplitMix64::new(12);
    let x: Vec<f32> = (0..32).map(|_| rng.next_f32()).collect();
    let logits_before = model.logits(&x).unwrap();
    for step in 0..steps {
        let xb: Vec<f32> = (0..32).map(|_| rng.next_f32()).collect();
        let yb: Vec<f32> = (0..4).map(|_| rng.below(3) as f32).collect();
        let a = model.train_step(&xb, &yb).unwrap();
        let b = oracle.step(&xb, &yb).unwrap();
        assert_eq!(a.to_bits(), b.to_bits(), "seed {seed} step {step}: loss");
        assert_eq!(
            model.parameter("w1").unwrap(),
            oracle.params[0].data,
            "step {step}"
        );
    }
    assert_eq!(model.parameter("rng.counter").unwrap(), [steps as f32]);
    // Inference is deterministic: the same logits twice, whatever the counter.
    let l1 = model.logits(&x).unwrap();
    let l2 = model.logits(&x).unwrap();
    assert_eq!(l1, l2);
    assert_ne!(l1, logits_before, "training moved the model");
    (model.persistent().to_vec(), l1)
}

#[test]
fn training_with_dropout_replays_and_is_seeded() {
    let (a, la) = train(5, 20);
    let (b, lb) = train(5, 20);
    assert_eq!(a, b, "same seed, same bits");
    assert_eq!(la, lb);
    let (c, _) = train(6, 20);
    assert_ne!(a, c, "another seed draws other masks");
}
