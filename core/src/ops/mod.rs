//! One module per instruction: its shape rule, its reference kernel (the bits), its reverse rule
//! written against [`Recordable`], and its unit tests. This module dispatches over them.
//!
//! The reference kernels are plain, allocation-free functions over slices. Their arithmetic
//! order, stated in each kernel's doc comment, **is** the definition of the instruction's result:
//! the oracle, the planner and every runtime catalog entry reproduce those bits.

use core::fmt;

use crate::recordable::Recordable;
use crate::shape::ShapeError;
use crate::{ArithProfile, BuildOps, Element, MathProfile, OpSet, Opcode, Ops, Shape, MAX_ARITY};

pub mod abs;
pub mod add;
pub mod affine_scan;
pub mod argmax;
pub mod avg_pool;
pub mod avg_pool_backward;
pub mod bce_with_logits;
pub mod broadcast;
pub mod concat;
pub mod conv;
pub mod conv_transpose;
pub mod conv_weight_grad;
pub mod cumprod_exclusive;
pub mod detach;
pub mod div;
pub mod elementwise;
pub mod equal;
pub mod erf;
pub mod exp;
pub mod fill;
pub mod gather;
pub mod greater;
pub mod greater_equal;
pub mod heaviside;
pub mod leaf;
pub mod log;
pub mod logsumexp;
pub mod matmul;
pub mod matmul_nt;
pub mod matmul_tn;
pub mod max_pool;
pub mod max_pool_gather;
pub mod max_pool_scatter;
pub mod max_to;
pub mod maximum;
pub mod minimum;
pub mod mul;
pub mod neg;
pub mod one_hot;
pub mod pad;
pub mod pool;
pub mod pow;
pub mod prod_to;
pub mod relu;
pub mod reshape;
pub mod scan;
pub mod scatter_add;
pub mod select;
pub mod sgd_matmul;
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

pub use crate::attr::{Attr, AttrKind, ConvAttr};

/// True for the opcodes whose output shape is given by the attribute (a target or a fill)
/// rather than inferred.
pub fn needs_target(op: Opcode) -> bool {
    matches!(op.attr_kind(), AttrKind::Target | AttrKind::Fill)
}

/// True for the opcodes this build dispatches: every opcode with the `all-ops` feature; without
/// it, the core set ([`Opcode::in_core_set`]).
pub fn in_vocabulary(op: Opcode) -> bool {
    cfg!(feature = "all-ops") || op.in_core_set()
}

/// True for the opcodes a dispatch over the op set `O` runs: `O`'s opcodes in this build's
/// vocabulary (see [`crate::Ops`], the selective build).
pub fn in_vocabulary_of<O: Ops>(op: Opcode) -> bool {
    in_vocabulary(op) && O::SET.contains(op)
}

/// True for the opcodes whose reverse rule contributes nothing (the table's `rule` column; see
/// [`Opcode::zero_derivative`]).
pub fn zero_derivative(op: Opcode) -> bool {
    op.zero_derivative()
}

