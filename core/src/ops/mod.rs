//! One module per instruction: its shape rule, its reference kernel (the bits), its reverse rule
//! written against [`Recordable`], and its unit tests. This module dispatches over them.
//!
//! The reference kernels are plain, allocation-free functions over slices. Their arithmetic
//! order, stated in each kernel's doc comment, **is** the definition of the instruction's result:
//! the oracle, the planner and every runtime catalog entry reproduce those bits.

use core::fmt;

use crate::recordable::Recordable;
use crate::shape::ShapeError;
use crate::{Element, MathProfile, OpClass, Opcode, Shape, MAX_ARITY};

pub mod abs;
pub mod add;
pub mod broadcast;
pub mod concat;
pub mod detach;
pub mod div;
pub mod elementwise;
pub mod equal;
pub mod exp;
pub mod fill;
pub mod greater;
pub mod greater_equal;
pub mod heaviside;
pub mod leaf;
pub mod log;
pub mod matmul;
pub mod max_to;
pub mod maximum;
pub mod minimum;
pub mod mul;
pub mod neg;
pub mod one_hot;
pub mod pad;
pub mod pow;
pub mod relu;
pub mod reshape;
pub mod select;
pub mod sigmoid;
pub mod sign;
pub mod slice;
pub mod softplus;
pub mod sqrt;
pub mod sub;
pub mod sum_to;
pub mod tanh;
pub mod transpose;
pub mod uniform;

/// An instruction's attribute: a 32-bit word (the fill value's bit pattern) and, for the ops
/// that need one, the target shape (which is also the output shape).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Attr {
    /// The raw attribute word: for `fill` and `pow`, an `f32` bit pattern; for `slice` and `pad`,
    /// `axis << 28 | start`; for `concat`, the axis; 0 for every other opcode.
    pub bits: u32,
    /// The target shape for leaves, `fill`, `reshape`, `broadcast`, `sum_to`, `max_to`,
    /// `one_hot`, `slice`, `pad`, `uniform`; `None` for the rest.
    pub target: Option<Shape>,
}

impl Attr {
    /// No attribute.
    pub const NONE: Attr = Attr {
        bits: 0,
        target: None,
    };

    /// A target shape.
    pub fn target(shape: Shape) -> Attr {
        Attr {
            bits: 0,
            target: Some(shape),
        }
    }

    /// A fill value and its shape.
    pub fn fill(value: f32, shape: Shape) -> Attr {
        Attr {
            bits: value.to_bits(),
            target: Some(shape),
        }
    }

    /// Rebuilds the attribute of `op` from the plan format's word and the output shape.
    pub fn from_parts(op: Opcode, bits: u32, out: Shape) -> Attr {
        Attr {
            bits,
            target: if needs_target(op) { Some(out) } else { None },
        }
    }
}

/// True for the opcodes whose output shape is given by the attribute rather than inferred.
pub fn needs_target(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Input
            | Opcode::Parameter
            | Opcode::Fill
            | Opcode::Reshape
            | Opcode::Broadcast
            | Opcode::SumTo
            | Opcode::MaxTo
            | Opcode::OneHot
            | Opcode::Slice
            | Opcode::Pad
            | Opcode::Uniform
    )
}

/// True for the opcodes this build dispatches: every opcode with the `all-ops` feature; without
/// it, the core set an MLP, its losses, SGD, momentum, Adam and dropout speak.
pub fn in_vocabulary(op: Opcode) -> bool {
    cfg!(feature = "all-ops")
        || !matches!(
            op,
            Opcode::Sigmoid
                | Opcode::Softplus
                | Opcode::Abs
                | Opcode::Sign
                | Opcode::Pow
                | Opcode::Maximum
                | Opcode::Minimum
                | Opcode::Greater
                | Opcode::Select
                | Opcode::Slice
                | Opcode::Pad
                | Opcode::Concat
        )
}

/// True for the opcodes whose attribute word carries meaning (see [`Attr::bits`]); every other
/// opcode's attribute is 0.
pub fn uses_attr(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Fill | Opcode::Pow | Opcode::Slice | Opcode::Pad | Opcode::Concat
    )
}

