//! Transposes folded into the products that read them (`matmul_tn`, `matmul_nt`,
//! `PlanOptions::fold_transposes`) keep the bits: folded and unfolded plans train to identical
//! losses and parameters, step after step, under both arithmetic profiles, with plain SGD (its
//! fused update `sgd_matmul` composed with the folded products) and Adam, for weights
//! `[in, out]` (the `--layers` MLP) and `[out, in]` (`nn::Linear`), through the record-reading
//! and the decoded runtime paths, and both equal the oracle. The folded plan computes no
//! transpose of a product operand and its arena is no larger. Hostile operands of the new
//! instructions are refused by validation, and a selective build without them refuses a plan
//! that uses them.

use tapeplan_core::format::{HEADER_BYTES, INSTR_RECORD_BYTES, TENSOR_RECORD_BYTES};
use tapeplan_core::{op_set, ArithProfile, Opcode};
use tapeplan_planner::model::nn::{Linear, ReLU, Sequential, Tanh};
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{Activation, JobOptions, Loss, Mlp, Model, TrainingJob};
use tapeplan_planner::{PlanOptions, Schedule};
use tapeplan_runtime::{Limits, Plan, Scratch};

/// How many of a plan's `train_step` instructions have opcode `op`.
fn count(s: &Schedule, op: Opcode) -> usize {
    s.entries
        .iter()
        .filter(|e| e.name == "train_step")
        .flat_map(|e| &e.instrs)
        .filter(|i| i.op == op)
        .count()
}

fn job(
    model: &dyn Model,
    batch: usize,
    optimizer: Optimizer,
    arith: ArithProfile,
    fold_transposes: bool,
) -> TrainingJob {
    TrainingJob::for_model(model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(optimizer)
        .batch(batch)
        .options(JobOptions {
            planning: PlanOptions {
                arith,
                fold_transposes,
                ..PlanOptions::default()
            },
            ..JobOptions::default()
        })
        .build()
        .unwrap()
}

/// Trains `model` with the folded and the unfolded plan (and the oracle, and the folded plan
/// through the decoded path) for six steps; answers the two plans' arenas in elements.
fn train_both(
    model: &dyn Model,
    (d_in, classes): (usize, usize),
    batch: usize,
    optimizer: Optimizer,
    arith: ArithProfile,
) -> (usize, usize) {
    let (folded, plain) = (
        job(model, batch, optimizer, arith, true),
        job(model, batch, optimizer, arith, false),
    );
    let products =
        count(&folded.schedule, Opcode::MatMulTn) + count(&folded.schedule, Opcode::MatMulNt);
    assert!(products > 0, "{arith:?}: nothing folded");
    assert_eq!(count(&plain.schedule, Opcode::MatMulTn), 0);
    assert_eq!(count(&plain.schedule, Opcode::MatMulNt), 0);
    assert!(
        count(&folded.schedule, Opcode::Transpose) < count(&plain.schedule, Opcode::Transpose),
        "the folded plan computes fewer transposes"
    );
    tapeplan_tests::alike::train_alike(
        &folded,
        &plain,
        (d_in, classes),
        batch,
        (6, 29),
        &format!("{arith:?}"),
    );
    (folded.schedule.arena_elems, plain.schedule.arena_elems)
}

#[test]
fn folded_and_unfolded_plans_train_to_the_same_bits() {
    let mlp = Mlp {
        sizes: vec![12, 9, 5],
        activation: Activation::Tanh,
    };
    let deep = Mlp {
        sizes: vec![17, 33, 20, 3],
        activation: Activation::Relu,
    };
    // `nn::Linear` keeps its weight `[out, in]`: the forward product reads it transposed.
    let linear = Sequential::new(&[12])
        .push(Linear::new(12, 24))
        .push(Tanh)
        .push(Linear::new(24, 24))
        .push(ReLU)
        .push(Linear::new(24, 4))
        .seed(3);
    for arith in [ArithProfile::Separate, ArithProfile::Fma] {
        for optimizer in [Optimizer::sgd(0.3), Optimizer::adam(0.01)] {
            for (model, dims, batch) in [
                (&mlp as &dyn Model, (12, 5), 7),
                (&deep, (17, 3), 4),
                (&linear, (12, 4), 3),
            ] {
                let (folded, plain) = train_both(model, dims, batch, optimizer, arith);
                assert!(
                    folded <= plain,
                    "{arith:?}: folded {folded} > {plain} elements"
                );
            }
        }
    }
}

#[test]
fn the_fused_sgd_update_stays_with_folded_products() {
    // W1's shape: the fused update (`sgd_matmul`) of both weights, and `ḡ · w2ᵀ` folded.
    let w1 = Mlp {
        sizes: vec![64, 32, 10],
        activation: Activation::Tanh,
    };
    let j = job(&w1, 32, Optimizer::sgd(0.1), ArithProfile::Separate, true);
    assert_eq!(count(&j.schedule, Opcode::SgdMatMul), 2);
    assert_eq!(count(&j.schedule, Opcode::MatMulNt), 1);
    assert_eq!(count(&j.schedule, Opcode::Transpose), 0);
    let off = job(&w1, 32, Optimizer::sgd(0.1), ArithProfile::Separate, false);
    assert!(j.schedule.arena_elems < off.schedule.arena_elems);
}

/// A small folded Adam plan and the record offsets of its `matmul_tn` / `matmul_nt`
/// instructions.
fn folded_plan(sizes: &[usize], batch: usize) -> (Vec<u8>, Vec<usize>) {
    let mlp = Mlp {
        sizes: sizes.to_vec(),
        activation: Activation::Tanh,
    };
    let j = job(
        &mlp,
        batch,
        Optimizer::adam(0.01),
        ArithProfile::Separate,
        true,
    );
    let bytes = j.schedule.to_bytes();
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let (n_tensors, n_instrs) = (word(24), word(28));
    let first = HEADER_BYTES + TENSOR_RECORD_BYTES * n_tensors;
    let at: Vec<usize> = (0..n_instrs)
        .map(|i| first + INSTR_RECORD_BYTES * i)
        .filter(|&r| bytes[r] == Opcode::MatMulTn.to_u8() || bytes[r] == Opcode::MatMulNt.to_u8())
        .collect();
    assert!(!at.is_empty());
    (bytes, at)
}

fn fix_crc(b: &mut [u8]) {
    use tapeplan_core::format::{plan_crc, CRC_OFFSET};
    let c = plan_crc(b).unwrap();
    b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&c.to_le_bytes());
}

