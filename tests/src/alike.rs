//! Two plans of one model that must train to the same bits (a planning choice that keeps them:
//! the fused SGD update, transposes folded into products): [`train_alike`].

use tapeplan_planner::exec::{Oracle, RuntimeModel};
use tapeplan_planner::model::TrainingJob;
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_runtime::{Decoded, Plan, Session};

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Trains `a` and `b` (two plans of one classifier with inputs `[batch, d_in]` and `classes`
/// classes) from `a`'s initial parameters for `steps` steps of random data drawn from `seed`,
/// and asserts that every step's loss and every parameter after it are bit for bit the same:
/// `a` and `b` through `RuntimeModel` (the records path), `a` through a decoded `Program`
/// (`Session::run_program`, its `init` entry run first when it has one), and the oracle.
pub fn train_alike(
    a: &TrainingJob,
    b: &TrainingJob,
    (d_in, classes): (usize, usize),
    batch: usize,
    (steps, seed): (usize, u64),
    what: &str,
) {
    let (ab, bb) = (a.schedule.to_bytes(), b.schedule.to_bytes());
    let mut models = [
        RuntimeModel::new(&ab).unwrap(),
        RuntimeModel::new(&bb).unwrap(),
    ];
    for m in &mut models {
        for s in &a.parameters {
            m.load_parameter(&s.name, &s.init).unwrap();
        }
    }
    let rt = Plan::parse(&ab).unwrap();
    let train = rt.entry("train_step").unwrap();
    let mut arena = vec![0.0f32; rt.arena_elems()];
    let mut session = Session::bind(&rt, &mut arena).unwrap();
    // Optimizer state starts from the plan's `init` entry, as `RuntimeModel::new` runs it.
    if let Some(init) = rt.entry("init") {
        session.run(init).unwrap();
    }
    for s in &a.parameters {
        session.load_parameter(&s.name, &s.init).unwrap();
    }
    let mut buf = vec![Decoded::EMPTY; rt.entry_instrs(train).unwrap()];
    let mut oracle = Oracle::with_initial_parameters(a).unwrap();
    let mut rng = SplitMix64::new(seed);
    for step in 0..steps {
        let x: Vec<f32> = (0..batch * d_in)
            .map(|_| rng.next_f32() * 4.0 - 2.0)
            .collect();
        let labels: Vec<f32> = (0..batch).map(|_| rng.below(classes) as f32).collect();
        let l_a = models[0].train_step(&x, &labels).unwrap();
        let l_b = models[1].train_step(&x, &labels).unwrap();
        let l_oracle = oracle.step(&x, &labels).unwrap();
        session.set_input(train, "x", &x).unwrap();
        session.set_labels(train, "labels", &labels).unwrap();
        let program = session.decode(train, &mut buf).unwrap();
        session.run_program(&program).unwrap();
        let l_decoded = session.output(train, "loss").unwrap()[0];
        assert_eq!(l_a.to_bits(), l_b.to_bits(), "{what} step {step}: loss");
        assert_eq!(
            l_a.to_bits(),
            l_oracle.to_bits(),
            "{what} step {step}: oracle"
        );
        assert_eq!(
            l_a.to_bits(),
            l_decoded.to_bits(),
            "{what} step {step}: decoded"
        );
        for (k, s) in a.parameters.iter().enumerate() {
            let pa = models[0].parameter(&s.name).unwrap();
            let pb = models[1].parameter(&s.name).unwrap();
            assert_eq!(bits(&pa), bits(&pb), "{what} step {step}: {}", s.name);
            assert_eq!(
                bits(&pa),
                bits(&oracle.params[k].data),
                "{what} step {step}: {} oracle",
                s.name
            );
            let d = session.parameter(&s.name).unwrap();
            assert_eq!(bits(&pa), bits(d), "{what} step {step}: {} decoded", s.name);
        }
    }
}