/// Why an instruction cannot be applied to its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpError {
    /// The wrong number of arguments.
    Arity {
        /// The instruction.
        op: Opcode,
        /// Its arity.
        expected: usize,
        /// The number given.
        found: usize,
    },
    /// Two arguments whose shapes do not fit together.
    ShapeMismatch {
        /// The instruction.
        op: Opcode,
        /// The first argument's shape.
        lhs: Shape,
        /// The second argument's shape.
        rhs: Shape,
    },
    /// A target shape the argument cannot be brought to.
    BadTarget {
        /// The instruction.
        op: Opcode,
        /// The argument's shape.
        from: Shape,
        /// The target.
        to: Shape,
    },
    /// An instruction that needs a target shape was given none.
    MissingTarget {
        /// The instruction.
        op: Opcode,
    },
    /// A matrix instruction given an argument that is not of rank 2.
    NotMatrix {
        /// The instruction.
        op: Opcode,
        /// The argument's shape.
        shape: Shape,
    },
    /// A leaf (input, parameter) cannot be applied; it is made by the tape.
    Leaf {
        /// The instruction.
        op: Opcode,
    },
    /// A buffer whose length does not match its shape was handed to a kernel.
    BufferLength {
        /// The instruction.
        op: Opcode,
        /// The element count the shape requires.
        expected_elems: usize,
        /// The buffer's length.
        found_elems: usize,
    },
    /// A shape could not be built.
    Shape(ShapeError),
    /// An opcode this build leaves out (built without the `all-ops` feature).
    Unsupported {
        /// The instruction.
        op: Opcode,
    },
    /// A math profile this build leaves out (features `math-precise`, `math-fast`).
    MathProfile {
        /// The profile asked for.
        math: MathProfile,
    },
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpError::Arity {
                op,
                expected,
                found,
            } => {
                write!(f, "{op} takes {expected} arguments, found {found}")
            }
            OpError::ShapeMismatch { op, lhs, rhs } => {
                write!(f, "{op}: incompatible shapes {lhs} and {rhs}")
            }
            OpError::BadTarget { op, from, to } => {
                write!(f, "{op}: cannot bring shape {from} to {to}")
            }
            OpError::MissingTarget { op } => write!(f, "{op}: missing target shape"),
            OpError::NotMatrix { op, shape } => {
                write!(f, "{op}: expected a matrix, found shape {shape}")
            }
            OpError::Leaf { op } => write!(f, "{op} is a leaf and cannot be applied"),
            OpError::BufferLength {
                op,
                expected_elems,
                found_elems,
            } => write!(
                f,
                "{op}: buffer of {found_elems} elements where the shape needs {expected_elems}"
            ),
            OpError::Shape(e) => write!(f, "{e}"),
            OpError::Unsupported { op } => {
                write!(
                    f,
                    "{op} is not in this build's vocabulary (feature `all-ops`)"
                )
            }
            OpError::MathProfile { math } => {
                write!(
                    f,
                    "the {math} math profile is not in this build (feature `math-{math}`)"
                )
            }
        }
    }
}

impl core::error::Error for OpError {}

impl From<ShapeError> for OpError {
    fn from(e: ShapeError) -> Self {
        OpError::Shape(e)
    }
}

fn target_of(op: Opcode, attr: Attr) -> Result<Shape, OpError> {
    attr.target.ok_or(OpError::MissingTarget { op })
}

/// The output shape of `op` over arguments of `args` shapes: the shape rule. Pure; the tape,
/// the compute payload and the runtime's validator all call it.
///
/// # Errors
/// [`OpError`] naming what does not fit.
pub fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    if !in_vocabulary(op) {
        return Err(OpError::Unsupported { op });
    }
    if args.len() != op.arity() {
        return Err(OpError::Arity {
            op,
            expected: op.arity(),
            found: args.len(),
        });
    }
    match op.class() {
        OpClass::Leaf => target_of(op, attr),
        OpClass::Elementwise => {
            if let [a, b] = args {
                if a != b {
                    return Err(OpError::ShapeMismatch {
                        op,
                        lhs: *a,
                        rhs: *b,
                    });
                }
            }
            Ok(args[0])
        }
        OpClass::Structural => match op {
            Opcode::MatMul => matmul::infer(args[0], args[1]),
            Opcode::Transpose => transpose::infer(args[0]),
            Opcode::Reshape => reshape::infer(args[0], target_of(op, attr)?),
            Opcode::Broadcast => broadcast::infer(args[0], target_of(op, attr)?),
            Opcode::SumTo => sum_to::infer(op, args[0], target_of(op, attr)?),
            Opcode::MaxTo => sum_to::infer(op, args[0], target_of(op, attr)?),
            Opcode::OneHot => one_hot::infer(args[0], target_of(op, attr)?),
            #[cfg(feature = "all-ops")]
            Opcode::Select => same_shapes(op, args),
            #[cfg(feature = "all-ops")]
            Opcode::Slice => {
                let t = target_of(op, attr)?;
                slice::check_window(op, args[0], t, attr.bits)?;
                Ok(t)
            }
            #[cfg(feature = "all-ops")]
            Opcode::Pad => {
                let t = target_of(op, attr)?;
                slice::check_window(op, t, args[0], attr.bits)?;
                Ok(t)
            }
            #[cfg(feature = "all-ops")]
            Opcode::Concat => concat::infer(args[0], args[1], attr.bits as usize),
            Opcode::Uniform => {
                for a in args {
                    if a.elems() != 1 {
                        return Err(OpError::ShapeMismatch {
                            op,
                            lhs: args[0],
                            rhs: args[1],
                        });
                    }
                }
                target_of(op, attr)
            }
            _ => Err(OpError::Leaf { op }),
        },
    }
}