/// True for the opcodes whose attribute carries a value besides a shape (`fill`, `pow`,
/// `slice`, `pad`, `concat`): the ones a plan's instruction record stores an attribute for.
pub fn uses_attr(op: Opcode) -> bool {
    !matches!(op.attr_kind(), AttrKind::None | AttrKind::Target)
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
    /// An attribute of another kind than the opcode takes.
    BadAttr {
        /// The instruction.
        op: Opcode,
        /// The kind given.
        found: AttrKind,
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
    /// An arithmetic profile this build leaves out (feature `arith-fma`).
    ArithProfile {
        /// The profile asked for.
        arith: ArithProfile,
    },
    /// A convolution whose attribute does not fit its arguments (see [`conv::ConvError`]).
    Conv {
        /// The instruction.
        op: Opcode,
        /// What does not fit.
        error: conv::ConvError,
        /// The first argument's shape.
        lhs: Shape,
        /// The second argument's shape.
        rhs: Shape,
    },
    /// A pooling window that does not fit its tensor (see [`crate::PoolWindow`]): a rank other
    /// than 3 or 4, a zero kernel, stride or dilation, a window larger than the padded input
    /// or holding padding only, a 1-D tensor with a 2-D window, `count_include_pad` on max
    /// pooling.
    BadPool {
        /// The instruction.
        op: Opcode,
        /// The pooled tensor's shape (the input of the forward pooling).
        shape: Shape,
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
            OpError::BadAttr { op, found } => {
                write!(
                    f,
                    "{op} takes a {} attribute, found {}",
                    op.attr_kind().name(),
                    found.name()
                )
            }
            OpError::Shape(e) => write!(f, "{e}"),
            OpError::Unsupported { op } => {
                write!(
                    f,
                    "{op} is not in this build's vocabulary (feature `all-ops`, or the \
                     selective build's op set)"
                )
            }
            OpError::MathProfile { math } => {
                write!(
                    f,
                    "the {math} math profile is not in this build (feature `math-{math}`)"
                )
            }
            OpError::ArithProfile { arith } => {
                write!(
                    f,
                    "the {arith} arithmetic profile is not in this build (feature `arith-{arith}`)"
                )
            }
            // A build without `all-ops` never makes this error (its shape rule refuses the
            // opcode first): it links none of the convolution's messages.
            OpError::Conv { op, .. } if !cfg!(feature = "all-ops") => {
                write!(f, "{op}: bad attribute")
            }
            OpError::Conv {
                op,
                error,
                lhs,
                rhs,
            } => write!(f, "{op} over {lhs} and {rhs}: {error}"),
            OpError::BadPool { op, shape } => {
                write!(f, "{op}: the pooling window does not fit shape {shape}")
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

/// The target shape an attribute gives (checked against the opcode's kind by [`infer`]).
#[inline(never)]
pub(crate) fn target_of(op: Opcode, attr: Attr) -> Result<Shape, OpError> {
    attr.target_shape().ok_or(OpError::MissingTarget { op })
}

/// The shape rule of the elementwise opcodes: every argument of one shape, the output of that
/// shape.
pub(crate) fn same_shapes(op: Opcode, args: &[Shape]) -> Result<Shape, OpError> {
    let first = nth(args, 0);
    match args.iter().find(|a| **a != first) {
        Some(other) => Err(OpError::ShapeMismatch {
            op,
            lhs: first,
            rhs: *other,
        }),
        None => Ok(first),
    }
}

/// The output shape of `op` over arguments of `args` shapes: the shape rule. Pure; the tape,
/// the compute payload and the runtime's validator all call it.
///
/// # Errors
/// [`OpError`] naming what does not fit: an opcode outside this build's vocabulary, the wrong
/// number of arguments, an attribute of another kind than the opcode takes, or the opcode's own
/// shape rule.
pub fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    infer_in::<BuildOps>(op, attr, args)
}

/// [`infer`] in the selective build over the op set `O` (see [`crate::Ops`]): only `O`'s shape
/// rules are linked.
///
/// # Errors
/// As [`infer`]; [`OpError::Unsupported`] for an opcode outside `O`.
pub fn infer_in<O: Ops>(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    if !in_vocabulary_of::<O>(op) {
        return Err(OpError::Unsupported { op });
    }
    if args.len() != op.arity() {
        return Err(OpError::Arity {
            op,
            expected: op.arity(),
            found: args.len(),
        });
    }
    if attr.kind() != op.attr_kind() {
        return Err(OpError::BadAttr {
            op,
            found: attr.kind(),
        });
    }
    infer_by_table::<O>(op, attr, args)
}

/// The work of one instruction, in element operations: the cost model of a plan's work cap
/// (the runtime's `Limits::max_work_per_entry`, `docs/threat-model.md`). A matrix product
/// `[m, k] x [k, n]` counts `m·k·n` (batched `b·m·k·n`); `conv`, `conv_transpose` and
/// `conv_weight_grad` count the elements of their arguments and output plus their
/// multiply-accumulates (`y`'s elements times `C_in/groups · K_h · K_w`); a pooling instruction
/// its windows times the spatial elements of one input plane (an upper bound of the taps a
/// window holds: the shapes do not say the kernel); `logsumexp` two passes over its argument;
/// every other instruction the elements of its arguments and its output. The count comes from
/// the shapes alone (the validator calls this before anything runs, without decoding
/// attributes). Saturates at `u64::MAX`; never fails (an argument missing from `args` counts
/// as empty).
///
/// # Shapes
/// `args`: the argument shapes (the first `op.arity()` are used); `out`: the output shape.
pub fn work(op: Opcode, args: &[Shape], out: Shape) -> u64 {
    let elems = |s: Shape| s.elems() as u64;
    let touched = || {
        args.iter()
            .take(op.arity())
            .fold(elems(out), |acc, &a| acc.saturating_add(elems(a)))
    };
    // A convolution's multiply-accumulates: `y`'s elements times `w`'s per output channel
    // (`C_in/groups · K_h · K_w`), `y` and `w` by position in each of the three.
    let macs = |y: Shape, w: Shape| {
        let per_channel = elems(w)
            .checked_div(w.dim(0).unwrap_or(0) as u64)
            .unwrap_or(0);
        elems(y).saturating_mul(per_channel)
    };
    // The spatial elements of one plane of a channels-first tensor (`[N, C, ..]`): the most
    // real taps a pooling window can hold, whatever its attribute.
    let plane = |s: Shape| {
        s.dims()
            .get(2..)
            .map_or(1, |d| d.iter().product::<usize>() as u64)
    };
    let arg = |i: usize| nth(args, i);
    match op {
        Opcode::MatMul | Opcode::MatMulNt => {
            // The inner extent: the last of `a` (`[m, k]` or `[b, m, k]`).
            let a = arg(0);
            let k = a.dim(a.rank().saturating_sub(1)).unwrap_or(0) as u64;
            elems(out).saturating_mul(k.max(1))
        }
        // The inner extent: `a`'s second to last (`[k, m]` or `[b, k, m]`).
        Opcode::MatMulTn => {
            let a = arg(0);
            let k = a.dim(a.rank().saturating_sub(2)).unwrap_or(0) as u64;
            elems(out).saturating_mul(k.max(1))
        }
        // A dot product over the batch `k` (the first extent of `a`) per element of `w`.
        Opcode::SgdMatMul => {
            let k = arg(1).dim(0).unwrap_or(0) as u64;
            elems(out)
                .saturating_mul(k.max(1))
                .saturating_add(elems(out))
        }
        // A window visits at most one plane of its input: an upper bound from the shapes
        // (the real count is the kernel's taps per window).
        Opcode::MaxPool | Opcode::AvgPool | Opcode::MaxPoolGather => elems(out)
            .saturating_mul(plane(arg(0)).max(1))
            .saturating_add(elems(arg(0))),
        Opcode::MaxPoolScatter => elems(arg(1))
            .saturating_mul(plane(arg(0)).max(1))
            .saturating_add(elems(out)),
        Opcode::AvgPoolBackward => elems(arg(0))
            .saturating_mul(plane(out).max(1))
            .saturating_add(elems(out)),
        // Two passes over its argument (the maximum, then the sum of exponentials).
        Opcode::LogSumExp => {
            let x = args.first().map_or(0, |&a| elems(a));
            elems(out).saturating_add(x.saturating_mul(2))
        }
        // (A build without `all-ops` refuses these at their shape rule: no count to link.)
        Opcode::Conv if cfg!(feature = "all-ops") => {
            touched().saturating_add(macs(out, nth(args, 1)))
        }
        Opcode::ConvTranspose if cfg!(feature = "all-ops") => {
            touched().saturating_add(macs(nth(args, 0), nth(args, 1)))
        }
        Opcode::ConvWeightGrad if cfg!(feature = "all-ops") => {
            touched().saturating_add(macs(nth(args, 1), out))
        }
        _ => touched(),
    }
}

/// What a `node` kernel (see the opcode table) is given by [`eval`]: lengths and shapes are
/// checked, `out_shape` is the shape rule's answer.
pub(crate) struct Kernel<'a, E> {
    pub(crate) op: Opcode,
    pub(crate) attr: Attr,
    pub(crate) math: MathProfile,
    pub(crate) arith: ArithProfile,
    pub(crate) args: &'a [&'a [E]],
    pub(crate) shapes: &'a [Shape],
    pub(crate) out: &'a mut [E],
    pub(crate) out_shape: Shape,
}

impl<'a, E: Copy> Kernel<'a, E> {
    /// Argument `i` (empty past the arity: [`eval`] checked it).
    #[inline(never)]
    pub(crate) fn arg(&self, i: usize) -> &'a [E] {
        self.args.get(i).copied().unwrap_or(&[])
    }

    /// Argument `i`'s shape.
    #[inline(never)]
    pub(crate) fn shape(&self, i: usize) -> Shape {
        nth(self.shapes, i)
    }
}

