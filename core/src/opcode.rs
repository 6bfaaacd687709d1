//! The vocabulary: one table of opcodes. The enum, its checked decoding from a byte, the text
//! names, the arities and the op classes all derive from the table below, and
//! `docs/plan-format.md` lists the same rows (a test checks the document against it).

use core::fmt;

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

macro_rules! opcodes {
    ($( $code:literal $variant:ident $name:literal $arity:literal $class:ident $doc:literal ; )*) => {
        /// One instruction of the vocabulary. The discriminant is the byte in the plan format.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Opcode {
            $( #[doc = $doc] $variant = $code, )*
        }

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
                match self {
                    $( Opcode::$variant => $arity, )*
                }
            }

            /// The opcode's class.
            pub const fn class(self) -> OpClass {
                match self {
                    $( Opcode::$variant => OpClass::$class, )*
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

opcodes! {
    0x00 Input      "input"      0 Leaf        "A value set by the caller before an entry runs.";
    0x01 Parameter  "parameter"  0 Leaf        "A trainable value in the persistent region.";
    0x02 Fill       "fill"       0 Leaf        "Every element equal to the attribute (an `f32` bit pattern).";
    0x10 Add        "add"        2 Elementwise "`a + b`.";
    0x11 Sub        "sub"        2 Elementwise "`a - b`.";
    0x12 Mul        "mul"        2 Elementwise "`a * b`.";
    0x13 Div        "div"        2 Elementwise "`a / b`.";
    0x14 Neg        "neg"        1 Elementwise "`-x` (flips the sign bit, NaN included).";
    0x15 Tanh       "tanh"       1 Elementwise "`libm::tanhf(x)`; `fast` profile: `math::fast::tanh`.";
    0x16 Relu       "relu"       1 Elementwise "`x` where `x > 0`, NaN stays NaN, else `+0`.";
    0x17 Heaviside  "heaviside"  1 Elementwise "`1` where `x > 0`, NaN stays NaN, else `0`: relu's derivative.";
    0x18 Exp        "exp"        1 Elementwise "`libm::expf(x)`; `fast` profile: micromath's `exp`.";
    0x19 Log        "log"        1 Elementwise "`libm::logf(x)`; `fast` profile: micromath's `ln`.";
    0x1A Detach     "detach"     1 Elementwise "`x`, with a reverse rule that contributes nothing.";
    0x1B Equal      "equal"      2 Elementwise "`1` where `a == b`, else `0` (a mask; NaN is never equal).";
    0x1C Sqrt       "sqrt"       1 Elementwise "`libm::sqrtf(x)` (correctly rounded, in both math profiles).";
    0x1D Sigmoid    "sigmoid"    1 Elementwise "`1 / (1 + exp(-x))` with the profile's `exp`.";
    0x1E Softplus   "softplus"   1 Elementwise "`log(1 + e^x)` with the profile's functions, `x` above 20 (PyTorch's threshold).";
    0x1F Abs        "abs"        1 Elementwise "`|x|`.";
    0x20 MatMul     "matmul"     2 Structural  "Matrix product `[m, k] x [k, n] -> [m, n]`.";
    0x21 Transpose  "transpose"  1 Structural  "Matrix transpose `[m, n] -> [n, m]`.";
    0x22 Reshape    "reshape"    1 Structural  "Same elements, same order, another shape.";
    0x23 Broadcast  "broadcast"  1 Structural  "NumPy broadcasting to the target shape.";
    0x24 SumTo      "sum_to"     1 Structural  "Sum down to a shape that broadcasts back (broadcast's adjoint).";
    0x25 MaxTo      "max_to"     1 Structural  "Maximum down to a shape that broadcasts back.";
    0x26 OneHot     "one_hot"    1 Structural  "Labels `[batch]` (integers stored as `f32`) to `[batch, classes]`.";
    0x27 Slice      "slice"      1 Structural  "A window along one axis (attribute: `axis << 28 | start`).";
    0x28 Pad        "pad"        1 Structural  "Zero padding around `x` along one axis (slice's adjoint).";
    0x29 Concat     "concat"     2 Structural  "`a` then `b` along one axis (attribute: the axis).";
    0x30 Sign       "sign"       1 Elementwise "`1`, `-1` or `0` by the sign of `x`; NaN stays NaN.";
    0x31 Pow        "pow"        1 Elementwise "`libm::powf(x, p)` (`fast`: `math::fast::powf`), `p` the attribute's `f32` bits.";
    0x32 Maximum    "maximum"    2 Elementwise "The larger of `a` and `b` (ties: `a`; NaN wins).";
    0x33 Minimum    "minimum"    2 Elementwise "The smaller of `a` and `b` (ties: `a`; NaN wins).";
    0x34 Greater    "greater"    2 Elementwise "`1` where `a > b`, else `0`.";
    0x35 GreaterEqual "greater_equal" 2 Elementwise "`1` where `a >= b`, else `0`.";
    0x36 Select     "select"     3 Structural  "`a` where `cond != 0`, else `b` (elementwise, never in place).";
    0x37 Uniform    "uniform"    2 Structural  "Counter-based uniform `[0, 1)` draws of the target shape from a key and a counter.";
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
        let decoded = (0..=255u8).filter_map(Opcode::from_u8).count();
        assert_eq!(decoded, Opcode::ALL.len());
    }
}