/// True for the opcodes whose reverse rule contributes nothing: `detach` (a stop-gradient) and
/// the piecewise-constant `heaviside`, `equal`, `one_hot`, `sign`, `greater`, `greater_equal`,
/// and the random draw `uniform`. Their outputs do not depend
/// differentiably on their arguments, which the ancestor mask uses.
pub fn zero_derivative(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::Detach
            | Opcode::Heaviside
            | Opcode::Equal
            | Opcode::OneHot
            | Opcode::Sign
            | Opcode::Greater
            | Opcode::GreaterEqual
            | Opcode::Uniform
    )
}

#[cfg(feature = "all-ops")]
fn same_shapes(op: Opcode, args: &[Shape]) -> Result<Shape, OpError> {
    let first = args[0];
    for a in &args[1..] {
        if *a != first {
            return Err(OpError::ShapeMismatch {
                op,
                lhs: first,
                rhs: *a,
            });
        }
    }
    Ok(first)
}

/// The `precise` or the `fast` kernel by `math`; `return None` for a profile this build leaves
/// out, so that a firmware built with one profile links none of the other's code.
macro_rules! by_math {
    ($math:expr, $precise:expr, $fast:expr) => {
        match $math {
            #[cfg(feature = "math-precise")]
            MathProfile::Precise => $precise,
            #[cfg(feature = "math-fast")]
            MathProfile::Fast => $fast,
            #[allow(unreachable_patterns)]
            _ => return None,
        }
    };
}

/// The scalar function of a unary elementwise opcode under the math profile `math` (`pow` is
/// not one: its exponent is an attribute; see [`eval_in_place_unary`]). `None` for another
/// opcode, or a transcendental under a profile this build leaves out.
pub fn unary_fn(op: Opcode, math: MathProfile) -> Option<fn(f32) -> f32> {
    unary_fn_of::<f32>(op, math)
}

/// [`unary_fn`] for any element.
pub fn unary_fn_of<E: Element>(op: Opcode, math: MathProfile) -> Option<fn(E) -> E> {
    Some(match op {
        Opcode::Neg => neg::scalar::<E>,
        Opcode::Tanh => by_math!(math, tanh::scalar::<E>, tanh::scalar_fast::<E>),
        Opcode::Relu => relu::scalar::<E>,
        Opcode::Heaviside => heaviside::scalar::<E>,
        Opcode::Exp => by_math!(math, exp::scalar::<E>, exp::scalar_fast::<E>),
        Opcode::Log => by_math!(math, log::scalar::<E>, log::scalar_fast::<E>),
        Opcode::Detach => detach::scalar::<E>,
        Opcode::Sqrt => sqrt::scalar::<E>,
        #[cfg(feature = "all-ops")]
        Opcode::Sigmoid => by_math!(math, sigmoid::scalar::<E>, sigmoid::scalar_fast::<E>),
        #[cfg(feature = "all-ops")]
        Opcode::Softplus => by_math!(math, softplus::scalar::<E>, softplus::scalar_fast::<E>),
        #[cfg(feature = "all-ops")]
        Opcode::Abs => abs::scalar::<E>,
        #[cfg(feature = "all-ops")]
        Opcode::Sign => sign::scalar::<E>,
        _ => return None,
    })
}

/// `pow`'s scalar function (`x^p`) under `math`; `None` for a profile this build leaves out.
#[allow(unreachable_code)] // a build with neither profile
pub fn pow_fn_of<E: Element>(math: MathProfile) -> Option<fn(E, E) -> E> {
    Some(by_math!(math, pow::scalar::<E>, pow::scalar_fast::<E>))
}

/// The scalar function of a binary elementwise opcode (none depends on the math profile).
pub fn binary_fn(op: Opcode) -> Option<fn(f32, f32) -> f32> {
    binary_fn_of::<f32>(op)
}