/// Argument shape `i` (a scalar past the arity, which [`infer`] checked first): no panic path.
#[inline(never)]
pub(crate) fn nth(args: &[Shape], i: usize) -> Shape {
    args.get(i).copied().unwrap_or(Shape::SCALAR)
}

/// `$e` in a build whose vocabulary and op set `$o` (see [`crate::Ops`]) carry the opcode
/// `$v`, `$otherwise` in one that leaves it out (a constant condition: a firmware built without
/// `all-ops`, or a selective build without the opcode, does not link the kernel).
macro_rules! gate {
    ($o:ident, $v:ident, $e:expr, $otherwise:expr) => {
        if const {
            OpSet::BUILD
                .intersection(<$o as Ops>::SET)
                .contains(Opcode::$v)
        } {
            $e
        } else {
            $otherwise
        }
    };
}

/// The `precise` or the `fast` kernel by `math`; `None` for a profile this build leaves out, so
/// that a firmware built with one profile links none of the other's code.
macro_rules! by_math {
    ($math:expr, $precise:expr, $fast:expr) => {
        match $math {
            #[cfg(feature = "math-precise")]
            MathProfile::Precise => Some($precise),
            #[cfg(feature = "math-fast")]
            MathProfile::Fast => Some($fast),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    };
}

/// `return`s the scalar function when `op` is the row's opcode; nothing for a row of another
/// kernel kind or (without `all-ops`) of the ext set. An `if` chain over the matching rows only,
/// not a `match` over every opcode: the latter compiles to a table of one function pointer per
/// opcode byte, which costs the firmware more than the few compares.
macro_rules! unary_of {
    (unary, $o:ident, $v:ident, $m:ident, $e:ty, $op:expr, $math:expr) => {
        if gate!($o, $v, $op == Opcode::$v, false) {
            return Some($m::scalar::<$e> as fn($e) -> $e);
        }
    };
    (unary_math, $o:ident, $v:ident, $m:ident, $e:ty, $op:expr, $math:expr) => {
        if gate!($o, $v, $op == Opcode::$v, false) {
            return by_math!(
                $math,
                $m::scalar::<$e> as fn($e) -> $e,
                $m::scalar_fast::<$e> as fn($e) -> $e
            );
        }
    };
    ($other:ident, $o:ident, $v:ident, $m:ident, $e:ty, $op:expr, $math:expr) => {};
}

/// [`unary_of`] for the binary rows.
macro_rules! binary_of {
    (binary, $o:ident, $v:ident, $m:ident, $e:ty, $op:expr) => {
        if gate!($o, $v, $op == Opcode::$v, false) {
            return Some($m::scalar::<$e> as fn($e, $e) -> $e);
        }
    };
    ($other:ident, $o:ident, $v:ident, $m:ident, $e:ty, $op:expr) => {};
}

/// `return`s the module's shape rule when `op` is the row's opcode, for a `node` row in this
/// build's vocabulary; nothing for an elementwise row (the fallthrough after the chain).
macro_rules! infer_of {
    (node, $o:ident, $v:ident, $m:ident, $op:expr, $attr:expr, $args:expr) => {
        if gate!($o, $v, $op == Opcode::$v, false) {
            return $m::infer($op, $attr, $args);
        }
    };
    ($elementwise:ident, $o:ident, $v:ident, $m:ident, $op:expr, $attr:expr, $args:expr) => {};
}

/// [`infer_of`] for the kernels.
macro_rules! eval_of {
    (node, $o:ident, $v:ident, $m:ident, $k:ident) => {
        if gate!($o, $v, $k.op == Opcode::$v, false) {
            return $m::eval($k);
        }
    };
    ($elementwise:ident, $o:ident, $v:ident, $m:ident, $k:ident) => {};
}

/// The dispatch the opcode table derives: every per-op `match` of this module.
macro_rules! define_dispatch {
    ($( $code:literal $variant:ident $name:literal $arity:literal $class:ident $attr:ident
        $set:ident $rule:ident $kernel:ident $module:ident $doc:literal ; )*) => {
        /// [`unary_fn_of`] in the selective build over the op set `O` (see [`crate::Ops`]):
        /// `None` for an opcode outside `O`, whose function is not linked.
        #[inline(never)] // one copy, shared by `eval` and `unary_fn` (the firmware's code budget)
        pub fn unary_fn_in<E: Element, O: Ops>(
            op: Opcode,
            math: MathProfile,
        ) -> Option<fn(E) -> E> {
            $( unary_of!($kernel, O, $variant, $module, E, op, math); )*
            None
        }

        /// [`binary_fn_of`] in the selective build over the op set `O` (see [`crate::Ops`]).
        pub fn binary_fn_in<E: Element, O: Ops>(op: Opcode) -> Option<fn(E, E) -> E> {
            $( binary_of!($kernel, O, $variant, $module, E, op); )*
            None
        }

        /// The shape rule once vocabulary, arity and attribute kind are checked: a `node`
        /// opcode's own rule, else (elementwise) one shape for every argument. An `if` chain
        /// over the `node` rows rather than a `match` over every opcode: smaller code for the
        /// firmware.
        fn infer_by_table<O: Ops>(
            op: Opcode,
            attr: Attr,
            args: &[Shape],
        ) -> Result<Shape, OpError> {
            $( infer_of!($kernel, O, $variant, $module, op, attr, args); )*
            same_shapes(op, args)
        }

        /// The reference kernel of a `node` opcode.
        /// ([`eval`] checked the vocabulary first; an opcode without a `node` kernel answers
        /// [`OpError::Leaf`].)
        fn eval_by_table<E: Element, O: Ops>(k: Kernel<'_, E>) -> Result<(), OpError> {
            $( eval_of!($kernel, O, $variant, $module, k); )*
            Err(OpError::Leaf { op: k.op })
        }

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
                $( Opcode::$variant => $module::vjp(r, v), )*
            }
        }
    };
}

