//! The operator table: one row per ONNX operator (its translation, the attributes it reads,
//! what is not supported and why, the conformance tolerance against ONNX's expected outputs).
//! Adding an operator is adding a row (and, for a new instruction, the function the row names).
//! `docs/onnx.md` lists the same rows.

use tapeplan_core::{Attr, ConvAttr, NodeId, Opcode, PoolWindow, Recordable, RunningStats, Shape};

use super::tensor::{Elements, TensorData};
use super::translate::{broadcast_shapes, dims_of, NodeCx, BOOL, FLOAT, INT32, INT64};
use super::OnnxError;

/// How a row translates its node.
#[derive(Clone, Copy)]
pub enum Translate {
    /// One elementwise instruction over the single `FLOAT` input.
    Unary(Opcode),
    /// One elementwise instruction over two `FLOAT` inputs after multidirectional broadcasting.
    Binary(Opcode),
    /// A function of its own.
    Custom(fn(&mut NodeCx<'_>) -> Result<(), OnnxError>),
}

/// The conformance tolerance of an operator against ONNX's expected outputs (computed by numpy):
/// an element passes when `|got - expected| <= atol + rtol * |expected|` (NumPy's
/// `assert_allclose`), NaN matching NaN and infinities matching exactly.
#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    /// Relative tolerance.
    pub rtol: f32,
    /// Absolute tolerance.
    pub atol: f32,
    /// Why this tolerance (the arithmetic that differs from numpy's).
    pub why: &'static str,
}

/// Exact: a copy, a comparison, a selection, or one correctly rounded IEEE operation per element
/// (`+ - * /`, `sqrt`), which numpy computes alike.
pub const EXACT: Tolerance = Tolerance {
    rtol: 0.0,
    atol: 0.0,
    why: "exact: copies, comparisons and one correctly rounded IEEE operation per element, as numpy's",
};

/// One libm function per element against numpy's (both within a few ulp of the true value).
pub const LIBM: Tolerance = Tolerance {
    rtol: 1e-6,
    atol: 0.0,
    why: "libm's f32 function against numpy's: each within a few ulp of the true value (an ulp is at most 2^-23 ≈ 1.2e-7 relative), so 1e-6 is about 8 ulp",
};

/// Sums: the same terms added in another order (numpy's pairwise sums and BLAS blocking against
/// the reference kernels' sequential order).
pub const SUMS: Tolerance = Tolerance {
    rtol: 2e-6,
    atol: 1e-6,
    why: "sums in another order (numpy's pairwise summation, BLAS blocking): the difference is a few ulp of the terms' magnitude, not of the result's, so a result that cancels to near zero needs an absolute part (1e-6: the tests' terms are of order 1, k ≤ 10^2 of them)",
};

/// Softmax and log-softmax: a sum in another order and an `exp`/`log` per element.
pub const SOFTMAX: Tolerance = Tolerance {
    rtol: 2e-6,
    atol: 1e-7,
    why: "libm's exp/log against numpy's and a sum in another order",
};

/// GELU: `1 + erf(…)` or `1 + tanh(…)` cancels for negative `x`, where numpy's reference computes
/// in float64 and the composition (PyTorch's order) in f32.
pub const GELU: Tolerance = Tolerance {
    rtol: 1e-6,
    atol: 4e-7,
    why: "libm's erf/tanh against numpy's (float64 in ONNX's reference), and for negative x the sum 1 + erf(…) or 1 + tanh(…) cancels: the f32 error of a few 2^-24 in erf/tanh near −1 is multiplied by x/2, an absolute error up to about |x| · 1e-7 (the tests' |x| is below 4) however small the result",
};

/// Products in another order.
pub const PRODS: Tolerance = Tolerance {
    rtol: 2e-6,
    atol: 0.0,
    why: "the same factors multiplied in another order (numpy's pairwise reduction): each rounding is relative, half an ulp per factor, so at most n · 2^-24 relative for n factors (the tests' n ≤ 12, about 7e-7)",
};

/// Normalizations: means and variances summed in another order, then a division by the
/// standard deviation.
pub const NORM: Tolerance = Tolerance {
    rtol: 1e-5,
    atol: 1e-6,
    why: "means and variances summed in another order (numpy's pairwise sums) and ONNX's reference multiplying by 1/σ where the composition divides by σ: the mean's error is a few ulp of the inputs' magnitude, and `x − μ` cancels, so an output near zero needs an absolute part; the tests' inputs are of order 1 and their σ near 1",
};

/// One row of the table.
#[derive(Clone, Copy)]
pub struct Operator {
    /// The ONNX operator (`op_type`, default domain).
    pub name: &'static str,
    /// Its translation.
    pub translate: Translate,
    /// The attributes it reads; any other attribute is an error.
    pub attributes: &'static [&'static str],
    /// What is supported and what is not, and why.
    pub notes: &'static str,
    /// The conformance tolerance.
    pub tolerance: Tolerance,
}

macro_rules! row {
    ($name:literal, $t:expr, [$($a:literal),*], $tol:expr, $notes:literal) => {
        Operator { name: $name, translate: $t, attributes: &[$($a),*], notes: $notes, tolerance: $tol }
    };
}

use Translate::{Binary, Custom, Unary};

