//! The SGD update fused with its weight gradient (`sgd_matmul`, `PlanOptions::fuse_sgd`) keeps
//! the bits: fused and unfused plans train to identical losses and parameters, step after step,
//! under both arithmetic profiles, through the record-reading and the decoded runtime paths, and
//! both equal the oracle; for weights `[in, out]` (the `--layers` MLP) and `[out, in]`
//! (`nn::Linear`). The fused arena is smaller; guarded plans are not fused. Hostile operands of
//! the instruction (a weight that is also a product operand, swapped operands, an op set without
//! the opcode) are refused by validation.

use tapeplan_core::format::{HEADER_BYTES, INSTR_RECORD_BYTES, TENSOR_RECORD_BYTES};
use tapeplan_core::{op_set, ArithProfile, Opcode, Ops};
use tapeplan_planner::model::nn::{Linear, ReLU, Sequential, Tanh};
use tapeplan_planner::model::optim::Optimizer;
use tapeplan_planner::model::{Activation, JobOptions, Loss, Mlp, Model, TrainingJob};
use tapeplan_planner::{PlanOptions, Schedule};
use tapeplan_runtime::{Limits, Plan, Scratch};

/// The `sgd_matmul` instructions of a plan's `train_step`.
fn fused_updates(s: &Schedule) -> usize {
    s.entries
        .iter()
        .filter(|e| e.name == "train_step")
        .flat_map(|e| &e.instrs)
        .filter(|i| i.op == Opcode::SgdMatMul)
        .count()
}

fn job(
    model: &dyn Model,
    batch: usize,
    lr: f32,
    guarded: bool,
    arith: ArithProfile,
    fuse_sgd: bool,
) -> TrainingJob {
    TrainingJob::for_model(model)
        .loss(Loss::SoftmaxCrossEntropy)
        .optimizer(Optimizer::sgd(lr))
        .batch(batch)
        .options(JobOptions {
            guarded,
            planning: PlanOptions {
                arith,
                fuse_sgd,
                ..PlanOptions::default()
            },
            ..JobOptions::default()
        })
        .build()
        .unwrap()
}

/// Trains `model` with the fused and the unfused plan (and the oracle) for `steps` steps;
/// answers the two plans' `train_step` arenas in bytes. The fused plan must hold
/// `expect_fused` `sgd_matmul` instructions.
fn train_both(
    model: &dyn Model,
    (d_in, classes): (usize, usize),
    batch: usize,
    arith: ArithProfile,
    expect_fused: usize,
) -> (usize, usize) {
    let lr = 0.3;
    let (fused, plain) = (
        job(model, batch, lr, false, arith, true),
        job(model, batch, lr, false, arith, false),
    );
    assert_eq!(fused_updates(&fused.schedule), expect_fused, "{arith:?}");
    assert_eq!(fused_updates(&plain.schedule), 0);
    tapeplan_tests::alike::train_alike(
        &fused,
        &plain,
        (d_in, classes),
        batch,
        (6, 17),
        &format!("{arith:?}"),
    );
    (
        train_step_bytes(&fused.schedule),
        train_step_bytes(&plain.schedule),
    )
}

/// The `train_step` entry's bytes.
fn train_step_bytes(s: &Schedule) -> usize {
    s.entries
        .iter()
        .find(|e| e.name == "train_step")
        .map(|e| e.report.entry_bytes)
        .unwrap()
}

#[test]
fn fused_and_unfused_sgd_plans_train_to_the_same_bits() {
    let mlp = Mlp {
        sizes: vec![12, 9, 5],
        activation: Activation::Tanh,
    };
    let deep = Mlp {
        sizes: vec![16, 24, 20, 3],
        activation: Activation::Relu,
    };
    // `nn::Linear` keeps its weight `[out, in]`: the gradient is a transposed product.
    let linear = Sequential::new(&[12])
        .push(Linear::new(12, 24))
        .push(Tanh)
        .push(Linear::new(24, 24))
        .push(ReLU)
        .push(Linear::new(24, 4))
        .seed(3);
    for arith in [ArithProfile::Separate, ArithProfile::Fma] {
        for (model, dims, batch, weights) in [
            (&mlp as &dyn Model, (12, 5), 7, 2),
            (&deep, (16, 3), 4, 3),
            (&linear, (12, 4), 3, 3),
        ] {
            let (fused, plain) = train_both(model, dims, batch, arith, weights);
            assert!(
                fused < plain,
                "{arith:?}: the fused train_step ({fused} B) is smaller than the unfused ({plain} B)"
            );
        }
    }
}

#[test]
fn guarded_sgd_plans_are_not_fused() {
    let mlp = Mlp {
        sizes: vec![12, 9, 5],
        activation: Activation::Tanh,
    };
    let guarded = job(&mlp, 7, 0.1, true, ArithProfile::Separate, true);
    assert_eq!(fused_updates(&guarded.schedule), 0);
    let off = job(&mlp, 7, 0.1, true, ArithProfile::Separate, false);
    assert_eq!(guarded.schedule.to_bytes(), off.schedule.to_bytes());
}

/// A small fused plan and the record offsets of its `sgd_matmul` instructions.
fn fused_plan(sizes: &[usize], batch: usize) -> (Vec<u8>, Vec<usize>) {
    let mlp = Mlp {
        sizes: sizes.to_vec(),
        activation: Activation::Tanh,
    };
    let j = job(&mlp, batch, 0.1, false, ArithProfile::Separate, true);
    let bytes = j.schedule.to_bytes();
    let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    let (n_tensors, n_instrs) = (word(24), word(28));
    let first = HEADER_BYTES + TENSOR_RECORD_BYTES * n_tensors;
    let at: Vec<usize> = (0..n_instrs)
        .map(|i| first + INSTR_RECORD_BYTES * i)
        .filter(|&r| bytes[r] == Opcode::SgdMatMul.to_u8())
        .collect();
    assert_eq!(at.len(), 2, "both weights fused");
    (bytes, at)
}