crate::opcode::opcode_table!(define_dispatch);

/// The scalar function of a unary elementwise opcode under the math profile `math` (`pow` is
/// not one: its exponent is an attribute; see [`eval_in_place_unary`]). `None` for another
/// opcode, or a transcendental under a profile this build leaves out.
pub fn unary_fn(op: Opcode, math: MathProfile) -> Option<fn(f32) -> f32> {
    unary_fn_of::<f32>(op, math)
}

/// [`unary_fn`] for any element.
pub fn unary_fn_of<E: Element>(op: Opcode, math: MathProfile) -> Option<fn(E) -> E> {
    unary_fn_in::<E, BuildOps>(op, math)
}

/// [`binary_fn`] for any element.
pub fn binary_fn_of<E: Element>(op: Opcode) -> Option<fn(E, E) -> E> {
    binary_fn_in::<E, BuildOps>(op)
}

/// `pow`'s scalar function (`x^p`) under `math`; `None` for a profile this build leaves out.
pub fn pow_fn_of<E: Element>(math: MathProfile) -> Option<fn(E, E) -> E> {
    by_math!(
        math,
        pow::scalar::<E> as fn(E, E) -> E,
        pow::scalar_fast::<E> as fn(E, E) -> E
    )
}

/// The scalar function of a binary elementwise opcode (none depends on the math profile).
pub fn binary_fn(op: Opcode) -> Option<fn(f32, f32) -> f32> {
    binary_fn_of::<f32>(op)
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
    eval_in::<E, BuildOps>(op, attr, math, args, arg_shapes, out)
}