fn field(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn set_field(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn hostile_transposed_product_operands_are_refused() {
    let (bytes, at) = folded_plan(&[5, 4, 3], 2);
    Plan::parse(&bytes).unwrap();
    for &r in &at {
        let name = if bytes[r] == Opcode::MatMulTn.to_u8() {
            "matmul_tn"
        } else {
            "matmul_nt"
        };
        // Operands swapped: the shape rule refuses them, naming the opcode.
        let (a, b) = (field(&bytes, r + 8), field(&bytes, r + 12));
        let mut m = bytes.clone();
        set_field(&mut m, r + 8, b);
        set_field(&mut m, r + 12, a);
        fix_crc(&mut m);
        let e = Plan::parse(&m).expect_err("swapped operands were accepted");
        assert!(e.to_string().contains(name), "{e}");
        // The output as an operand (a product read while it is written): refused.
        let out = field(&bytes, r + 4);
        for k in [0usize, 1] {
            let mut m = bytes.clone();
            set_field(&mut m, r + 8 + 4 * k, out);
            fix_crc(&mut m);
            assert!(Plan::parse(&m).is_err(), "the output as operand {k}");
        }
        // Each argument slot's index past the tensors.
        for k in 0..2 {
            let mut m = bytes.clone();
            set_field(&mut m, r + 8 + 4 * k, u32::MAX);
            fix_crc(&mut m);
            assert!(Plan::parse(&m).is_err(), "argument {k} past the tensors");
        }
    }
}

#[test]
fn a_selective_build_without_the_transposed_products_refuses_a_folded_plan() {
    op_set!(struct Unfolded = [Fill, Add, Sub, Mul, Div, Neg, Exp, Log, Tanh, Sqrt, Detach,
        MatMul, Transpose, Reshape, Broadcast, SumTo, MaxTo, OneHot]);
    op_set!(struct Folded = [Fill, Add, Sub, Mul, Div, Neg, Exp, Log, Tanh, Sqrt, Detach,
        MatMul, Transpose, Reshape, Broadcast, SumTo, MaxTo, OneHot, MatMulTn, MatMulNt]);
    let (bytes, _) = folded_plan(&[5, 4, 3], 2);
    let plan = Plan::parse(&bytes).unwrap();
    let used = plan.op_set();
    assert!(used.contains(Opcode::MatMulTn) && used.contains(Opcode::MatMulNt));
    let mut scratch = Scratch::<256>::new();
    let e = Plan::parse_selective::<Unfolded, 256>(&bytes, &Limits::DEFAULT, &mut scratch)
        .expect_err("the transposed products are outside the op set");
    assert!(e.to_string().contains("matmul_"), "{e}");
    let mut scratch = Scratch::<256>::new();
    assert!(Plan::parse_selective::<Folded, 256>(&bytes, &Limits::DEFAULT, &mut scratch).is_ok());
}