/// [`binary_fn`] for any element.
pub fn binary_fn_of<E: Element>(op: Opcode) -> Option<fn(E, E) -> E> {
    Some(match op {
        Opcode::Add => add::scalar::<E>,
        Opcode::Sub => sub::scalar::<E>,
        Opcode::Mul => mul::scalar::<E>,
        Opcode::Div => div::scalar::<E>,
        Opcode::Equal => equal::scalar::<E>,
        #[cfg(feature = "all-ops")]
        Opcode::Maximum => maximum::scalar::<E>,
        #[cfg(feature = "all-ops")]
        Opcode::Minimum => minimum::scalar::<E>,
        #[cfg(feature = "all-ops")]
        Opcode::Greater => greater::scalar::<E>,
        Opcode::GreaterEqual => greater_equal::scalar::<E>,
        _ => return None,
    })
}

fn check_len<E>(op: Opcode, buf: &[E], shape: Shape) -> Result<(), OpError> {
    if buf.len() != shape.elems() {
        return Err(OpError::BufferLength {
            op,
            expected_elems: shape.elems(),
            found_elems: buf.len(),
        });
    }
    Ok(())
}

/// Runs the reference kernel of `op` under the math profile `math`: `out` receives the result
/// of `op` over `args`.
///
/// # Shapes
/// `args[i].len() == arg_shapes[i].elems()`, `out.len() == infer(op, attr, arg_shapes).elems()`.
///
/// # Errors
/// [`OpError`] when the shapes do not satisfy the shape rule or a buffer's length does not
/// match its shape; `Input` and `Parameter` are leaves and answer [`OpError::Leaf`]; a profile
/// this build leaves out answers [`OpError::MathProfile`].
pub fn eval<E: Element>(
    op: Opcode,
    attr: Attr,
    math: MathProfile,
    args: &[&[E]],
    arg_shapes: &[Shape],
    out: &mut [E],
) -> Result<(), OpError> {
    if args.len() != arg_shapes.len() {
        return Err(OpError::Arity {
            op,
            expected: op.arity(),
            found: args.len(),
        });
    }
    let out_shape = infer(op, attr, arg_shapes)?;
    if !math.in_build() {
        return Err(OpError::MathProfile { math });
    }
    for (a, s) in args.iter().zip(arg_shapes) {
        check_len(op, a, *s)?;
    }
    check_len(op, out, out_shape)?;
    if let Some(f) = unary_fn_of::<E>(op, math) {
        elementwise::unary(f, args[0], out);
        return Ok(());
    }
    if let Some(f) = binary_fn_of::<E>(op) {
        elementwise::binary(f, args[0], args[1], out);
        return Ok(());
    }
    match op {
        Opcode::Input | Opcode::Parameter => return Err(OpError::Leaf { op }),
        Opcode::Fill => fill::kernel(f32::from_bits(attr.bits), out),
        #[cfg(feature = "all-ops")]
        Opcode::Pow => {
            let f = pow_fn_of::<E>(math).ok_or(OpError::MathProfile { math })?;
            let p = E::from_f32(f32::from_bits(attr.bits));
            for (o, &x) in out.iter_mut().zip(args[0]) {
                *o = f(x, p);
            }
        }
        #[cfg(feature = "all-ops")]
        Opcode::Select => select::kernel(args[0], args[1], args[2], out),
        Opcode::Uniform => uniform::kernel(args[0], args[1], out),
        #[cfg(feature = "all-ops")]
        Opcode::Slice => slice::kernel(args[0], arg_shapes[0], out, out_shape, attr.bits),
        #[cfg(feature = "all-ops")]
        Opcode::Pad => pad::kernel(args[0], arg_shapes[0], out, out_shape, attr.bits),
        #[cfg(feature = "all-ops")]
        Opcode::Concat => concat::kernel(
            args[0],
            arg_shapes[0],
            args[1],
            arg_shapes[1],
            out,
            attr.bits as usize,
        ),
        Opcode::MatMul => {
            let [m, k, _, _] = arg_shapes[0].dims();
            let n = arg_shapes[1].dim(1).unwrap_or(0);
            matmul::kernel(args[0], args[1], out, m, k, n);
        }
        Opcode::Transpose => {
            let [m, n, _, _] = arg_shapes[0].dims();
            transpose::kernel(args[0], out, m, n);
        }
        Opcode::Reshape => reshape::kernel(args[0], out),
        Opcode::Broadcast => broadcast::kernel(args[0], arg_shapes[0], out, out_shape),
        Opcode::SumTo => sum_to::kernel(args[0], arg_shapes[0], out, out_shape),
        Opcode::MaxTo => max_to::kernel(args[0], arg_shapes[0], out, out_shape),
        Opcode::OneHot => one_hot::kernel(args[0], out, out_shape.dim(1).unwrap_or(0)),
        _ => return Err(OpError::Leaf { op }),
    }
    Ok(())
}