/// [`eval`] under the arithmetic profile `arith` as well (only `matmul` depends on it; see
/// [`crate::ArithProfile`]).
///
/// # Shapes
/// As [`eval`].
///
/// # Errors
/// As [`eval`]; [`OpError::ArithProfile`] for a profile this build leaves out.
pub fn eval_arith<E: Element>(
    op: Opcode,
    attr: Attr,
    math: MathProfile,
    arith: ArithProfile,
    args: &[&[E]],
    arg_shapes: &[Shape],
    out: &mut [E],
) -> Result<(), OpError> {
    eval_in_arith::<E, BuildOps>(op, attr, math, arith, args, arg_shapes, out)
}

/// [`eval`] in the selective build over the op set `O` (see [`crate::Ops`]): only `O`'s
/// kernels are linked.
///
/// # Shapes
/// As [`eval`].
///
/// # Errors
/// As [`eval`]; [`OpError::Unsupported`] for an opcode outside `O`.
pub fn eval_in<E: Element, O: Ops>(
    op: Opcode,
    attr: Attr,
    math: MathProfile,
    args: &[&[E]],
    arg_shapes: &[Shape],
    out: &mut [E],
) -> Result<(), OpError> {
    eval_in_arith::<E, O>(
        op,
        attr,
        math,
        ArithProfile::Separate,
        args,
        arg_shapes,
        out,
    )
}