/// Every operator the translation knows, by name.
pub const OPERATORS: &[Operator] = &[
    row!("ArgMax", Custom(arg_max), ["axis", "keepdims", "select_last_index"], EXACT, "FLOAT, any axis, keepdims both; the lowest index of a tie (`argmax`), or with `select_last_index=1` the highest (`max_to` of the indices where `equal(x, max_to(x))`); INT64 output as `f32` integers."),
    row!("Abs", Unary(Opcode::Abs), [], EXACT, "FLOAT."),
    row!("Add", Binary(Opcode::Add), [], EXACT, "FLOAT, multidirectional broadcasting (`broadcast`)."),
    row!("AveragePool", Custom(average_pool), ["auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"], SUMS, "1-D and 2-D, strides, pads, dilations, `count_include_pad` both (`avg_pool`); `auto_pad` and `ceil_mode` as explicit (end) pads at plan time; `ceil_mode` with `count_include_pad=1` and a window past the end padding is not (the divisor would count it); 3-D is rank 5, outside the vocabulary."),
    row!("BatchNormalization", Custom(batch_normalization), ["epsilon", "momentum", "training_mode", "spatial"], NORM, "Inference (`training_mode=0`): the running statistics known or not (`batch_norm_eval`), or, recorded for training (`TranslateOptions::training`, an `OnnxModel`'s `Mode::Train`), as training mode, the new running statistics as buffer updates; the running statistics are buffers (never trained); training mode: Y and ONNX's running mean and variance (`momentum` weighs the old value, the biased batch variance: `batch_norm_train` with `RunningStats::Onnx`); `spatial=0` (opset < 9) and the saved mean/variance outputs of opset < 14 are not in the vocabulary."),
    row!("ConstantOfShape", Custom(constant_of_shape), ["value"], EXACT, "A shape known at plan time, a FLOAT or integer value (default FLOAT 0): a value known at plan time."),
    row!("Conv", Custom(conv), ["auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"], SUMS, "1-D and 2-D (`[N, C, L]`, `[N, C, H, W]`), strides, pads, dilations, group (depthwise included), optional bias (`conv`); `auto_pad` `SAME_UPPER`, `SAME_LOWER` and `VALID` become explicit pads at plan time (the shapes are known); 3-D is rank 5, outside the vocabulary."),
    row!("Cast", Custom(cast), ["to", "saturate", "round_mode"], EXACT, "To FLOAT from FLOAT or BOOL (the same 0/1 values); integer values known at plan time to any integer type or FLOAT, and FLOAT values known at plan time to FLOAT (folded); other casts are not in the vocabulary."),
    row!("CastLike", Custom(cast_like), ["saturate", "round_mode"], EXACT, "As Cast, to the element type of the second input."),
    row!("Clip", Custom(clip), ["min", "max"], EXACT, "FLOAT; bounds as attributes (opset < 11) or inputs, either absent (`clamp`: `maximum` then `minimum`, so `min > max` gives `max`, as numpy's `clip`); bounds computed at run time as elementwise `maximum`/`minimum`."),
    row!("Concat", Custom(concat), ["axis"], EXACT, "FLOAT inputs, any count (pairwise `concat`)."),
    row!("Constant", Custom(constant), ["value", "value_float", "value_floats", "value_int", "value_ints"], EXACT, "A value known at plan time (a `fill` or a frozen parameter where used as data); sparse and string values are not read."),
    row!("Div", Binary(Opcode::Div), [], EXACT, "FLOAT, broadcasting."),
    row!("Equal", Custom(equal), [], EXACT, "FLOAT or BOOL inputs, BOOL output as a 0/1 mask (`equal`); integer inputs are not in the vocabulary."),
    row!("Erf", Unary(Opcode::Erf), [], LIBM, "FLOAT."),
    row!("Exp", Unary(Opcode::Exp), [], LIBM, "FLOAT (the plan's math profile; conformance uses `precise`, libm)."),
    row!("Flatten", Custom(flatten), ["axis"], EXACT, "Any axis, negative included (`reshape`)."),
    row!("Gelu", Custom(gelu), ["approximate"], GELU, "`approximate` `none` (erf form: `gelu`) and `tanh` (`gelu_tanh`), PyTorch's order of operations."),
    row!("Gemm", Custom(gemm), ["alpha", "beta", "transA", "transB"], SUMS, "`alpha·A'B' + beta·C`, C optional and broadcast (`matmul`, `transpose`, `mul`, `add`)."),
    row!("Gather", Custom(gather), ["axis"], EXACT, "FLOAT data, INT64 or INT32 indices (`gather`, indices as `f32`, negative ones from the end; an index out of range, an error in ONNX, gives zeros); integer data and indices known at plan time are folded (shape arithmetic: torch's flatten)."),
    row!("GlobalAveragePool", Custom(global_average_pool), [], SUMS, "`[N, C, L]` and `[N, C, H, W]` (`global_avg_pool`: `sum_to`, one division)."),
    row!("Greater", Custom(greater), [], EXACT, "FLOAT inputs, BOOL output as a 0/1 mask (`greater`)."),
    row!("GreaterOrEqual", Custom(greater_or_equal), [], EXACT, "FLOAT inputs, BOOL output as a mask (`greater_equal`)."),
    row!("HardSigmoid", Custom(hard_sigmoid), ["alpha", "beta"], EXACT, "`max(0, min(1, alpha·x + beta))` (`hardsigmoid`)."),
    row!("HardSwish", Custom(hard_swish), [], EXACT, "`x · max(0, min(1, x/6 + 1/2))` (`hardswish`)."),
    row!("Identity", Custom(identity), [], EXACT, "Any tensor (the same value)."),
    row!("LayerNormalization", Custom(layer_normalization), ["axis", "epsilon", "stash_type"], NORM, "Any axis, Scale and B broadcast to the normalized axes, the optional Mean and InvStdDev outputs; ONNX's formula `(x − μ) · (1/sqrt(σ² + ε))` (`sum_to`, `sub`, `mul`, `sqrt`, `div`); `stash_type` other than 1 (FLOAT) is not in the vocabulary."),
    row!("LeakyRelu", Custom(leaky_relu), ["alpha"], EXACT, "`x` where `x > 0`, else `alpha·x` (`leaky_relu`)."),
    row!("Less", Custom(less), [], EXACT, "FLOAT inputs, BOOL output as a mask (`greater` with the arguments swapped)."),
    row!("LessOrEqual", Custom(less_or_equal), [], EXACT, "FLOAT inputs, BOOL output as a mask (`greater_equal`, swapped)."),
    row!("Log", Unary(Opcode::Log), [], LIBM, "FLOAT."),
    row!("LogSoftmax", Custom(log_softmax), ["axis"], SOFTMAX, "Any axis; opset < 13's flattening semantics too (`max_to`, `sub`, `exp`, `sum_to`, `log`)."),
    row!("MatMul", Custom(matmul), [], SUMS, "Ranks 1 to 4, numpy's batch broadcasting (`broadcast`, then one batched `matmul` over `[b, m, k]`, `reshape`)."),
    row!("Max", Custom(max), [], EXACT, "FLOAT, any count, broadcasting (`maximum`)."),
    row!("MaxPool", Custom(max_pool), ["auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"], EXACT, "1-D and 2-D, strides, pads, dilations (`max_pool`, padding as −inf); `auto_pad` and `ceil_mode` as explicit (end) pads at plan time; the Indices output (flat indices, row-major or with `storage_order=1` column-major) as `max_pool_gather` of a table of indices, INT64 as `f32` integers; 3-D is rank 5, outside the vocabulary."),
    row!("Min", Custom(min), [], EXACT, "FLOAT, any count, broadcasting (`minimum`)."),
    row!("Mul", Binary(Opcode::Mul), [], EXACT, "FLOAT, broadcasting."),
    row!("Neg", Unary(Opcode::Neg), [], EXACT, "FLOAT."),
    row!("Pad", Custom(pad), ["mode", "pads", "value"], EXACT, "mode `constant`, pads and value known at plan time (negative pads slice; a non-zero value through `select` over a padded mask), `axes` input (`pad`, `slice`); modes `reflect`, `edge` and `wrap` are not in the vocabulary."),
    row!("Pow", Custom(pow), [], LIBM, "FLOAT base, an exponent known at plan time whose elements are all equal (`pow`'s attribute); a tensor of different exponents is not in the vocabulary."),
    row!("ReduceMax", Custom(reduce_max), ["axes", "keepdims", "noop_with_empty_axes"], EXACT, "FLOAT, axes as attribute or input (known at plan time), keepdims both (`max_to`)."),
    row!("ReduceMean", Custom(reduce_mean), ["axes", "keepdims", "noop_with_empty_axes"], SUMS, "FLOAT, axes as attribute or input, keepdims both (`sum_to`, `div`)."),
    row!("ReduceProd", Custom(reduce_prod), ["axes", "keepdims", "noop_with_empty_axes"], PRODS, "FLOAT, axes as attribute or input, keepdims both (`prod_to`)."),
    row!("ReduceSum", Custom(reduce_sum), ["axes", "keepdims", "noop_with_empty_axes"], SUMS, "FLOAT, axes as attribute or input, keepdims both (`sum_to`)."),
    row!("Reciprocal", Custom(reciprocal), [], EXACT, "FLOAT (`1 / x`, one correctly rounded division: `fill`, `div`)."),
    row!("Relu", Unary(Opcode::Relu), [], EXACT, "FLOAT."),
    row!("Reshape", Custom(reshape), ["allowzero"], EXACT, "A shape known at plan time, `0` (copy) and `-1` (inferred); `allowzero=1` with a zero is a zero extent, not planned."),
    row!("Shape", Custom(shape), ["start", "end"], EXACT, "A value known at plan time (INT64)."),
    row!("Sigmoid", Unary(Opcode::Sigmoid), [], LIBM, "FLOAT."),
    row!("Sign", Unary(Opcode::Sign), [], EXACT, "FLOAT."),
    row!("Size", Custom(size), [], EXACT, "A value known at plan time (INT64, the element count)."),
    row!("Slice", Custom(slice), ["starts", "ends", "axes"], EXACT, "starts/ends/axes known at plan time, steps 1 (`slice` per axis); other steps are not in the vocabulary."),
    row!("Softmax", Custom(softmax), ["axis"], SOFTMAX, "Any axis; opset < 13's flattening semantics too (`max_to`, `sub`, `exp`, `sum_to`, `div`)."),
    row!("Softplus", Unary(Opcode::Softplus), [], LIBM, "FLOAT (`log(1 + e^x)`, `x` above 20: PyTorch's threshold, the same value in f32)."),
    row!("Sqrt", Unary(Opcode::Sqrt), [], EXACT, "FLOAT (correctly rounded, as numpy's)."),
    row!("Squeeze", Custom(squeeze), ["axes"], EXACT, "axes as attribute or input (known at plan time), or every extent-1 axis (`reshape`)."),
    row!("Sub", Binary(Opcode::Sub), [], EXACT, "FLOAT, broadcasting."),
    row!("Sum", Custom(sum), [], EXACT, "FLOAT, any count, broadcasting (`add`, left to right as numpy)."),
    row!("Tanh", Unary(Opcode::Tanh), [], LIBM, "FLOAT."),
    row!("Transpose", Custom(transpose), ["perm"], EXACT, "Any permutation: leaving out extent-1 axes, a swap of two blocks of axes is one `transpose` between `reshape`s (every rank-2 transpose; rank 3 `(2,0,1)`); another is sliced along the axis that becomes first, each slice permuted, and concatenated (`slice`, `concat`), at most 64 slices: a composition of copies, exact, but not fast (no general permutation instruction yet)."),
    row!("Unsqueeze", Custom(unsqueeze), ["axes"], EXACT, "axes as attribute or input (known at plan time) (`reshape`)."),
    row!("Where", Custom(where_), [], EXACT, "BOOL (or FLOAT) condition, FLOAT values, broadcasting (`select`)."),
];

/// The row of an operator of the default domain.
pub fn operator(name: &str) -> Option<&'static Operator> {
    OPERATORS.iter().find(|o| o.name == name)
}

