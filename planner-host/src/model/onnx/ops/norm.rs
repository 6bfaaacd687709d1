//! Normalizations: `BatchNormalization` (inference and training mode) and `LayerNormalization`.

use tapeplan_core::{Attr, Opcode, Recordable, RunningStats};

use crate::model::onnx::translate::{dims_of, NodeCx, FLOAT};

use crate::model::onnx::OnnxError;

pub(super) fn batch_normalization(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    if cx.attr_int("spatial", 1) != 1 {
        return Err(cx.unsupported("spatial=0", "spatial=1 (statistics per channel)"));
    }
    let x = cx.data(0)?;
    let (scale, bias) = (cx.data(1)?, cx.data(2)?);
    let (mean, var) = (cx.data(3)?, cx.data(4)?);
    cx.mark_buffer(mean);
    cx.mark_buffer(var);
    let eps = cx.attr_float("epsilon", 1e-5);
    let momentum = cx.attr_float("momentum", 0.9);
    let training = cx.attr_int("training_mode", 0) != 0;
    // A frozen block of a fine-tuned backbone normalizes as in inference
    // (`TranslateOptions::eval_frozen_batch_norm`).
    let frozen_in_eval =
        !training && cx.input_trained(1) == Some(false) && cx.input_trained(2) == Some(false);
    if !training && cx.training() && !frozen_in_eval {
        // An inference graph recorded for training (PyTorch's `module.train()`): the batch's
        // statistics, and the running ones' new values as buffer updates (ONNX's convention).
        if cx.num_outputs() > 1 {
            return Err(cx.unsupported(
                "the training outputs of opset < 14 (saved mean and variance)",
                "output Y in inference, Y and the running statistics with training_mode=1",
            ));
        }
        let stats = RunningStats::Onnx { momentum };
        let out = cx.record(|t| {
            t.batch_norm_train(&x, Some(&scale), Some(&bias), &mean, &var, stats, eps)
        })?;
        cx.buffer_update(mean, out.running_mean);
        cx.buffer_update(var, out.running_var);
        return cx.set_output(0, out.y, FLOAT);
    }
    if !training {
        if cx.num_outputs() > 1 {
            return Err(cx.unsupported(
                "the training outputs of opset < 14 (saved mean and variance)",
                "output Y in inference, Y and the running statistics with training_mode=1",
            ));
        }
        let y =
            cx.record(|t| t.batch_norm_eval(&x, Some(&scale), Some(&bias), &mean, &var, eps))?;
        return cx.set_output(0, y, FLOAT);
    }
    if cx.opset() < 14 {
        return Err(cx.unsupported(
            "training_mode before opset 14",
            "training_mode=1 from opset 14 (ONNX's running statistics)",
        ));
    }
    let stats = RunningStats::Onnx { momentum };
    let out =
        cx.record(|t| t.batch_norm_train(&x, Some(&scale), Some(&bias), &mean, &var, stats, eps))?;
    cx.set_output(0, out.y, FLOAT)?;
    if cx.has_output(1) {
        cx.set_output(1, out.running_mean, FLOAT)?;
    }
    if cx.has_output(2) {
        cx.set_output(2, out.running_var, FLOAT)?;
    }
    Ok(())
}

/// ONNX's `LayerNormalization` (its reference's order): over the axes from `axis` on,
/// `μ = sum(x) / n`, `d = x − μ`, `σ² = sum(d · d) / n`, `r = 1 / sqrt(σ² + ε)`,
/// `Y = (d · r) · Scale + B`; outputs `Mean = μ` and `InvStdDev = r` (extent 1 on the
/// normalized axes).
pub(super) fn layer_normalization(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    if cx.attr_int("stash_type", 1) != 1 {
        return Err(cx.unsupported(
            format!("stash_type {}", cx.attr_int("stash_type", 1)),
            "stash_type 1 (statistics in FLOAT)",
        ));
    }
    let x = cx.data(0)?;
    let s = cx.shape(x)?;
    let dims = dims_of(s);
    let axis = cx.axis(cx.attr_int("axis", -1), dims.len())?;
    let stat_dims: Vec<usize> = (0..dims.len())
        .map(|a| if a < axis { dims[a] } else { 1 })
        .collect();
    let stat = cx.shape_from(&stat_dims)?;
    let eps = cx.attr_float("epsilon", 1e-5);
    let scale = cx.data(1)?;
    let bias = if cx.has_input(2) {
        Some(cx.data(2)?)
    } else {
        None
    };
    let [mean, d, _, var] = cx.record(|t| t.moments(&x, stat))?;
    let inv = cx.record(|t| {
        let e = t.fill(eps, stat)?;
        let shifted = t.add(&var, &e)?;
        let root = t.sqrt(&shifted)?;
        let one = t.fill(1.0, stat)?;
        t.div(&one, &root)
    })?;
    let inv_b = cx.broadcast(inv, s)?;
    let mut y = cx.push(Opcode::Mul, Attr::NONE, &[d, inv_b])?;
    y = cx.elementwise(Opcode::Mul, &[y, scale])?;
    if let Some(b) = bias {
        y = cx.elementwise(Opcode::Add, &[y, b])?;
    }
    if cx.shape(y)? != s {
        return Err(cx.invalid("Scale or B broadcasts past the input's shape"));
    }
    cx.set_output(0, y, FLOAT)?;
    if cx.has_output(1) {
        cx.set_output(1, mean, FLOAT)?;
    }
    if cx.has_output(2) {
        cx.set_output(2, inv, FLOAT)?;
    }
    Ok(())
}
