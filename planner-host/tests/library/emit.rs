//! `tapeplan emit`: the Rust module of a small plan is checked in
//! (`tests/library/emitted/small_plan.rs`, regenerated with `TAPEPLAN_BLESS=1`), compiled into
//! this test, and used: its typed accessors train the plan through the runtime with the same bits
//! as the runtime's API by name.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

#[rustfmt::skip]
#[path = "emitted/small_plan.rs"]
mod small_plan;

use tapeplan_planner::io::rust_module::rust_module;
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{Activation, JobOptions, Loss, Mlp, TrainingJob};
use tapeplan_runtime::{Limits, Ops, Plan, Scratch, Session};

/// The plan the module was emitted from: a 4-3-2 tanh MLP, batch 2, SGD with momentum (state,
/// so an `init` entry), guarded.
fn small_plan_bytes() -> Vec<u8> {
    let mlp = Mlp {
        sizes: vec![4, 3, 2],
        activation: Activation::Tanh,
    };
    let options = JobOptions {
        guarded: true,
        ..JobOptions::default()
    };
    let job = TrainingJob::build_with(
        mlp,
        Loss::SoftmaxCrossEntropy,
        Optimizer::Momentum {
            lr: 0.01,
            momentum: 0.9,
            nesterov: false,
        },
        2,
        options,
    )
    .unwrap();
    job.schedule.to_bytes()
}

#[test]
fn the_checked_in_module_is_what_emit_writes() {
    let module = rust_module(&small_plan_bytes(), "small.plan").unwrap();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/library/emitted/small_plan.rs");
    if std::env::var_os("TAPEPLAN_BLESS").is_some() {
        std::fs::write(&path, &module).unwrap();
    }
    let kept = std::fs::read_to_string(&path).unwrap();
    assert!(
        kept == module,
        "tests/library/emitted/small_plan.rs is stale: TAPEPLAN_BLESS=1 cargo test -p tapeplan-planner \
         --test library -- emit::"
    );
    assert!(
        small_plan::PLAN.0[..] == small_plan_bytes()[..],
        "PLAN is not the plan"
    );
    // The prevalidated op set names the plan's checksum and takes the plan on it.
    let plan = small_plan::plan().unwrap();
    assert_eq!(
        small_plan::PrevalidatedOps::PREVALIDATED_CRC32,
        Some(plan.crc32())
    );
    assert_eq!(small_plan::PrevalidatedOps::SET, small_plan::PlanOps::SET);
    let mut scratch = Scratch::<{ small_plan::TENSORS }>::new();
    let pre = Plan::parse_selective::<small_plan::PrevalidatedOps, { small_plan::TENSORS }>(
        &small_plan::PLAN.0,
        &Limits::DEFAULT,
        &mut scratch,
    )
    .unwrap();
    assert_eq!(pre.crc32(), plan.crc32());
}

#[test]
fn the_typed_accessors_train_the_plan() {
    let plan = small_plan::plan().unwrap();
    assert_eq!(plan.plan_id(), small_plan::PLAN_ID);
    assert_eq!(plan.arena_elems(), small_plan::ARENA_ELEMS);
    let bytes = small_plan_bytes();
    let by_name = Plan::parse(&bytes).unwrap();
    let mut arena = vec![0.0f32; small_plan::ARENA_ELEMS];
    let mut other = vec![0.0f32; small_plan::ARENA_ELEMS];
    let mut typed = Session::bind(&plan, &mut arena).unwrap();
    let mut named = Session::bind(&by_name, &mut other).unwrap();
    // The selective build over the emitted op set (the plan's opcodes), through the same typed
    // accessors: the same bits.
    assert_eq!(small_plan::PlanOps::SET, by_name.op_set());
    let mut scratch = Scratch::<128>::new();
    let sel = Plan::parse_selective::<small_plan::PlanOps, 128>(
        &small_plan::PLAN.0,
        &Limits::DEFAULT,
        &mut scratch,
    )
    .unwrap();
    let mut third = vec![0.0f32; small_plan::ARENA_ELEMS];
    let mut selective = Session::bind_selective::<small_plan::PlanOps>(&sel, &mut third).unwrap();
    let w1: Vec<f32> = (0..small_plan::parameters::W1.1)
        .map(|i| i as f32 * 0.1 - 0.5)
        .collect();
    typed
        .load_parameter(small_plan::parameters::W1.0, &w1)
        .unwrap();
    selective
        .load_parameter(small_plan::parameters::W1.0, &w1)
        .unwrap();
    named.load_parameter("w1", &w1).unwrap();
    small_plan::init::run(&mut typed).unwrap();
    small_plan::init::run(&mut selective).unwrap();
    named.run(by_name.entry("init").unwrap()).unwrap();
    let train = by_name.entry("train_step").unwrap();
    for step in 0..4 {
        let x: [f32; 8] = core::array::from_fn(|i| ((i + step) % 5) as f32 * 0.25 - 0.5);
        let labels = [(step % 2) as f32, 1.0];
        small_plan::train_step::set_x(&mut typed, &x).unwrap();
        small_plan::train_step::set_labels(&mut typed, &labels).unwrap();
        small_plan::train_step::run(&mut typed).unwrap();
        small_plan::train_step::set_x(&mut selective, &x).unwrap();
        small_plan::train_step::set_labels(&mut selective, &labels).unwrap();
        small_plan::train_step::run(&mut selective).unwrap();
        named.set_input(train, "x", &x).unwrap();
        named.set_input(train, "labels", &labels).unwrap();
        named.run(train).unwrap();
        let loss = small_plan::train_step::loss(&typed).unwrap();
        assert_eq!(
            loss[0].to_bits(),
            named.output(train, "loss").unwrap()[0].to_bits()
        );
        assert_eq!(
            small_plan::train_step::loss(&selective).unwrap()[0].to_bits(),
            loss[0].to_bits()
        );
        assert!(loss[0].is_finite() && loss[0] > 0.0);
    }
    assert_eq!(typed.persistent(), named.persistent());
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(selective.persistent()), bits(named.persistent()));
    // A label outside the classes is refused through the checked path.
    assert!(small_plan::train_step::set_labels(&mut typed, &[2.0, 0.0]).is_err());
}