/// The names of every supported operator, comma-separated (for error messages).
pub fn supported_list() -> String {
    OPERATORS
        .iter()
        .map(|o| o.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Translates one node through its row.
///
/// # Errors
/// [`OnnxError::Unsupported`] for an operator or attribute outside the table, and the row's
/// errors.
pub(super) fn translate_node(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let domain = cx.node().domain().to_owned();
    if !matches!(domain.as_str(), "" | "ai.onnx") {
        return Err(cx.unsupported(
            format!("operator domain {domain:?}"),
            "the default ONNX domain",
        ));
    }
    let row = operator(cx.op()).ok_or_else(|| {
        cx.unsupported(
            "an operator outside the vocabulary",
            format!("operators {}", supported_list()),
        )
    })?;
    if let Some(bad) = cx.attribute_names().find(|a| !row.attributes.contains(a)) {
        let bad = bad.to_owned();
        let supported = if row.attributes.is_empty() {
            "no attributes".to_owned()
        } else {
            format!("attributes {}", row.attributes.join(", "))
        };
        return Err(cx.unsupported(format!("attribute {bad:?}"), supported));
    }
    match row.translate {
        Unary(op) => {
            let x = cx.data(0)?;
            let y = cx.push(op, Attr::NONE, &[x])?;
            cx.set_output(0, y, FLOAT)
        }
        Binary(op) => {
            let (a, b) = (cx.data(0)?, cx.data(1)?);
            let y = cx.elementwise(op, &[a, b])?;
            cx.set_output(0, y, FLOAT)
        }
        Custom(f) => f(cx),
    }
}

fn identity(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    cx.alias_output(0, 0)
}

fn constant(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let data = if let Some(t) = cx.attr_tensor("value")? {
        t
    } else if cx.attribute_names().any(|a| a == "value_float") {
        TensorData::f32(vec![], vec![cx.attr_float("value_float", 0.0)])
    } else if let Some(v) = cx
        .node()
        .attribute
        .iter()
        .find(|a| a.name() == "value_floats")
    {
        TensorData::f32(vec![v.floats.len()], v.floats.clone())
    } else if cx.attribute_names().any(|a| a == "value_int") {
        TensorData::i64(vec![], vec![cx.attr_int("value_int", 0)])
    } else if let Some(v) = cx.attr_ints("value_ints") {
        TensorData::i64(vec![v.len()], v)
    } else {
        return Err(cx.unsupported(
            "a Constant without a tensor, float or int value",
            "value, value_float(s), value_int(s)",
        ));
    };
    cx.set_known_output(0, data)
}

fn shape(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let dims: Vec<i64> = match cx.known(0) {
        Some(t) => t.dims.iter().map(|&d| d as i64).collect(),
        None => {
            let x = cx.data_of_types(0, &[FLOAT, BOOL])?;
            dims_of(cx.shape(x)?).iter().map(|&d| d as i64).collect()
        }
    };
    let r = dims.len() as i64;
    let clamp = |v: i64| (if v < 0 { v.saturating_add(r) } else { v }).clamp(0, r) as usize;
    let start = clamp(cx.attr_int("start", 0));
    let end = clamp(cx.attr_int("end", r));
    let part = dims.get(start..end.max(start)).unwrap_or(&[]).to_vec();
    cx.set_known_output(0, TensorData::i64(vec![part.len()], part))
}

fn compare(cx: &mut NodeCx<'_>, op: Opcode, swap: bool, types: &[i32]) -> Result<(), OnnxError> {
    let (a, b) = (cx.data_of_types(0, types)?, cx.data_of_types(1, types)?);
    let (a, b) = if swap { (b, a) } else { (a, b) };
    let y = cx.elementwise(op, &[a, b])?;
    cx.set_output(0, y, BOOL)
}

fn equal(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    compare(cx, Opcode::Equal, false, &[FLOAT, BOOL])
}

fn greater(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    compare(cx, Opcode::Greater, false, &[FLOAT])
}

fn greater_or_equal(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    compare(cx, Opcode::GreaterEqual, false, &[FLOAT])
}

fn less(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    compare(cx, Opcode::Greater, true, &[FLOAT])
}

fn less_or_equal(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    compare(cx, Opcode::GreaterEqual, true, &[FLOAT])
}

fn where_(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let c = cx.data_of_types(0, &[BOOL, FLOAT])?;
    let (x, y) = (cx.data(1)?, cx.data(2)?);
    let out = cx.elementwise(Opcode::Select, &[c, x, y])?;
    cx.set_output(0, out, FLOAT)
}

/// Folds a variadic operator left to right over its inputs.
fn variadic(cx: &mut NodeCx<'_>, op: Opcode) -> Result<(), OnnxError> {
    let n = cx.num_inputs();
    if n == 0 {
        return Err(cx.invalid("no inputs"));
    }
    let mut acc = cx.data(0)?;
    for i in 1..n {
        let x = cx.data(i)?;
        acc = cx.elementwise(op, &[acc, x])?;
    }
    if n == 1 {
        // One input: the value itself, copied so that the output is a node of its own.
        let s = cx.shape(acc)?;
        acc = cx.push(Opcode::Reshape, Attr::target(s), &[acc])?;
    }
    cx.set_output(0, acc, FLOAT)
}

fn max(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    variadic(cx, Opcode::Maximum)
}

fn min(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    variadic(cx, Opcode::Minimum)
}

fn sum(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    variadic(cx, Opcode::Add)
}

fn pow(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let p = cx.const_floats(1, "the exponent")?;
    let Some(&p0) = p.first() else {
        return Err(cx.invalid("an empty exponent"));
    };
    if p.iter().any(|v| v.to_bits() != p0.to_bits()) {
        return Err(cx.unsupported(
            "an exponent tensor whose elements differ",
            "one exponent known at plan time (all elements equal)",
        ));
    }
    let exp_dims = cx.known(1).map(|t| t.dims.clone()).unwrap_or_default();
    let xs = cx.shape(x)?;
    let es = cx.shape_from(&exp_dims)?;
    let out_shape = super::translate::broadcast_shapes(xs, es)
        .ok_or_else(|| cx.invalid(format!("shapes {xs} and {es} do not broadcast")))?;
    let xb = cx.broadcast(x, out_shape)?;
    let y = cx.push(Opcode::Pow, Attr::Pow(p0), &[xb])?;
    cx.set_output(0, y, FLOAT)
}

fn matmul(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let (a, b) = (cx.data(0)?, cx.data(1)?);
    let (sa, sb) = (cx.shape(a)?, cx.shape(b)?);
    if sa.rank() == 0 || sb.rank() == 0 {
        return Err(cx.invalid(format!("operands of shapes {sa} and {sb}")));
    }
    // numpy's matmul: a vector is a matrix of one row (`a`) or one column (`b`), that extent
    // dropped from the result; the batch axes (all but the last two) broadcast.
    let (da, db) = (dims_of(sa), dims_of(sb));
    let ma: Vec<usize> = if da.len() == 1 {
        vec![1, da[0]]
    } else {
        da.clone()
    };
    let mb: Vec<usize> = if db.len() == 1 {
        vec![db[0], 1]
    } else {
        db.clone()
    };
    let (ba, bb) = (&ma[..ma.len() - 2], &mb[..mb.len() - 2]);
    let batch = broadcast_shapes(cx.shape_from(ba)?, cx.shape_from(bb)?)
        .map(dims_of)
        .ok_or_else(|| cx.invalid(format!("batch axes of {sa} and {sb} do not broadcast")))?;
    let nb: usize = batch.iter().product();
    let (m, k, n) = (ma[ma.len() - 2], ma[ma.len() - 1], mb[mb.len() - 1]);
    let operand = |cx: &mut NodeCx<'_>, x: NodeId, mat: &[usize], rows: usize, cols: usize| {
        let full: Vec<usize> = batch.iter().copied().chain([rows, cols]).collect();
        let x = cx.reshape(x, cx.shape_from(mat)?)?;
        let x = cx.broadcast(x, cx.shape_from(&full)?)?;
        let flat: Vec<usize> = if nb == 1 {
            vec![rows, cols]
        } else {
            vec![nb, rows, cols]
        };
        cx.reshape(x, cx.shape_from(&flat)?)
    };
    let a3 = operand(cx, a, &ma, m, k)?;
    let b3 = operand(cx, b, &mb, k, n)?;
    let y = cx.push(Opcode::MatMul, Attr::NONE, &[a3, b3])?;
    let mut out = batch.clone();
    if da.len() >= 2 {
        out.push(m);
    }
    if db.len() >= 2 {
        out.push(n);
    }
    let out = Shape::new(&out).map_err(|e| cx.invalid(e.to_string()))?;
    let y = cx.reshape(y, out)?;
    cx.set_output(0, y, FLOAT)
}

fn gemm(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let (mut a, mut b) = (cx.data(0)?, cx.data(1)?);
    let (alpha, beta) = (cx.attr_float("alpha", 1.0), cx.attr_float("beta", 1.0));
    if cx.attr_int("transA", 0) != 0 {
        a = cx.push(Opcode::Transpose, Attr::NONE, &[a])?;
    }
    if cx.attr_int("transB", 0) != 0 {
        b = cx.push(Opcode::Transpose, Attr::NONE, &[b])?;
    }
    let mut y = cx.push(Opcode::MatMul, Attr::NONE, &[a, b])?;
    let ys = cx.shape(y)?;
    // numpy's `alpha * (A @ B) + beta * C`: a multiplication by 1 is exact, so it is left out.
    if alpha.to_bits() != 1.0f32.to_bits() {
        let f = cx.fill(alpha, ys)?;
        y = cx.push(Opcode::Mul, Attr::NONE, &[f, y])?;
    }
    if cx.has_input(2) {
        let mut c = cx.data(2)?;
        if beta.to_bits() != 1.0f32.to_bits() {
            let cs = cx.shape(c)?;
            let f = cx.fill(beta, cs)?;
            c = cx.push(Opcode::Mul, Attr::NONE, &[f, c])?;
        }
        y = cx.elementwise(Opcode::Add, &[y, c])?;
    }
    cx.set_output(0, y, FLOAT)
}

fn transpose(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let s = cx.shape(x)?;
    let dims = dims_of(s);
    let r = dims.len();
    let perm: Vec<usize> = match cx.attr_ints("perm") {
        Some(p) => p
            .iter()
            .map(|&a| cx.axis(a, r))
            .collect::<Result<Vec<usize>, OnnxError>>()?,
        None => (0..r).rev().collect(),
    };
    let mut seen = vec![false; r];
    if perm.len() != r || perm.iter().any(|&a| std::mem::replace(&mut seen[a], true)) {
        return Err(cx.invalid(format!("perm {perm:?} is not a permutation of {r} axes")));
    }
    let mut budget = MAX_TRANSPOSE_SLICES;
    let y = permute(cx, x, &perm, &mut budget)?;
    let y = if y == x {
        let out_shape = cx.shape(y)?;
        cx.push(Opcode::Reshape, Attr::target(out_shape), &[x])?
    } else {
        y
    };
    cx.set_output(0, y, FLOAT)
}

/// The most `slice` instructions a transpose outside the block swaps may take.
pub const MAX_TRANSPOSE_SLICES: usize = 64;

/// `x` with its axes permuted (`out` axis `i` is `x`'s axis `perm[i]`), every element copied.
///
/// Leaving out extent-1 axes (they do not move elements), the identity is a `reshape` and a
/// rotation (the first `k` axes, as one block of rows, swapped with the others) one `transpose`
/// between `reshape`s. Any other permutation slices `x` along the axis that becomes the first
/// (one slice per index), permutes each slice (one axis fewer to move) and concatenates them:
/// at most `budget` slices in all.
fn permute(
    cx: &mut NodeCx<'_>,
    x: NodeId,
    perm: &[usize],
    budget: &mut usize,
) -> Result<NodeId, OnnxError> {
    let s = cx.shape(x)?;
    let dims = dims_of(s);
    let out_dims: Vec<usize> = perm.iter().map(|&a| dims[a]).collect();
    let out_shape = cx.shape_from(&out_dims)?;
    let big: Vec<usize> = (0..dims.len()).filter(|&a| dims[a] > 1).collect();
    let q: Vec<usize> = perm
        .iter()
        .filter(|&&a| dims[a] > 1)
        .map(|a| big.iter().position(|b| b == a).unwrap_or(0))
        .collect();
    let m = q.len();
    if q.iter().enumerate().all(|(i, &v)| i == v) {
        return cx.reshape(x, out_shape);
    }
    if let Some(k) = q
        .first()
        .copied()
        .filter(|&k| (0..m).all(|i| q[i] == (k + i) % m))
    {
        let rows: usize = big[..k].iter().map(|&a| dims[a]).product();
        let cols: usize = big[k..].iter().map(|&a| dims[a]).product();
        let x2 = cx.reshape(x, Shape::matrix(rows, cols))?;
        let t = cx.push(Opcode::Transpose, Attr::NONE, &[x2])?;
        return cx.reshape(t, out_shape);
    }
    // The first output axis of extent > 1 comes from `a`: slice along it.
    let (lead, a) = perm
        .iter()
        .enumerate()
        .find(|&(_, &a)| dims[a] > 1)
        .map(|(i, &a)| (i, a))
        .ok_or_else(|| cx.invalid("no axis to move"))?;
    if dims[a] > *budget {
        return Err(cx.unsupported(
            format!("perm {perm:?} of shape {s}"),
            format!(
                "permutations that swap two blocks of axes (every rank-2 transpose), and others that take at most {MAX_TRANSPOSE_SLICES} slices"
            ),
        ));
    }
    *budget -= dims[a];
    let mut acc: Option<NodeId> = None;
    for i in 0..dims[a] {
        let piece = cx.push(
            Opcode::Slice,
            Attr::Window {
                axis: a,
                start: i,
                len: 1,
            },
            &[x],
        )?;
        let p = permute(cx, piece, perm, budget)?;
        acc = Some(match acc {
            None => p,
            Some(prev) => cx.push(Opcode::Concat, Attr::Axis(lead), &[prev, p])?,
        });
    }
    acc.ok_or_else(|| cx.invalid("an empty axis"))
}

/// Output `0` is input `0` (of `FLOAT` or `BOOL` type) with extents `dims` (a copy).
fn reshaped(cx: &mut NodeCx<'_>, dims: &[usize]) -> Result<(), OnnxError> {
    if let Some(k) = known_ints(cx, 0) {
        // Shape arithmetic (torch's flatten: Shape → Gather → Unsqueeze → Concat → Reshape):
        // folded at plan time.
        if Some(k.len()) != checked_product(dims) {
            return Err(cx.invalid(format!("extents {dims:?} do not hold {} elements", k.len())));
        }
        let mut t = k;
        t.dims = dims.to_vec();
        return cx.set_known_output(0, t);
    }
    let t = cx.input_type(0)?;
    let x = cx.data_of_types(0, &[FLOAT, BOOL])?;
    let shape = cx.shape_from(dims)?;
    if shape.elems() != cx.shape(x)?.elems() {
        return Err(cx.invalid(format!(
            "extents {dims:?} do not hold the {} elements of {}",
            cx.shape(x)?.elems(),
            cx.shape(x)?
        )));
    }
    let y = cx.push(Opcode::Reshape, Attr::target(shape), &[x])?;
    cx.set_output(0, y, t)
}

/// The extents of input `0` (known or on the tape) without making it a tape leaf.
fn input_dims(cx: &mut NodeCx<'_>) -> Result<Vec<usize>, OnnxError> {
    if let Some(t) = cx.known(0) {
        return Ok(t.dims.clone());
    }
    let x = cx.data_of_types(0, &[FLOAT, BOOL])?;
    Ok(dims_of(cx.shape(x)?))
}

fn reshape(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let dims = input_dims(cx)?;
    let target = cx.const_ints(1, "the shape")?;
    let allowzero = cx.attr_int("allowzero", 0) != 0;
    let mut out = Vec::with_capacity(target.len());
    let mut infer = None;
    for (k, &t) in target.iter().enumerate() {
        match t {
            -1 if infer.is_none() => {
                infer = Some(k);
                out.push(1);
            }
            0 if !allowzero => {
                out.push(*dims.get(k).ok_or_else(|| {
                    cx.invalid(format!("shape {target:?}: no extent {k} to copy"))
                })?)
            }
            t if t >= 0 => out.push(usize::try_from(t).unwrap_or(usize::MAX)),
            _ => return Err(cx.invalid(format!("shape {target:?}"))),
        }
    }
    let total: usize = dims.iter().product();
    if let Some(k) = infer {
        let rest = checked_product(&out).unwrap_or(0);
        if rest == 0 || !total.is_multiple_of(rest) {
            return Err(cx.invalid(format!("shape {target:?} does not divide {total} elements")));
        }
        out[k] = total / rest;
    }
    reshaped(cx, &out)
}

fn flatten(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let dims = input_dims(cx)?;
    let r = dims.len();
    let a = cx.attr_int("axis", 1);
    let axis = if a == r as i64 {
        r
    } else {
        cx.axis(a, r.max(1))?
    };
    let rows: usize = dims[..axis.min(r)].iter().product();
    let cols: usize = dims[axis.min(r)..].iter().product();
    reshaped(cx, &[rows, cols])
}

/// Axes from input 1 (newer opsets) or the `axes` attribute (older ones); `None` when neither.
fn axes_list(cx: &NodeCx<'_>) -> Result<Option<Vec<i64>>, OnnxError> {
    if cx.has_input(1) {
        return cx.const_ints(1, "the axes").map(Some);
    }
    Ok(cx.attr_ints("axes"))
}

fn squeeze(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let dims = input_dims(cx)?;
    let r = dims.len();
    let axes: Vec<usize> = match axes_list(cx)? {
        Some(a) => a.iter().map(|&v| cx.axis(v, r)).collect::<Result<_, _>>()?,
        None => (0..r).filter(|&a| dims[a] == 1).collect(),
    };
    if let Some(&a) = axes.iter().find(|&&a| dims[a] != 1) {
        return Err(cx.invalid(format!("axis {a} has extent {}, not 1", dims[a])));
    }
    let out: Vec<usize> = (0..r)
        .filter(|a| !axes.contains(a))
        .map(|a| dims[a])
        .collect();
    reshaped(cx, &out)
}

fn unsqueeze(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let dims = input_dims(cx)?;
    let axes = axes_list(cx)?.ok_or_else(|| cx.invalid("no axes"))?;
    let r = dims.len() + axes.len();
    let axes: Vec<usize> = axes
        .iter()
        .map(|&v| cx.axis(v, r))
        .collect::<Result<_, _>>()?;
    let mut rest = dims.iter();
    let mut out = Vec::with_capacity(r);
    for a in 0..r {
        if axes.contains(&a) {
            out.push(1);
        } else {
            out.push(*rest.next().ok_or_else(|| cx.invalid("repeated axes"))?);
        }
    }
    reshaped(cx, &out)
}

/// Input `i` when it is an integer tensor known at plan time (shape arithmetic, folded).
fn known_ints(cx: &NodeCx<'_>, i: usize) -> Option<TensorData> {
    cx.known(i)
        .filter(|t| matches!(t.elements, Elements::Int(_)))
        .cloned()
}

/// Integer tensors known at plan time concatenated along `axis`.
fn concat_known(cx: &NodeCx<'_>, parts: &[TensorData], axis: i64) -> Result<TensorData, OnnxError> {
    let first = &parts[0];
    let r = first.dims.len();
    let axis = cx.axis(axis, r)?;
    let mut dims = first.dims.clone();
    dims[axis] = 0;
    let outer: usize = first.dims[..axis].iter().product();
    let mut chunks = Vec::new();
    for p in parts {
        let same = p.dims.len() == r && (0..r).all(|a| a == axis || p.dims[a] == first.dims[a]);
        let Elements::Int(v) = &p.elements else {
            return Err(cx.invalid("mixed element types"));
        };
        if !same {
            return Err(cx.invalid(format!("extents {:?} and {:?}", first.dims, p.dims)));
        }
        dims[axis] += p.dims[axis];
        chunks.push((v, p.dims[axis..].iter().product::<usize>()));
    }
    let mut out = Vec::new();
    for o in 0..outer {
        for (v, width) in &chunks {
            let part = v
                .get(o * width..(o + 1) * width)
                .ok_or_else(|| cx.invalid("elements do not match the extents"))?;
            out.extend_from_slice(part);
        }
    }
    let mut t = first.with_elements(first.data_type, Elements::Int(out));
    t.dims = dims;
    Ok(t)
}

fn concat(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let n = cx.num_inputs();
    let known: Vec<TensorData> = (0..n).filter_map(|i| known_ints(cx, i)).collect();
    if n > 0 && known.len() == n {
        let out = concat_known(cx, &known, cx.attr_int("axis", 0))?;
        return cx.set_known_output(0, out);
    }
    let mut acc = cx.data(0)?;
    let r = cx.shape(acc)?.rank();
    let axis = cx.axis(cx.attr_int("axis", 0), r)?;
    for i in 1..n {
        let x = cx.data(i)?;
        acc = cx.push(Opcode::Concat, Attr::Axis(axis), &[acc, x])?;
    }
    if n == 1 {
        let s = cx.shape(acc)?;
        acc = cx.push(Opcode::Reshape, Attr::target(s), &[acc])?;
    }
    cx.set_output(0, acc, FLOAT)
}

/// `x` cut to `[start, start + len)` along `axis` (nothing when that is the whole extent).
fn window(
    cx: &mut NodeCx<'_>,
    x: NodeId,
    axis: usize,
    start: usize,
    len: usize,
) -> Result<NodeId, OnnxError> {
    if start == 0 && cx.shape(x)?.dim(axis) == Some(len) {
        return Ok(x);
    }
    cx.push(Opcode::Slice, Attr::Window { axis, start, len }, &[x])
}

fn slice(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let mut x = cx.data(0)?;
    let dims = dims_of(cx.shape(x)?);
    let r = dims.len();
    let (starts, ends, axes, steps) = if cx.opset() < 10 {
        let s = cx
            .attr_ints("starts")
            .ok_or_else(|| cx.invalid("no starts"))?;
        let e = cx.attr_ints("ends").ok_or_else(|| cx.invalid("no ends"))?;
        (s, e, cx.attr_ints("axes"), None)
    } else {
        let s = cx.const_ints(1, "starts")?;
        let e = cx.const_ints(2, "ends")?;
        let a = if cx.has_input(3) {
            Some(cx.const_ints(3, "axes")?)
        } else {
            None
        };
        let st = if cx.has_input(4) {
            Some(cx.const_ints(4, "steps")?)
        } else {
            None
        };
        (s, e, a, st)
    };
    let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
    if starts.len() != ends.len() || axes.len() != starts.len() {
        return Err(cx.invalid("starts, ends and axes differ in length"));
    }
    if let Some(st) = &steps {
        if st.len() != starts.len() {
            return Err(cx.invalid("steps and starts differ in length"));
        }
        if let Some(bad) = st.iter().find(|&&v| v != 1) {
            return Err(cx.unsupported(format!("step {bad}"), "steps of 1"));
        }
    }
    for k in 0..starts.len() {
        let axis = cx.axis(axes[k], r)?;
        let d = dims[axis] as i64;
        let clamp = |v: i64| (if v < 0 { v.saturating_add(d) } else { v }).clamp(0, d);
        let (s, e) = (clamp(starts[k]), clamp(ends[k]));
        if e <= s {
            return Err(cx.unsupported(
                format!("an empty slice along axis {axis}"),
                "non-empty slices (zero-extent tensors are not planned)",
            ));
        }
        x = window(cx, x, axis, s as usize, (e - s) as usize)?;
    }
    if x == cx.data(0)? {
        let s = cx.shape(x)?;
        x = cx.push(Opcode::Reshape, Attr::target(s), &[x])?;
    }
    cx.set_output(0, x, FLOAT)
}

fn pad(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let mode = cx.attr_string("mode", "constant");
    if mode != "constant" {
        return Err(cx.unsupported(format!("mode {mode:?}"), "mode \"constant\""));
    }
    let x0 = cx.data(0)?;
    let dims = dims_of(cx.shape(x0)?);
    let r = dims.len();
    let (pads, value) = if cx.opset() < 11 {
        let p = cx.attr_ints("pads").ok_or_else(|| cx.invalid("no pads"))?;
        (p, cx.attr_float("value", 0.0))
    } else {
        let p = cx.const_ints(1, "the pads")?;
        let v = if cx.has_input(2) {
            *cx.const_floats(2, "the constant value")?
                .first()
                .unwrap_or(&0.0)
        } else {
            0.0
        };
        (p, v)
    };
    let axes: Vec<usize> = if cx.has_input(3) {
        cx.const_ints(3, "the axes")?
            .iter()
            .map(|&a| cx.axis(a, r))
            .collect::<Result<_, _>>()?
    } else {
        (0..r).collect()
    };
    if pads.len() != 2 * axes.len() {
        return Err(cx.invalid(format!("{} pads for {} axes", pads.len(), axes.len())));
    }
    let n = axes.len();
    let mut x = x0;
    // Negative pads cut, first; then the zero pads, which a mask of ones replays for a non-zero
    // value.
    for (k, &axis) in axes.iter().enumerate() {
        let cut = |p: i64| p.saturating_neg().max(0);
        let (cut_b, cut_e) = (cut(pads[k]), cut(pads[k + n]));
        let d = cx.shape(x)?.dim(axis).unwrap_or(0) as i64;
        if cut_b.saturating_add(cut_e) >= d {
            return Err(cx.unsupported(
                format!("pads {pads:?} leave nothing along axis {axis}"),
                "non-empty results",
            ));
        }
        x = window(cx, x, axis, cut_b as usize, (d - cut_b - cut_e) as usize)?;
    }
    let cut_shape = cx.shape(x)?;
    let mut windows = Vec::new();
    for (k, &axis) in axes.iter().enumerate() {
        let add = |p: i64| usize::try_from(p.max(0)).unwrap_or(usize::MAX);
        let (add_b, add_e) = (add(pads[k]), add(pads[k + n]));
        if add_b > 0 || add_e > 0 {
            let d = cx.shape(x)?.dim(axis).unwrap_or(0);
            let len = d
                .checked_add(add_b)
                .and_then(|l| l.checked_add(add_e))
                .ok_or_else(|| cx.invalid(format!("pads {pads:?} overflow")))?;
            let w = Attr::Window {
                axis,
                start: add_b,
                len,
            };
            windows.push(w);
            x = cx.push(Opcode::Pad, w, &[x])?;
        }
    }
    if value.to_bits() != 0.0f32.to_bits() && !windows.is_empty() {
        // `select(pad(ones), pad(x), value)`: `x` where it was, the value in the padding, every
        // bit exact (`-0.0` and NaN included).
        let mut mask = cx.fill(1.0, cut_shape)?;
        for &w in &windows {
            mask = cx.push(Opcode::Pad, w, &[mask])?;
        }
        let out_shape = cx.shape(x)?;
        let v = cx.fill(value, out_shape)?;
        x = cx.push(Opcode::Select, Attr::NONE, &[mask, x, v])?;
    }
    if x == x0 {
        let s = cx.shape(x)?;
        x = cx.push(Opcode::Reshape, Attr::target(s), &[x])?;
    }
    cx.set_output(0, x, FLOAT)
}

#[derive(Clone, Copy)]
enum Reduce {
    Sum,
    Mean,
    Max,
    Prod,
}

fn reduce(cx: &mut NodeCx<'_>, how: Reduce) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let dims = dims_of(cx.shape(x)?);
    let r = dims.len();
    let keepdims = cx.attr_int("keepdims", 1) != 0;
    let noop = cx.attr_int("noop_with_empty_axes", 0) != 0;
    let axes: Vec<usize> = match axes_list(cx)? {
        Some(a) if !a.is_empty() => a.iter().map(|&v| cx.axis(v, r)).collect::<Result<_, _>>()?,
        _ if noop => {
            let s = cx.shape(x)?;
            let y = cx.push(Opcode::Reshape, Attr::target(s), &[x])?;
            return cx.set_output(0, y, FLOAT);
        }
        _ => (0..r).collect(),
    };
    let kept: Vec<usize> = (0..r)
        .map(|a| if axes.contains(&a) { 1 } else { dims[a] })
        .collect();
    let kshape = cx.shape_from(&kept)?;
    let mut y = match how {
        Reduce::Max => cx.push(Opcode::MaxTo, Attr::target(kshape), &[x])?,
        Reduce::Prod => cx.push(Opcode::ProdTo, Attr::target(kshape), &[x])?,
        Reduce::Sum | Reduce::Mean => cx.push(Opcode::SumTo, Attr::target(kshape), &[x])?,
    };
    if let Reduce::Mean = how {
        let count: usize = axes.iter().map(|&a| dims[a]).product::<usize>();
        let f = cx.fill(count as f32, kshape)?;
        y = cx.push(Opcode::Div, Attr::NONE, &[y, f])?;
    }
    if !keepdims {
        let out: Vec<usize> = (0..r)
            .filter(|a| !axes.contains(a))
            .map(|a| dims[a])
            .collect();
        let s = cx.shape_from(&out)?;
        y = cx.reshape(y, s)?;
    }
    cx.set_output(0, y, FLOAT)
}

fn reduce_sum(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    reduce(cx, Reduce::Sum)
}

fn reduce_mean(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    reduce(cx, Reduce::Mean)
}

fn reduce_max(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    reduce(cx, Reduce::Max)
}

fn reduce_prod(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    reduce(cx, Reduce::Prod)
}

/// Softmax (`log = false`) or log-softmax over the node's axis: `d = x - max(x)`, then
/// `exp(d) / sum(exp(d))` or `d - log(sum(exp(d)))`, as ONNX's reference computes them.
fn softmax_like(cx: &mut NodeCx<'_>, log: bool) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let shape = cx.shape(x)?;
    let dims = dims_of(shape);
    let r = dims.len();
    // Opset 13 normalizes along one axis (default -1); before, over the flattened trailing axes
    // from `axis` (default 1).
    let (xw, axis) = if cx.opset() >= 13 {
        (x, cx.axis(cx.attr_int("axis", -1), r)?)
    } else {
        let a = cx.axis(cx.attr_int("axis", 1), r)?;
        let rows: usize = dims[..a].iter().product();
        let cols: usize = dims[a..].iter().product();
        (cx.reshape(x, Shape::matrix(rows, cols))?, 1)
    };
    let ws = cx.shape(xw)?;
    let mut kept = dims_of(ws);
    kept[axis] = 1;
    let kshape = cx.shape_from(&kept)?;
    let m = cx.push(Opcode::MaxTo, Attr::target(kshape), &[xw])?;
    let mb = cx.broadcast(m, ws)?;
    let d = cx.push(Opcode::Sub, Attr::NONE, &[xw, mb])?;
    let e = cx.push(Opcode::Exp, Attr::NONE, &[d])?;
    let s = cx.push(Opcode::SumTo, Attr::target(kshape), &[e])?;
    let y = if log {
        let l = cx.push(Opcode::Log, Attr::NONE, &[s])?;
        let lb = cx.broadcast(l, ws)?;
        cx.push(Opcode::Sub, Attr::NONE, &[d, lb])?
    } else {
        let sb = cx.broadcast(s, ws)?;
        cx.push(Opcode::Div, Attr::NONE, &[e, sb])?
    };
    let y = cx.reshape(y, shape)?;
    cx.set_output(0, y, FLOAT)
}

fn softmax(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    softmax_like(cx, false)
}

fn log_softmax(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    softmax_like(cx, true)
}

fn gather(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let (Some(data), Some(idx)) = (known_ints(cx, 0), known_ints(cx, 1)) else {
        let x = cx.data(0)?;
        let i = cx.data_of_types(1, &[INT64, INT32])?;
        let r = cx.shape(x)?.rank();
        let axis = cx.axis(cx.attr_int("axis", 0), r)?;
        let y = cx.record(|t| t.gather(&x, &i, axis))?;
        return cx.set_output(0, y, FLOAT);
    };
    let (Elements::Int(v), Elements::Int(ix)) = (&data.elements, &idx.elements) else {
        return Err(cx.invalid("not integers"));
    };
    let r = data.dims.len();
    let axis = cx.axis(cx.attr_int("axis", 0), r)?;
    let n = data.dims[axis] as i64;
    let outer: usize = data.dims[..axis].iter().product();
    let inner: usize = data.dims[axis + 1..].iter().product();
    let mut out = Vec::with_capacity(outer * ix.len() * inner);
    for o in 0..outer {
        for &i in ix {
            let j = if i < 0 { i + n } else { i };
            if !(0..n).contains(&j) {
                return Err(cx.invalid(format!("index {i} outside [-{n}, {n})")));
            }
            let start = (o * n as usize + j as usize) * inner;
            let part = v
                .get(start..start + inner)
                .ok_or_else(|| cx.invalid("elements do not match the extents"))?;
            out.extend_from_slice(part);
        }
    }
    let mut dims = data.dims[..axis].to_vec();
    dims.extend_from_slice(&idx.dims);
    dims.extend_from_slice(&data.dims[axis + 1..]);
    let mut t = data.with_elements(data.data_type, Elements::Int(out));
    t.dims = dims;
    cx.set_known_output(0, t)
}

fn size(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let n = match cx.known(0) {
        Some(t) => checked_product(&t.dims).ok_or_else(|| cx.invalid("extents overflow"))?,
        None => {
            let x = cx.data_of_types(0, &[FLOAT, BOOL])?;
            cx.shape(x)?.elems()
        }
    };
    cx.set_known_output(0, TensorData::i64(vec![], vec![n as i64]))
}

fn constant_of_shape(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let dims: Vec<usize> = cx
        .const_ints(0, "the shape")?
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| cx.invalid(format!("extent {d}"))))
        .collect::<Result<_, _>>()?;
    let n = checked_product(&dims)
        .filter(|&n| n <= 1 << 24)
        .ok_or_else(|| cx.unsupported(format!("extents {dims:?}"), "at most 2^24 elements"))?;
    let value = cx
        .attr_tensor("value")?
        .unwrap_or_else(|| TensorData::f32(vec![1], vec![0.0]));
    let mut out = match &value.elements {
        Elements::F32(v) if v.len() == 1 => TensorData::f32(vec![], vec![v[0]; n]),
        Elements::Int(v) if v.len() == 1 => {
            value.with_elements(value.data_type, Elements::Int(vec![v[0]; n]))
        }
        _ => {
            return Err(cx.unsupported(
                format!(
                    "a value of type {} and {} elements",
                    value.type_name(),
                    value.dims.iter().product::<usize>()
                ),
                "one FLOAT or integer value",
            ))
        }
    };
    out.dims = dims;
    cx.set_known_output(0, out)
}