/// [`eval_in`] under the arithmetic profile `arith` as well.
///
/// # Shapes
/// As [`eval`].
///
/// # Errors
/// As [`eval_in`]; [`OpError::ArithProfile`] for a profile this build leaves out.
pub fn eval_in_arith<E: Element, O: Ops>(
    op: Opcode,
    attr: Attr,
    math: MathProfile,
    arith: ArithProfile,
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
    let out_shape = infer_in::<O>(op, attr, arg_shapes)?;
    if !math.in_build() {
        return Err(OpError::MathProfile { math });
    }
    if !arith.in_build() {
        return Err(OpError::ArithProfile { arith });
    }
    for (a, s) in args.iter().zip(arg_shapes) {
        check_len(op, a, *s)?;
    }
    check_len(op, out, out_shape)?;
    if let Some(f) = unary_fn_in::<E, O>(op, math) {
        elementwise::unary(f, args[0], out);
        return Ok(());
    }
    if let Some(f) = binary_fn_in::<E, O>(op) {
        elementwise::binary(f, args[0], args[1], out);
        return Ok(());
    }
    eval_by_table::<E, O>(Kernel {
        op,
        attr,
        math,
        arith,
        args,
        shapes: arg_shapes,
        out,
        out_shape,
    })
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
    if in_vocabulary(op) && op == Opcode::Pow {
        let f = pow_fn_of::<f32>(math).ok_or(OpError::MathProfile { math })?;
        let p = attr.scalar();
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
    /// The node's attribute.
    pub attr: Attr,
}

/// One contribution per argument position (`None`: none owed or none wanted).
pub type Contributions<V> = [Option<V>; MAX_ARITY];

/// Helper for rules: computes a contribution only when it is wanted.
pub(crate) fn want<V, E>(wanted: bool, f: impl FnOnce() -> Result<V, E>) -> Result<Option<V>, E> {
    if wanted {
        f().map(Some)
    } else {
        Ok(None)
    }
}

/// The reverse rule of a one-argument opcode whose contribution is `ḡ · slope`:
/// `x̄ += mul(ḡ, slope(r, x, y))` with `x` the argument and `y` the node's output, computed only
/// when wanted. `slope` records its own operations first, then the product is recorded: the
/// same operations in the same order as the rule written out.
pub(crate) fn unary_rule<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
    slope: impl FnOnce(&mut R, &R::Value, &R::Value) -> Result<R::Value, R::Error>,
) -> Result<Contributions<R::Value>, R::Error> {
    let d = want(v.wants[0], || {
        let s = slope(r, v.args[0], v.out)?;
        r.mul(v.cotangent, &s)
    })?;
    Ok([d, None, None])
}

/// The reverse rule of an opcode whose derivative is zero wherever it exists (a mask, a
/// stop-gradient, a random draw, a leaf): no contribution.
pub(crate) fn no_rule<R: Recordable>(
    _r: &mut R,
    _v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    Ok([None, None, None])
}
