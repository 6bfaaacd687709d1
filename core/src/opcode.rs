//! The vocabulary: one table of opcodes, the one list of per-op facts. The enum, its checked
//! decoding from a byte, the text names, arities, classes, attribute kinds, the core set and
//! the zero-derivative opcodes derive from the table below, and so does the dispatch in
//! [`crate::ops`]; `docs/plan-format.md` lists the same rows (a test checks the document against
//! it).

use core::fmt;

use crate::AttrKind;

/// The largest number of arguments any opcode takes.
pub const MAX_ARITY: usize = 3;

/// How an opcode relates its output to its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpClass {
    /// No arguments; the value comes from outside the computation (input, parameter) or from the
    /// attribute (fill).
    Leaf,
    /// One or two arguments of one shape, the output of that shape, each output element a
    /// function of the same-index argument elements only. Such an op may run in place over an
    /// argument that dies at it.
    Elementwise,
    /// Anything else (matrix product, layout changes, reductions).
    Structural,
}

/// The opcode table: one row per opcode, the one list of per-op facts. It hands its rows to
/// the macro named `$callback`: [`Opcode`]'s definition below, and the dispatch of
/// [`crate::ops`] (shape rule, reference kernel, scalar functions, reverse rule).
///
/// Columns: byte, variant, text name, arity, [`OpClass`], [`AttrKind`] of its attribute, set
/// (`core`: in every build; `ext`: only with the `all-ops` feature, so a firmware links only the
/// core set), reverse rule (`grad`, or `zero` for the opcodes whose rule contributes nothing),
/// kernel (`unary` / `unary_math` / `binary`: the module's `scalar` (and `scalar_fast` for the
/// profile-dependent ones) applied elementwise; `node`: the module's own `infer` and `eval`),
/// module in `core/src/ops/`, doc.
macro_rules! opcode_table {
    ($callback:ident) => {
        $callback! {
            0x00 Input        "input"         0 Leaf        Target core grad node       leaf          "A value set by the caller before an entry runs.";
            0x01 Parameter    "parameter"     0 Leaf        Target core grad node       leaf          "A trainable value in the persistent region.";
            0x02 Fill         "fill"          0 Leaf        Fill   core grad node       fill          "Every element equal to the attribute's value.";
            0x10 Add          "add"           2 Elementwise None   core grad binary     add           "`a + b`.";
            0x11 Sub          "sub"           2 Elementwise None   core grad binary     sub           "`a - b`.";
            0x12 Mul          "mul"           2 Elementwise None   core grad binary     mul           "`a * b` (IEEE, except `0 · ±inf = ±0`: zero preservation).";
            0x13 Div          "div"           2 Elementwise None   core grad binary     div           "`a / b`.";
            0x14 Neg          "neg"           1 Elementwise None   core grad unary      neg           "`-x` (flips the sign bit, NaN included).";
            0x15 Tanh         "tanh"          1 Elementwise None   core grad unary_math tanh          "`libm::tanhf(x)`; `fast` profile: `math::fast::tanh`.";
            0x16 Relu         "relu"          1 Elementwise None   core grad unary      relu          "`x` where `x > 0`, NaN stays NaN, else `+0`.";
            0x17 Heaviside    "heaviside"     1 Elementwise None   core zero unary      heaviside     "`1` where `x > 0`, NaN stays NaN, else `0`: relu's derivative.";
            0x18 Exp          "exp"           1 Elementwise None   core grad unary_math exp           "`libm::expf(x)`; `fast` profile: micromath's `exp`.";
            0x19 Log          "log"           1 Elementwise None   core grad unary_math log           "`libm::logf(x)`; `fast` profile: micromath's `ln`.";
            0x1A Detach       "detach"        1 Elementwise None   core zero unary      detach        "`x`, with a reverse rule that contributes nothing.";
            0x1B Equal        "equal"         2 Elementwise None   core zero binary     equal         "`1` where `a == b`, else `0` (a mask; NaN is never equal).";
            0x1C Sqrt         "sqrt"          1 Elementwise None   core grad unary      sqrt          "`libm::sqrtf(x)` (correctly rounded, in both math profiles).";
            0x1D Sigmoid      "sigmoid"       1 Elementwise None   ext  grad unary_math sigmoid       "`1 / (1 + exp(-x))` with the profile's `exp`.";
            0x1E Softplus     "softplus"      1 Elementwise None   ext  grad unary_math softplus      "`log(1 + e^x)` with the profile's functions, `x` above 20 (PyTorch's threshold).";
            0x1F Abs          "abs"           1 Elementwise None   ext  grad unary      abs           "`|x|`.";
            0x20 MatMul       "matmul"        2 Structural  None   core grad node       matmul        "Matrix product `[m, k] x [k, n] -> [m, n]`; batched `[b, m, k] x [b, k, n] -> [b, m, n]`.";
            0x21 Transpose    "transpose"     1 Structural  None   core grad node       transpose     "Matrix transpose `[m, n] -> [n, m]`; batched `[b, m, n] -> [b, n, m]`.";
            0x22 Reshape      "reshape"       1 Structural  Target core grad node       reshape       "Same elements, same order, another shape.";
            0x23 Broadcast    "broadcast"     1 Structural  Target core grad node       broadcast     "NumPy broadcasting to the target shape.";
            0x24 SumTo        "sum_to"        1 Structural  Target core grad node       sum_to        "Sum down to a shape that broadcasts back (broadcast's adjoint).";
            0x25 MaxTo        "max_to"        1 Structural  Target core grad node       max_to        "Maximum down to a shape that broadcasts back.";
            0x26 OneHot       "one_hot"       1 Structural  Target core zero node       one_hot       "Labels `[batch]` (integers stored as `f32`) to `[batch, classes]`.";
            0x27 Slice        "slice"         1 Structural  Window ext  grad node       slice         "A window along one axis (attribute: `Window { axis, start, len }`).";
            0x28 Pad          "pad"           1 Structural  Window ext  grad node       pad           "Zero padding around `x` along one axis (slice's adjoint).";
            0x29 Concat       "concat"        2 Structural  Axis   ext  grad node       concat        "`a` then `b` along one axis (attribute: `Axis`).";
            0x2A SgdMatMul    "sgd_matmul"    3 Structural  Lr     core grad node       sgd_matmul    "SGD's update fused with its weight gradient: `w − lr · (aᵀ · b)`, `w: [m, n]`, `a: [k, m]`, `b: [k, n]`; in place over `w`.";
            0x2B MatMulTn     "matmul_tn"     2 Structural  None   core grad node       matmul_tn     "Matrix product with `a` read transposed: `aᵀ · b`, `[k, m] x [k, n] -> [m, n]`; batched `[b, k, m] x [b, k, n] -> [b, m, n]`.";
            0x2C MatMulNt     "matmul_nt"     2 Structural  None   core grad node       matmul_nt     "Matrix product with `b` read transposed: `a · bᵀ`, `[m, k] x [n, k] -> [m, n]`; batched `[b, m, k] x [b, n, k] -> [b, m, n]`.";
            0x30 Sign         "sign"          1 Elementwise None   ext  zero unary      sign          "`1`, `-1` or `0` by the sign of `x`; NaN stays NaN.";
            0x31 Pow          "pow"           1 Elementwise Pow    ext  grad node       pow           "`libm::powf(x, p)` (`fast`: `math::fast::powf`), `p` the attribute.";
            0x32 Maximum      "maximum"       2 Elementwise None   ext  grad binary     maximum       "The larger of `a` and `b` (ties: `a`; NaN wins).";
            0x33 Minimum      "minimum"       2 Elementwise None   ext  grad binary     minimum       "The smaller of `a` and `b` (ties: `a`; NaN wins).";
            0x34 Greater      "greater"       2 Elementwise None   ext  zero binary     greater       "`1` where `a > b`, else `0`.";
            0x35 GreaterEqual "greater_equal" 2 Elementwise None   core zero binary     greater_equal "`1` where `a >= b`, else `0`.";
            0x36 Select       "select"        3 Structural  None   ext  grad node       select        "`a` where `cond != 0`, else `b` (elementwise, never in place).";
            0x37 Uniform      "uniform"       2 Structural  Target core zero node       uniform       "Counter-based uniform `[0, 1)` draws of the target shape from a key and a counter.";
            0x38 Erf          "erf"           1 Elementwise None   ext  grad unary      erf           "`libm::erff(x)`, the error function (in both math profiles).";
            0x40 Conv         "conv"          2 Structural  Conv   ext  grad node       conv          "Convolution `x: [N, C_in, …] ⊛ w: [C_out, C_in / groups, …]`, 1-D or 2-D (attribute: `Conv`).";
            0x41 ConvTranspose "conv_transpose" 2 Structural Conv  ext  grad node       conv_transpose "Transposed convolution `g ⊛ᵀ w`: `conv`'s input gradient, `x`-shaped.";
            0x42 ConvWeightGrad "conv_weight_grad" 2 Structural Conv ext grad node    conv_weight_grad "Correlation of `x` with `g`: `conv`'s weight gradient, `w`-shaped.";
            0x50 MaxPool        "max_pool"          1 Structural  Pool   ext  grad node       max_pool          "The maximum of each window of `[N, C, L]` / `[N, C, H, W]` (attribute: `Pool`).";
            0x51 MaxPoolScatter "max_pool_scatter"  2 Structural  Pool   ext  grad node       max_pool_scatter  "`max_pool`'s adjoint: each window's `g` added at the window's first maximum of `x`.";
            0x52 MaxPoolGather  "max_pool_gather"   2 Structural  Pool   ext  grad node       max_pool_gather   "`h` read at each window's first maximum of `x` (`max_pool_scatter`'s adjoint).";
            0x53 AvgPool        "avg_pool"          1 Structural  Pool   ext  grad node       avg_pool          "The mean of each window (padding as zero; `count_include_pad` in the attribute).";
            0x54 AvgPoolBackward "avg_pool_backward" 1 Structural PoolTo ext  grad node       avg_pool_backward "`avg_pool`'s adjoint, back to the target shape (attribute: `PoolTo`).";
            0x55 Gather         "gather"            2 Structural  Axis   ext  grad node       gather            "ONNX `Gather` along an axis: indices stored as `f32`; an invalid index gives zeros.";
            0x56 ScatterAdd     "scatter_add"       2 Structural  AxisTo ext  grad node       scatter_add       "`gather`'s adjoint: `updates` added at their indices along an axis (duplicates accumulate).";
            0x57 ArgMax         "argmax"            1 Structural  Axis   ext  zero node       argmax            "The index (as `f32`) of the maximum along an axis, kept as extent 1 (ties: lowest; NaN wins).";
            0x58 ProdTo         "prod_to"           1 Structural  Target ext  grad node       prod_to           "Product down to a shape that broadcasts back (its rule divides by nothing).";
            0x59 CumprodExclusive "cumprod_exclusive" 1 Structural Scan ext  grad node       cumprod_exclusive "The product of the elements before each in its group (`1` for the first).";
            0x5A AffineScan     "affine_scan"       2 Structural  Scan   ext  grad node       affine_scan       "`z = b[p] + c[p] * z[p]` along each group from `0` (`prod_to`'s second order).";
            0x60 LogSumExp    "logsumexp"     1 Structural  Target ext  grad node       logsumexp     "`log(sum(exp(x)))` down to a shape that broadcasts back (a fully masked row: `-inf`).";
            0x61 BceWithLogits "bce_with_logits" 2 Structural None ext grad node       bce_with_logits "Binary cross-entropy of logits `x` against targets `z`, elementwise: `max(x, 0) − x·z + log1p(exp(−|x|))`.";
        }
    };
}
pub(crate) use opcode_table;