fn reciprocal(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let s = cx.shape(x)?;
    let one = cx.fill(1.0, s)?;
    let y = cx.push(Opcode::Div, Attr::NONE, &[one, x])?;
    cx.set_output(0, y, FLOAT)
}

fn leaky_relu(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let alpha = cx.attr_float("alpha", 0.01);
    let y = cx.record(|t| t.leaky_relu(&x, alpha))?;
    cx.set_output(0, y, FLOAT)
}

fn hard_sigmoid(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let (alpha, beta) = (cx.attr_float("alpha", 0.2), cx.attr_float("beta", 0.5));
    let y = cx.record(|t| t.hardsigmoid(&x, alpha, beta))?;
    cx.set_output(0, y, FLOAT)
}

fn hard_swish(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let y = cx.record(|t| t.hardswish(&x))?;
    cx.set_output(0, y, FLOAT)
}

fn gelu(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let y = match cx.attr_string("approximate", "none").as_str() {
        "none" => cx.record(|t| t.gelu(&x))?,
        "tanh" => cx.record(|t| t.gelu_tanh(&x))?,
        other => {
            return Err(cx.unsupported(
                format!("approximate {other:?}"),
                "approximate \"none\" and \"tanh\"",
            ))
        }
    };
    cx.set_output(0, y, FLOAT)
}

