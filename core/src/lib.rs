//! # tapeplan-core
//!
//! The vocabulary every layer of tapeplan shares: the opcode table ([`Opcode`]), shapes
//! ([`Shape`]), one reference kernel per instruction (the definition of the bits, in [`ops`]),
//! the plan format's records ([`format`]), and the [`Recordable`] trait the rules are written
//! against.
//!
//! With the default feature `alloc`: the [`Tape`] (a grow-only list of [`Node`]s), its record
//! payload [`Trace`], the forward interpreter and oracle [`Run`] with its compute payload
//! [`Compute`], [`Adjoints`], and [`describe`].
//!
//! ```
//! use tapeplan_core::{Recordable, Run, Shape, Tape, Tensor};
//!
//! // f = sum(x * x * x); its gradient is 3x².
//! let mut tape = Tape::new();
//! let x = tape.parameter("x", Shape::vector(3));
//! let f = {
//!     let mut t = tape.trace();
//!     let xx = t.mul(&x, &x)?;
//!     let xxx = t.mul(&xx, &x)?;
//!     t.sum_all(&xxx)?
//! };
//! // The gradient recorded as ordinary nodes…
//! let grads = tape.differentiate(f, &[x])?;
//! let dx = grads.get(x).copied().unwrap();
//! // …and evaluated by the forward interpreter.
//! let mut run = Run::new(&tape);
//! run.set(x, Tensor::new(Shape::vector(3), vec![0.5, -0.25, 1.5])?)?;
//! run.forward_until(dx)?;
//! assert_eq!(run.value(dx).unwrap().data, [0.75, 0.1875, 6.75]);
//! # Ok::<(), tapeplan_core::TapeError>(())
//! ```
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod arith;
mod attr;
mod element;
pub mod format;
pub mod math;
mod opcode;
pub mod ops;
mod opset;
mod recordable;
mod shape;

#[cfg(feature = "alloc")]
mod autodiff;
#[cfg(feature = "alloc")]
mod eager;
#[cfg(feature = "alloc")]
mod run;
#[cfg(feature = "alloc")]
mod tape;

pub use arith::ArithProfile;
pub use attr::{Attr, AttrKind, ConvAttr, PoolWindow};
pub use element::Element;
pub use math::MathProfile;
pub use opcode::{OpClass, Opcode, MAX_ARITY};
pub use ops::OpError;
pub use opset::{BuildOps, OpSet, Ops};
pub use recordable::{reduced_shapes, BatchNormTrain, Recordable, Reduction, RunningStats};
pub use shape::{Shape, ShapeError, MAX_RANK, MAX_TENSOR_ELEMS};

#[cfg(feature = "alloc")]
pub use autodiff::Adjoints;
#[cfg(feature = "alloc")]
pub use eager::Eager;
#[cfg(feature = "alloc")]
pub use run::{Compute, ComputeAs, Run, RunAs, Tensor, TensorOf};
#[cfg(feature = "alloc")]
pub use tape::{describe, Node, NodeId, Tape, TapeError, Trace};

impl Opcode {
    /// The forward meaning of this instruction over any payload: the one place an instruction's
    /// forward reading is spoken. Over [`Compute`] it runs the reference kernel; over [`Trace`] it
    /// appends a node.
    ///
    /// # Errors
    /// The instruction's shape errors and the payload's own.
    pub fn express<R: Recordable>(
        self,
        r: &mut R,
        attr: Attr,
        args: &[&R::Value],
    ) -> Result<R::Value, R::Error> {
        r.apply(self, attr, args)
    }

    /// The reverse-mode rule of this instruction over any payload: given the node's arguments,
    /// output and cotangent, one contribution per argument that wants one. The same body serves
    /// the oracle ([`Run::backward`]) and the recorded gradient ([`Tape::vjp`]).
    ///
    /// # Errors
    /// Whatever the payload's operations answer.
    pub fn vjp<R: Recordable>(
        self,
        r: &mut R,
        v: &ops::VjpArgs<'_, R::Value>,
    ) -> Result<ops::Contributions<R::Value>, R::Error> {
        ops::vjp(self, r, v)
    }
}