macro_rules! define_opcodes {
    ($( $code:literal $variant:ident $name:literal $arity:literal $class:ident $attr:ident
        $set:ident $rule:ident $kernel:ident $module:ident $doc:literal ; )*) => {
        /// One instruction of the vocabulary. The discriminant is the byte in the plan format.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Opcode {
            $( #[doc = $doc] $variant = $code, )*
        }

        // The tables below (`arity`, `in_core_set`) hold one entry per opcode byte: every
        // byte is below 128 and every arity fits two bits.
        const _: () = { $( assert!($code < 128 && $arity <= 3); )* };

        /// Each opcode's arity and core-set membership as the table states them, to check the
        /// packed tables against.
        #[cfg(test)]
        const TABLE_FACTS: &[(Opcode, usize, bool)] =
            &[ $( (Opcode::$variant, $arity, set_is_core!($set)), )* ];

        impl Opcode {
            /// Every opcode, in table order.
            pub const ALL: &'static [Opcode] = &[ $( Opcode::$variant, )* ];

            /// Checked decoding from the plan format's byte.
            pub const fn from_u8(byte: u8) -> Option<Opcode> {
                match byte {
                    $( $code => Some(Opcode::$variant), )*
                    _ => None,
                }
            }

            /// The byte this opcode is stored as.
            pub const fn to_u8(self) -> u8 {
                self as u8
            }

            /// The opcode's text name, as `describe` prints it and the plan format's table lists it.
            pub const fn name(self) -> &'static str {
                match self {
                    $( Opcode::$variant => $name, )*
                }
            }

            /// The number of arguments the opcode takes.
            pub const fn arity(self) -> usize {
                // Two bits per opcode byte (below 128) rather than the word a `match` would
                // compile to (the firmware's code budget).
                const ARITY: [u8; 32] = {
                    let mut a = [0u8; 32];
                    $( a[$code / 4] |= $arity << (2 * ($code % 4)); )*
                    a
                };
                let b = (self as u8 & 127) as usize;
                ((ARITY[b / 4] >> (2 * (b % 4))) & 3) as usize
            }

            /// The opcode's class.
            pub const fn class(self) -> OpClass {
                match self {
                    $( Opcode::$variant => OpClass::$class, )*
                }
            }

            /// The kind of attribute the opcode takes.
            pub const fn attr_kind(self) -> AttrKind {
                match self {
                    $( Opcode::$variant => AttrKind::$attr, )*
                }
            }

            /// True for the core set: the opcodes every build dispatches (an MLP, its losses,
            /// SGD, momentum, Adam and dropout speak only these). The others need the `all-ops`
            /// feature.
            pub const fn in_core_set(self) -> bool {
                // One bit per opcode byte (every byte is below 128): a load, a shift and a mask
                // rather than a jump over every opcode (the firmware's code budget).
                const CORE: [u8; 16] = {
                    let mut c = [0u8; 16];
                    $( c[$code / 8] |= (set_is_core!($set) as u8) << ($code % 8); )*
                    c
                };
                let b = (self as u8 & 127) as usize;
                (CORE[b / 8] >> (b % 8)) & 1 != 0
            }

            /// True for the opcodes whose reverse rule contributes nothing: `detach` (a
            /// stop-gradient), the piecewise-constant masks and the random draw. Their outputs
            /// do not depend differentiably on their arguments, which the ancestor mask uses.
            pub const fn zero_derivative(self) -> bool {
                match self {
                    $( Opcode::$variant => rule_is_zero!($rule), )*
                }
            }

            /// Looks an opcode up by its text name.
            pub fn from_name(name: &str) -> Option<Opcode> {
                match name {
                    $( $name => Some(Opcode::$variant), )*
                    _ => None,
                }
            }
        }
    };
}