/// A bound of `Clip`: an attribute before opset 11, an optional input after; `None` when absent.
enum Bound {
    Known(f32),
    Data(NodeId),
}

fn clip_bound(cx: &mut NodeCx<'_>, i: usize, attr: &str) -> Result<Option<Bound>, OnnxError> {
    if cx.opset() < 11 {
        let present = cx.attribute_names().any(|a| a == attr);
        return Ok(present.then(|| Bound::Known(cx.attr_float(attr, 0.0))));
    }
    if !cx.has_input(i) {
        return Ok(None);
    }
    if cx.known(i).is_some() {
        let v = cx.const_floats(i, attr)?;
        let [v] = v[..] else {
            return Err(cx.invalid(format!("{attr} has {} elements, not 1", v.len())));
        };
        return Ok(Some(Bound::Known(v)));
    }
    Ok(Some(Bound::Data(cx.data(i)?)))
}

fn clip(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let lo = clip_bound(cx, 1, "min")?;
    let hi = clip_bound(cx, 2, "max")?;
    let y = match (&lo, &hi) {
        (Some(Bound::Known(a)), Some(Bound::Known(b))) => {
            let (a, b) = (*a, *b);
            cx.record(|t| t.clamp(&x, a, b))?
        }
        _ => {
            let mut y = x;
            for (bound, op) in [(lo, Opcode::Maximum), (hi, Opcode::Minimum)] {
                let b = match bound {
                    None => continue,
                    Some(Bound::Known(v)) => {
                        let s = cx.shape(x)?;
                        cx.fill(v, s)?
                    }
                    Some(Bound::Data(b)) => b,
                };
                y = cx.elementwise(op, &[y, b])?;
            }
            if y == x {
                let s = cx.shape(x)?;
                y = cx.push(Opcode::Reshape, Attr::target(s), &[x])?;
            }
            y
        }
    };
    cx.set_output(0, y, FLOAT)
}

