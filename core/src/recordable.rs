//! `Recordable`: the vocabulary a rule body speaks, with one payload per reading.
//!
//! The forward meaning of an instruction ([`crate::Opcode::express`]) and its reverse rule
//! ([`crate::Opcode::vjp`]) are written once, against this trait, never against numbers. Two
//! payloads implement it in this crate (with `alloc`): the compute payload (`Run`'s tensors,
//! whose reverse walk is the oracle) and the record payload ([`crate::Trace`], whose values are
//! handles and whose every operation appends a node to a tape).

use crate::ops::{Attr, OpError};
use crate::{Opcode, Shape};

/// A payload the vocabulary can be spoken over.
pub trait Recordable {
    /// A value of this reading: a tensor when computing, a node handle when recording.
    type Value: Clone;
    /// What can go wrong; every shape error of an operation converts into it.
    type Error: From<OpError>;

    /// The shape of a value.
    fn shape_of(&self, value: &Self::Value) -> Shape;

    /// Applies one instruction to `args`. This is the only primitive; every method below
    /// is a spelling of it.
    ///
    /// # Errors
    /// Shape errors of the instruction (see [`crate::ops::infer`]) and the payload's own.
    fn apply(
        &mut self,
        op: Opcode,
        attr: Attr,
        args: &[&Self::Value],
    ) -> Result<Self::Value, Self::Error>;

    /// A tensor of `shape` with every element equal to `value`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn fill(&mut self, value: f32, shape: Shape) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Fill, Attr::fill(value, shape), &[])
    }
    /// `a + b` (same shapes).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn add(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Add, Attr::NONE, &[a, b])
    }
    /// `a - b` (same shapes).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn sub(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Sub, Attr::NONE, &[a, b])
    }
    /// `a * b` (same shapes).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn mul(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Mul, Attr::NONE, &[a, b])
    }
    /// `a / b` (same shapes).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn div(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Div, Attr::NONE, &[a, b])
    }
    /// `-x`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn neg(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Neg, Attr::NONE, &[x])
    }
    /// `tanh(x)`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn tanh(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Tanh, Attr::NONE, &[x])
    }
    /// `relu(x)`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn relu(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Relu, Attr::NONE, &[x])
    }
    /// `heaviside(x)`: 1 where `x > 0`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn heaviside(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Heaviside, Attr::NONE, &[x])
    }
    /// `exp(x)`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn exp(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Exp, Attr::NONE, &[x])
    }
    /// `ln(x)`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn log(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Log, Attr::NONE, &[x])
    }
    /// `x` with no reverse contribution.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn detach(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Detach, Attr::NONE, &[x])
    }
    /// The mask `a == b`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn equal(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Equal, Attr::NONE, &[a, b])
    }
    /// `a · b` for `a: [m, k]`, `b: [k, n]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn matmul(&mut self, a: &Self::Value, b: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::MatMul, Attr::NONE, &[a, b])
    }
    /// `xᵀ` for `x: [m, n]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn transpose(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Transpose, Attr::NONE, &[x])
    }
    /// `x` viewed as `shape` (same element count).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn reshape(&mut self, x: &Self::Value, shape: Shape) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Reshape, Attr::target(shape), &[x])
    }
    /// `x` broadcast to `shape`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn broadcast(&mut self, x: &Self::Value, shape: Shape) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::Broadcast, Attr::target(shape), &[x])
    }
    /// `x` summed down to `shape`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn sum_to(&mut self, x: &Self::Value, shape: Shape) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::SumTo, Attr::target(shape), &[x])
    }
    /// The maximum of `x` down to `shape`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn max_to(&mut self, x: &Self::Value, shape: Shape) -> Result<Self::Value, Self::Error> {
        self.apply(Opcode::MaxTo, Attr::target(shape), &[x])
    }
    /// Labels `[batch]` to one-hot rows `[batch, classes]`.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn one_hot(
        &mut self,
        labels: &Self::Value,
        classes: usize,
    ) -> Result<Self::Value, Self::Error> {
        let batch = self.shape_of(labels).dim(0).unwrap_or(0);
        let shape = Shape::new(&[batch, classes]).map_err(OpError::Shape)?;
        self.apply(Opcode::OneHot, Attr::target(shape), &[labels])
    }
    /// The sum of every element, a scalar.
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn sum_all(&mut self, x: &Self::Value) -> Result<Self::Value, Self::Error> {
        self.sum_to(x, Shape::SCALAR)
    }
    /// `x * c` for a constant `c` (a fill of `x`'s shape, then a product).
    ///
    /// # Errors
    /// As [`Recordable::apply`].
    fn scale(&mut self, x: &Self::Value, c: f32) -> Result<Self::Value, Self::Error> {
        let s = self.shape_of(x);
        let k = self.fill(c, s)?;
        self.mul(x, &k)
    }
}