/// Runs a one-argument elementwise opcode in place over `buf` (the runtime's in-place path)
/// under the math profile `math`: the same bits as [`eval`] out of place.
///
/// # Errors
/// [`OpError::Leaf`] for an opcode that is not one-argument elementwise;
/// [`OpError::MathProfile`] for a profile this build leaves out.
pub fn eval_in_place_unary(
    op: Opcode,
    attr: Attr,
    math: MathProfile,
    buf: &mut [f32],
) -> Result<(), OpError> {
    if !math.in_build() {
        return Err(OpError::MathProfile { math });
    }
    if let Some(f) = unary_fn(op, math) {
        elementwise::unary_in_place(f, buf);
        return Ok(());
    }
    if cfg!(feature = "all-ops") && op == Opcode::Pow {
        let f = pow_fn_of::<f32>(math).ok_or(OpError::MathProfile { math })?;
        let p = f32::from_bits(attr.bits);
        for o in buf.iter_mut() {
            *o = f(*o, p);
        }
        return Ok(());
    }
    Err(OpError::Leaf { op })
}

/// What a reverse rule is given: the node's arguments, its output, the cotangent of its output,
/// and which arguments want a contribution.
pub struct VjpArgs<'a, V> {
    /// The arguments, by position.
    pub args: &'a [&'a V],
    /// The node's own (forward) value.
    pub out: &'a V,
    /// The cotangent of the node's output.
    pub cotangent: &'a V,
    /// `wants[i]`: argument `i` lies on a differentiated path and needs a contribution.
    pub wants: [bool; MAX_ARITY],
    /// The node's attribute word.
    pub attr_bits: u32,
}

/// One contribution per argument position (`None`: none owed or none wanted).
pub type Contributions<V> = [Option<V>; MAX_ARITY];

/// Runs the reverse rule of `op` over the payload `r`.
///
/// # Errors
/// Whatever the payload's operations answer.
pub fn vjp<R: Recordable>(
    op: Opcode,
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    match op {
        Opcode::Input | Opcode::Parameter | Opcode::Fill => Ok([None, None, None]),
        Opcode::Add => add::vjp(r, v),
        Opcode::Sub => sub::vjp(r, v),
        Opcode::Mul => mul::vjp(r, v),
        Opcode::Div => div::vjp(r, v),
        Opcode::Neg => neg::vjp(r, v),
        Opcode::Tanh => tanh::vjp(r, v),
        Opcode::Relu => relu::vjp(r, v),
        Opcode::Heaviside => heaviside::vjp(r, v),
        Opcode::Exp => exp::vjp(r, v),
        Opcode::Log => log::vjp(r, v),
        Opcode::Detach => detach::vjp(r, v),
        Opcode::Equal => equal::vjp(r, v),
        Opcode::MatMul => matmul::vjp(r, v),
        Opcode::Transpose => transpose::vjp(r, v),
        Opcode::Reshape => reshape::vjp(r, v),
        Opcode::Broadcast => broadcast::vjp(r, v),
        Opcode::SumTo => sum_to::vjp(r, v),
        Opcode::MaxTo => max_to::vjp(r, v),
        Opcode::OneHot => one_hot::vjp(r, v),
        Opcode::Sqrt => sqrt::vjp(r, v),
        Opcode::Sigmoid => sigmoid::vjp(r, v),
        Opcode::Softplus => softplus::vjp(r, v),
        Opcode::Abs => abs::vjp(r, v),
        Opcode::Sign => sign::vjp(r, v),
        Opcode::Pow => pow::vjp(r, f32::from_bits(v.attr_bits), v),
        Opcode::Maximum => maximum::vjp(r, v),
        Opcode::Minimum => minimum::vjp(r, v),
        Opcode::Greater => greater::vjp(r, v),
        Opcode::GreaterEqual => greater_equal::vjp(r, v),
        Opcode::Select => select::vjp(r, v),
        Opcode::Slice => slice::vjp(r, v.attr_bits, v),
        Opcode::Pad => pad::vjp(r, v.attr_bits, v),
        Opcode::Concat => concat::vjp(r, v.attr_bits as usize, v),
        Opcode::Uniform => uniform::vjp(r, v),
    }
}

/// Helper for rules: computes a contribution only when it is wanted.
pub(crate) fn want<V, E>(wanted: bool, f: impl FnOnce() -> Result<V, E>) -> Result<Option<V>, E> {
    if wanted {
        f().map(Some)
    } else {
        Ok(None)
    }
}
