//! The operator table: one row per ONNX operator (its translation, the attributes it reads,
//! what is not supported and why, the conformance tolerance against ONNX's expected outputs).
//! Adding an operator is adding a row (and, for a new instruction, the function the row names).
//! `docs/onnx.md` lists the same rows.

//!
//! The rows' translations live in one private module per operator family: `graph` (constants,
//! shapes, casts), `elementwise`, `matmul`, `layout` (transposes, reshapes, slices, gathers),
//! `reduce` (reductions, softmax, arg max), `conv` (convolution and pooling) and `norm`
//! (normalizations).

mod conv;
mod elementwise;
mod graph;
mod layout;
mod matmul;
mod norm;
mod reduce;

use tapeplan_core::{Attr, Opcode};

use super::translate::{NodeCx, FLOAT};
use super::OnnxError;

use conv::{average_pool, conv, global_average_pool, max_pool};
use elementwise::{
    clip, equal, gelu, greater, greater_or_equal, hard_sigmoid, hard_swish, leaky_relu, less,
    less_or_equal, max, min, pow, reciprocal, sum, where_,
};
use graph::{cast, cast_like, constant, constant_of_shape, identity, shape, size};
pub use layout::MAX_TRANSPOSE_SLICES;
use layout::{concat, flatten, gather, pad, reshape, slice, squeeze, transpose, unsqueeze};
use matmul::{gemm, matmul};
use norm::{batch_normalization, layer_normalization};
use reduce::{arg_max, log_softmax, reduce_max, reduce_mean, reduce_prod, reduce_sum, softmax};

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
    row!("AveragePool", Custom(average_pool), ["auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"], SUMS, "1-D, 2-D and 3-D, strides, pads, dilations per axis, `count_include_pad` both (`avg_pool`); `auto_pad` and `ceil_mode` as explicit (end) pads at plan time; `ceil_mode` with `count_include_pad=1` and a window past the end padding: the explicit pads as zeros (`pad`), then `count_include_pad=0`, so the divisor counts the explicit padding and not the overhang (ONNX's reference, PyTorch). 3-D (`[N, C, D, H, W]`, held as the rank-4 `[N·C, D, H, W]`, the same bytes): an (H, W) pool then a D pool (`avg_pool` twice, `reshape`): a box window's real taps are the product of each axis's, so the mean is the mean over D of the means over (H, W), for both divisors."),
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
    row!("MaxPool", Custom(max_pool), ["auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"], EXACT, "1-D, 2-D and 3-D, strides, pads, dilations per axis (`max_pool`, padding as −inf); `auto_pad` and `ceil_mode` as explicit (end) pads at plan time; the Indices output (flat indices, row-major or with `storage_order=1` column-major) as `max_pool_gather` of a table of indices, INT64 as `f32` integers, 1-D and 2-D only. 3-D (`[N, C, D, H, W]`, held as the rank-4 `[N·C, D, H, W]`, the same bytes): an (H, W) pool then a D pool (`max_pool` twice, `reshape`): the maximum is separable, and the element kept (the gradient's destination) is the box's first maximum in row-major order, first by d, then by (h, w); a 3-D Indices output is not supported."),
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

/// The product of extents, `None` on overflow (hostile shapes).
pub(super) fn checked_product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}