/// A windowed operator's geometry (Conv, the pools) per spatial axis, its pads explicit.
struct Window {
    strides: Vec<usize>,
    dilations: Vec<usize>,
    /// ONNX's order: every axis's begin, then every axis's end.
    pads: Vec<usize>,
}

/// An attribute list of `n` non-negative values, or `default` everywhere when absent.
fn spatial_ints(
    cx: &NodeCx<'_>,
    name: &str,
    n: usize,
    default: usize,
) -> Result<Vec<usize>, OnnxError> {
    let Some(v) = cx.attr_ints(name) else {
        return Ok(vec![default; n]);
    };
    if v.len() != n {
        return Err(cx.invalid(format!("{name} has {} values for {n} axes", v.len())));
    }
    v.iter()
        .map(|&x| usize::try_from(x).map_err(|_| cx.invalid(format!("{name} value {x}"))))
        .collect()
}

/// The geometry of a windowed node over spatial extents `input` and kernel extents `kernel`:
/// `strides`, `dilations`, and the pads from `pads` or `auto_pad` (`SAME_UPPER`/`SAME_LOWER`:
/// `ceil(in / stride)` outputs, the total padding split evenly, the odd one at the end or the
/// beginning; `VALID`: none), made explicit at plan time. With `ceil_mode` (the pools), the
/// output extent is rounded up (a last window that would start in the end padding dropped, as
/// ONNX's reference and PyTorch) and the overhang added to the end pads: `ceil_overhang` tells
/// whether any was.
fn window_geometry(
    cx: &NodeCx<'_>,
    input: &[usize],
    kernel: &[usize],
    ceil_mode: bool,
) -> Result<(Window, bool), OnnxError> {
    let n = input.len();
    let strides = spatial_ints(cx, "strides", n, 1)?;
    let dilations = spatial_ints(cx, "dilations", n, 1)?;
    if strides.contains(&0) || dilations.contains(&0) {
        return Err(cx.invalid("a stride or dilation of 0"));
    }
    // Saturating: a hostile value saturates, and the instruction's attribute (u32, u16)
    // refuses it.
    let span = |a: usize| {
        kernel[a]
            .saturating_sub(1)
            .saturating_mul(dilations[a])
            .saturating_add(1)
    };
    let auto_pad = cx.attr_string("auto_pad", "NOTSET");
    let mut pads = match auto_pad.as_str() {
        "NOTSET" => spatial_ints(cx, "pads", 2 * n, 0)?,
        "VALID" => vec![0; 2 * n],
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut p = vec![0; 2 * n];
            for a in 0..n {
                let out = input[a].div_ceil(strides[a]);
                let total = ((out - 1) * strides[a])
                    .saturating_add(span(a))
                    .saturating_sub(input[a]);
                let small = total / 2;
                let (b, e) = if auto_pad == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                p[a] = b;
                p[n + a] = e;
            }
            p
        }
        other => {
            return Err(cx.unsupported(
                format!("auto_pad {other:?}"),
                "auto_pad NOTSET, VALID, SAME_UPPER, SAME_LOWER",
            ))
        }
    };
    let mut overhang = false;
    for a in 0..n {
        let padded = input[a].saturating_add(pads[a]).saturating_add(pads[n + a]);
        if padded < span(a) {
            return Err(cx.invalid(format!(
                "a window of {} does not fit {padded} padded positions",
                span(a)
            )));
        }
        if ceil_mode {
            let mut out = (padded - span(a)).div_ceil(strides[a]) + 1;
            if (out - 1).saturating_mul(strides[a]) >= input[a].saturating_add(pads[a]) {
                out -= 1;
            }
            let need = (out - 1).saturating_mul(strides[a]).saturating_add(span(a));
            if need > padded {
                pads[n + a] = pads[n + a].saturating_add(need - padded);
                overhang = true;
            }
        }
    }
    Ok((
        Window {
            strides,
            dilations,
            pads,
        },
        overhang,
    ))
}