macro_rules! set_is_core {
    (core) => {
        true
    };
    (ext) => {
        false
    };
}

macro_rules! rule_is_zero {
    (grad) => {
        false
    };
    (zero) => {
        true
    };
}

opcode_table!(define_opcodes);

impl Opcode {
    /// True when an instruction of this opcode may write its output over its argument at
    /// `position` (exactly that argument's range, the argument dying there; the format's
    /// in-place exception): any argument of an elementwise opcode, and `sgd_matmul`'s first,
    /// the weight it updates (each weight element is read once, right before it is written; its
    /// other arguments are read whole and must not meet the output).
    pub const fn writes_over_arg(self, position: usize) -> bool {
        match self.class() {
            OpClass::Elementwise => position < self.arity(),
            _ => matches!(self, Opcode::SgdMatMul) && position == 0,
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_round_trips_and_is_unique() {
        for &op in Opcode::ALL {
            assert_eq!(Opcode::from_u8(op.to_u8()), Some(op));
            assert_eq!(Opcode::from_name(op.name()), Some(op));
            assert!(op.arity() <= MAX_ARITY);
        }
        for &(op, arity, core) in TABLE_FACTS {
            assert_eq!(op.arity(), arity, "{op}");
            assert_eq!(op.in_core_set(), core, "{op}");
        }
        let decoded = (0..=255u8).filter_map(Opcode::from_u8).count();
        assert_eq!(decoded, Opcode::ALL.len());
    }
}