fn fix_crc(b: &mut [u8]) {
    use tapeplan_core::format::{plan_crc, CRC_OFFSET};
    let c = plan_crc(b).unwrap();
    b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&c.to_le_bytes());
}

fn arg(b: &[u8], r: usize, k: usize) -> u32 {
    u32::from_le_bytes(b[r + 8 + 4 * k..r + 12 + 4 * k].try_into().unwrap())
}

fn set_arg(b: &mut [u8], r: usize, k: usize, v: u32) {
    b[r + 8 + 4 * k..r + 12 + 4 * k].copy_from_slice(&v.to_le_bytes());
}

#[test]
fn a_weight_that_is_also_a_product_operand_is_refused() {
    // Square everything (`[4, 4]` weights, batch 4), so the shape rule passes and only the
    // aliasing rule stands between the plan and a product read while it is overwritten.
    let (bytes, at) = fused_plan(&[4, 4, 4], 4);
    Plan::parse(&bytes).unwrap();
    for &r in &at {
        let w = arg(&bytes, r, 0);
        for k in [1usize, 2] {
            let mut m = bytes.clone();
            set_arg(&mut m, r, k, w);
            fix_crc(&mut m);
            let e = Plan::parse(&m).expect_err("the weight aliases a product operand");
            assert!(e.to_string().contains("overlap"), "{e}");
        }
        // Another tensor over the weight's range, named as an operand: the same refusal (the
        // arena ranges meet though the indices differ). The product operands keep their
        // shapes; the first one's record is moved onto the weight's offset.
        let a = arg(&bytes, r, 1) as usize;
        let w_rec = HEADER_BYTES + TENSOR_RECORD_BYTES * w as usize;
        let a_rec = HEADER_BYTES + TENSOR_RECORD_BYTES * a;
        let mut m = bytes.clone();
        let (w_off, w_kind) = (m[w_rec..w_rec + 4].to_vec(), m[w_rec + 5]);
        m[a_rec..a_rec + 4].copy_from_slice(&w_off);
        m[a_rec + 5] = w_kind;
        fix_crc(&mut m);
        assert!(
            Plan::parse(&m).is_err(),
            "an operand over the weight was accepted"
        );
    }
}

#[test]
fn hostile_sgd_matmul_operands_are_refused() {
    let (bytes, at) = fused_plan(&[5, 4, 3], 2);
    Plan::parse(&bytes).unwrap();
    for &r in &at {
        let w = arg(&bytes, r, 0);
        // The weight as a product operand: refused (here by the shape rule already).
        for k in [1usize, 2] {
            let mut m = bytes.clone();
            set_arg(&mut m, r, k, w);
            fix_crc(&mut m);
            assert!(Plan::parse(&m).is_err(), "the weight as operand {k}");
        }
        // The product operands swapped: the shape rule refuses them.
        let mut m = bytes.clone();
        let (a, b) = (arg(&bytes, r, 1), arg(&bytes, r, 2));
        set_arg(&mut m, r, 1, b);
        set_arg(&mut m, r, 2, a);
        fix_crc(&mut m);
        let e = Plan::parse(&m).expect_err("swapped operands were accepted");
        assert!(e.to_string().contains("sgd_matmul"), "{e}");
        // Each argument slot's index past the tensors.
        for k in 0..3 {
            let mut m = bytes.clone();
            set_arg(&mut m, r, k, u32::MAX);
            fix_crc(&mut m);
            assert!(Plan::parse(&m).is_err(), "argument {k} past the tensors");
        }
    }
}

#[test]
fn a_selective_build_without_sgd_matmul_refuses_a_fused_plan() {
    // (`matmul_nt`: the folded transpose of the input gradient `ḡ · wᵀ`.)
    op_set!(struct Unfused = [Fill, Add, Sub, Mul, Div, Neg, Exp, Log, Tanh, Detach, MatMul,
        Transpose, Reshape, Broadcast, SumTo, MaxTo, OneHot, MatMulTn, MatMulNt]);
    op_set!(struct Fused = [Fill, Add, Sub, Mul, Div, Neg, Exp, Log, Tanh, Detach, MatMul,
        Transpose, Reshape, Broadcast, SumTo, MaxTo, OneHot, SgdMatMul, MatMulTn, MatMulNt]);
    let (bytes, _) = fused_plan(&[5, 4, 3], 2);
    let plan = Plan::parse(&bytes).unwrap();
    let used = plan.op_set();
    assert!(used.contains(Opcode::SgdMatMul));
    // Everything else the plan uses is in `Unfused`: `sgd_matmul` alone is missing.
    assert!(used
        .iter()
        .all(|op| op == Opcode::SgdMatMul || Unfused::SET.contains(op)));
    let mut scratch = Scratch::<256>::new();
    let e = Plan::parse_selective::<Unfused, 256>(&bytes, &Limits::DEFAULT, &mut scratch)
        .expect_err("sgd_matmul is outside the op set");
    assert!(e.to_string().contains("sgd_matmul"), "{e}");
    let mut scratch = Scratch::<256>::new();
    assert!(Plan::parse_selective::<Fused, 256>(&bytes, &Limits::DEFAULT, &mut scratch).is_ok());
}