/// The spatial extents of a channels-first input `[N, C, ..]` with one or two spatial axes.
fn spatial_extents(cx: &NodeCx<'_>, x: NodeId) -> Result<Vec<usize>, OnnxError> {
    let dims = dims_of(cx.shape(x)?);
    if !(3..=4).contains(&dims.len()) {
        return Err(cx.unsupported(
            format!("an input of rank {}", dims.len()),
            "1-D and 2-D windows (inputs [N, C, L] and [N, C, H, W])",
        ));
    }
    Ok(dims[2..].to_vec())
}

fn conv(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let w = cx.data(1)?;
    let b = if cx.has_input(2) {
        Some(cx.data(2)?)
    } else {
        None
    };
    let input = spatial_extents(cx, x)?;
    let kernel = dims_of(cx.shape(w)?)
        .get(2..)
        .map(<[usize]>::to_vec)
        .unwrap_or_default();
    if kernel.len() != input.len() {
        return Err(cx.invalid(format!(
            "a kernel of rank {} for the input",
            kernel.len() + 2
        )));
    }
    if let Some(k) = cx.attr_ints("kernel_shape") {
        if k.iter()
            .map(|&v| usize::try_from(v).ok())
            .ne(kernel.iter().map(|&v| Some(v)))
        {
            return Err(cx.invalid(format!("kernel_shape {k:?} is not the weight's {kernel:?}")));
        }
    }
    let (g, _) = window_geometry(cx, &input, &kernel, false)?;
    let as_i64 = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
    let attr = ConvAttr::from_onnx(
        &as_i64(&g.strides),
        &as_i64(&g.pads),
        &as_i64(&g.dilations),
        cx.attr_int("group", 1),
    )
    .ok_or_else(|| cx.invalid("strides, pads, dilations or group out of range"))?;
    let y = cx.record(|t| t.conv(&x, &w, b.as_ref(), attr))?;
    cx.set_output(0, y, FLOAT)
}

/// The pooling window of a `MaxPool` or `AveragePool` node over `x`, and whether `ceil_mode`
/// added end padding past the explicit pads.
fn pool_window(cx: &NodeCx<'_>, x: NodeId) -> Result<(PoolWindow, bool), OnnxError> {
    let input = spatial_extents(cx, x)?;
    let n = input.len();
    let kernel = spatial_ints(cx, "kernel_shape", n, 0)?;
    if cx.attr_ints("kernel_shape").is_none() || kernel.contains(&0) {
        return Err(cx.invalid("no kernel_shape, or an extent of 0"));
    }
    let ceil_mode = cx.attr_int("ceil_mode", 0) != 0;
    let (g, overhang) = window_geometry(cx, &input, &kernel, ceil_mode)?;
    let w = |v: usize| {
        u16::try_from(v)
            .map_err(|_| cx.unsupported(format!("a window value {v}"), "values up to 65535"))
    };
    let win = if n == 1 {
        PoolWindow::new_1d(
            w(kernel[0])?,
            w(g.strides[0])?,
            [w(g.pads[0])?, w(g.pads[1])?],
        )
        .with_dilations([1, w(g.dilations[0])?])
    } else {
        PoolWindow::new_2d(
            [w(kernel[0])?, w(kernel[1])?],
            [w(g.strides[0])?, w(g.strides[1])?],
            [w(g.pads[0])?, w(g.pads[1])?, w(g.pads[2])?, w(g.pads[3])?],
        )
        .with_dilations([w(g.dilations[0])?, w(g.dilations[1])?])
    };
    Ok((win, overhang))
}

fn max_pool(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let column_major = match cx.attr_int("storage_order", 0) {
        0 => false,
        1 => true,
        v => return Err(cx.invalid(format!("storage_order {v}"))),
    };
    let (win, _) = pool_window(cx, x)?;
    let y = cx.record(|t| t.max_pool(&x, win))?;
    cx.set_output(0, y, FLOAT)?;
    if cx.has_output(1) {
        // Indices: the flat index of each window's first maximum, read from a table of every
        // element's flat index (exact in f32 below 2^24): row-major, or with `storage_order=1`
        // the spatial axes column-major (`(n·C + c)·H·W + w·H + h`).
        let s = cx.shape(x)?;
        if s.elems() > 1 << 24 {
            return Err(cx.unsupported(
                format!("Indices of {} elements", s.elems()),
                "at most 2^24 elements (f32 integers)",
            ));
        }
        let dims = dims_of(s);
        let plane: usize = dims[2..].iter().product();
        let (h, w) = if dims.len() == 4 {
            (dims[2], dims[3])
        } else {
            (1, dims[2])
        };
        let index = |i: usize| {
            let (base, p) = (i - i % plane, i % plane);
            let (r, c) = (p / w, p % w);
            (if column_major { base + c * h + r } else { i }) as f32
        };
        let ramp = TensorData::f32(dims, (0..s.elems()).map(index).collect());
        let ramp = cx.constant("ramp", ramp)?;
        let idx = cx.record(|t| t.max_pool_gather(&x, &ramp, win))?;
        cx.set_output(1, idx, INT64)?;
    }
    Ok(())
}

fn average_pool(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let include = cx.attr_int("count_include_pad", 0) != 0;
    let (win, overhang) = pool_window(cx, x)?;
    if include && overhang {
        return Err(cx.unsupported(
            "ceil_mode with count_include_pad=1 and a window past the end padding",
            "ceil_mode with count_include_pad=0, or windows within the padding",
        ));
    }
    let win = win.with_count_include_pad(include);
    let y = cx.record(|t| t.avg_pool(&x, win))?;
    cx.set_output(0, y, FLOAT)
}

fn global_average_pool(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    spatial_extents(cx, x)?;
    let y = cx.record(|t| t.global_avg_pool(&x))?;
    cx.set_output(0, y, FLOAT)
}

fn arg_max(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let s = cx.shape(x)?;
    let dims = dims_of(s);
    let r = dims.len();
    let axis = cx.axis(cx.attr_int("axis", 0), r)?;
    let mut kept = dims.clone();
    kept[axis] = 1;
    let kshape = cx.shape_from(&kept)?;
    let mut y = if cx.attr_int("select_last_index", 0) == 0 {
        cx.record(|t| t.argmax(&x, axis))?
    } else {
        // The highest index where x equals its maximum: max_to of `mask · index`.
        let mut ramp_dims = vec![1; r];
        ramp_dims[axis] = dims[axis];
        let ramp = TensorData::f32(ramp_dims, (0..dims[axis]).map(|i| i as f32).collect());
        let ramp = cx.constant("index", ramp)?;
        cx.record(|t| {
            let m = t.max_to(&x, kshape)?;
            let m = t.broadcast(&m, s)?;
            let at_max = t.equal(&x, &m)?;
            let ramp = t.broadcast(&ramp, s)?;
            let idx = t.mul(&at_max, &ramp)?;
            t.max_to(&idx, kshape)
        })?
    };
    if cx.attr_int("keepdims", 1) == 0 {
        let out: Vec<usize> = (0..r).filter(|&a| a != axis).map(|a| dims[a]).collect();
        let out = cx.shape_from(&out)?;
        y = cx.reshape(y, out)?;
    }
    cx.set_output(0, y, INT64)
}

fn batch_normalization(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
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
    if !training && cx.training() {
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
fn layer_normalization(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
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

fn cast(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let to = cx.attr_int("to", 0) as i32;
    cast_to(cx, to)
}

fn cast_like(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let to = cx.input_type(1)?;
    cast_to(cx, to)
}

/// Input 0 cast to element type `to` (`Cast`'s attribute, `CastLike`'s second input's type).
fn cast_to(cx: &mut NodeCx<'_>, to: i32) -> Result<(), OnnxError> {
    if let Some(k) = cx.known(0).filter(|t| t.data_type == FLOAT && to == FLOAT) {
        // A constant cast to its own type (a function body's `CastLike` of a constant to the
        // input's type): still known at plan time.
        let k = k.clone();
        return cx.set_known_output(0, k);
    }
    if let Some(k) = known_ints(cx, 0) {
        let Elements::Int(v) = &k.elements else {
            return Err(cx.invalid("not integers"));
        };
        let out = match to {
            FLOAT => TensorData::f32(k.dims.clone(), v.iter().map(|&x| x as f32).collect()),
            t if matches!(
                super::proto::tensor_proto::DataType::try_from(t),
                Ok(super::proto::tensor_proto::DataType::Int64
                    | super::proto::tensor_proto::DataType::Int32)
            ) =>
            {
                k.with_elements(t, Elements::Int(v.clone()))
            }
            t => {
                return Err(cx.unsupported(
                    format!(
                        "a cast of known integers to {}",
                        super::tensor::data_type_name(t)
                    ),
                    "FLOAT, INT32, INT64",
                ))
            }
        };
        return cx.set_known_output(0, out);
    }
    let from = cx.input_type(0)?;
    if to != FLOAT || !matches!(from, FLOAT | BOOL) {
        return Err(cx.unsupported(
            format!(
                "a cast from {} to {}",
                super::tensor::data_type_name(from),
                super::tensor::data_type_name(to)
            ),
            "casts to FLOAT from FLOAT or BOOL (masks are already 0/1 in f32)",
        ));
    }
    let x = cx.data_of_types(0, &[FLOAT, BOOL])?;
    let s = cx.shape(x)?;
    let y = cx.push(Opcode::Reshape, Attr::target(s), &[x])?;
    cx.set_output(0, y, FLOAT)
}

/// The product of extents, `None` on overflow (hostile shapes).
fn checked_product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}
