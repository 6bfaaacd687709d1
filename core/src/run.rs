//! The compute payload ([`Compute`], values are [`Tensor`]s), the forward interpreter [`Run`],
//! and the engine reverse scan [`Run::backward`]: the oracle.

use alloc::vec;
use alloc::vec::Vec;

use crate::ops::{self, Attr};
use crate::tape::{NodeId, Tape, TapeError};
use core::marker::PhantomData;

use crate::{Adjoints, ArithProfile, Element, MathProfile, Opcode, Recordable, Shape, MAX_ARITY};

/// A dense row-major tensor of elements `E`.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorOf<E> {
    /// Its shape.
    pub shape: Shape,
    /// Its elements, `shape.elems()` of them.
    pub data: Vec<E>,
}

/// A dense row-major `f32` tensor: the element of plans.
pub type Tensor = TensorOf<f32>;

impl<E: Element> TensorOf<E> {
    /// A tensor from its shape and elements.
    ///
    /// # Errors
    /// [`TapeError::ValueShape`] (with index 0) when `data.len() != shape.elems()`.
    pub fn new(shape: Shape, data: Vec<E>) -> Result<TensorOf<E>, TapeError> {
        if data.len() != shape.elems() {
            return Err(TapeError::ValueShape {
                index: 0,
                expected: shape,
                found: Shape::vector(data.len().min(crate::MAX_TENSOR_ELEMS)),
            });
        }
        Ok(TensorOf { shape, data })
    }

    /// A tensor of zeros.
    pub fn zeros(shape: Shape) -> TensorOf<E> {
        TensorOf {
            shape,
            data: vec![E::ZERO; shape.elems()],
        }
    }

    /// A scalar.
    pub fn scalar(v: E) -> TensorOf<E> {
        TensorOf {
            shape: Shape::SCALAR,
            data: vec![v],
        }
    }

    /// The same tensor in another element (through `f32`: exact from `f32` to `f64`).
    pub fn convert<F: Element>(&self) -> TensorOf<F> {
        TensorOf {
            shape: self.shape,
            data: self.data.iter().map(|v| F::from_f32(v.to_f32())).collect(),
        }
    }
}

fn compute_apply<E: Element>(
    op: Opcode,
    attr: Attr,
    math: MathProfile,
    arith: ArithProfile,
    args: &[&TensorOf<E>],
) -> Result<TensorOf<E>, TapeError> {
    if args.len() > MAX_ARITY {
        return Err(TapeError::Op(ops::OpError::Arity {
            op,
            expected: op.arity(),
            found: args.len(),
        }));
    }
    let mut shapes = [Shape::SCALAR; MAX_ARITY];
    let mut bufs: [&[E]; MAX_ARITY] = [&[]; MAX_ARITY];
    for (k, a) in args.iter().enumerate() {
        shapes[k] = a.shape;
        bufs[k] = &a.data;
    }
    let n = args.len();
    let shape = ops::infer(op, attr, &shapes[..n])?;
    let mut out = TensorOf::zeros(shape);
    ops::eval_arith(
        op,
        attr,
        math,
        arith,
        &bufs[..n],
        &shapes[..n],
        &mut out.data,
    )?;
    Ok(out)
}

/// The compute payload in another element: every operation runs its reference kernel over
/// `E` (`f64` for error analysis, a dual number for forward mode), under a math profile.
#[derive(Clone, Copy, Debug, Default)]
pub struct ComputeAs<E> {
    math: MathProfile,
    arith: ArithProfile,
    element: PhantomData<E>,
}

impl<E: Element> ComputeAs<E> {
    /// The payload, under the default (`precise`) math profile.
    pub fn new() -> ComputeAs<E> {
        ComputeAs::with_math(MathProfile::Precise)
    }

    /// The payload under the math profile `math`.
    pub fn with_math(math: MathProfile) -> ComputeAs<E> {
        ComputeAs {
            math,
            arith: ArithProfile::Separate,
            element: PhantomData,
        }
    }

    /// The payload under the math profile `math` and the arithmetic profile `arith`.
    pub fn with_profiles(math: MathProfile, arith: ArithProfile) -> ComputeAs<E> {
        ComputeAs {
            math,
            arith,
            element: PhantomData,
        }
    }
}

impl<E: Element> Recordable for ComputeAs<E> {
    type Value = TensorOf<E>;
    type Error = TapeError;

    fn shape_of(&self, value: &TensorOf<E>) -> Shape {
        value.shape
    }

    fn apply(
        &mut self,
        op: Opcode,
        attr: Attr,
        args: &[&TensorOf<E>],
    ) -> Result<TensorOf<E>, TapeError> {
        compute_apply(op, attr, self.math, self.arith, args)
    }
}

/// The compute payload: every operation runs its reference kernel now, under the math profile
/// `math` and the arithmetic profile `arith` (`Compute::default()`: `precise`, `separate`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Compute {
    /// The math profile the transcendental kernels follow.
    pub math: MathProfile,
    /// The arithmetic profile the matrix product follows.
    pub arith: ArithProfile,
}

impl Compute {
    /// The payload under the math profile `math` (and the `separate` arithmetic profile).
    pub fn with_math(math: MathProfile) -> Compute {
        Compute {
            math,
            arith: ArithProfile::Separate,
        }
    }

    /// The payload under the math profile `math` and the arithmetic profile `arith`.
    pub fn with_profiles(math: MathProfile, arith: ArithProfile) -> Compute {
        Compute { math, arith }
    }
}

impl Recordable for Compute {
    type Value = Tensor;
    type Error = TapeError;

    fn shape_of(&self, value: &Tensor) -> Shape {
        value.shape
    }

    fn apply(&mut self, op: Opcode, attr: Attr, args: &[&Tensor]) -> Result<Tensor, TapeError> {
        compute_apply(op, attr, self.math, self.arith, args)
    }
}

/// The forward interpreter over a tape in element `E`: leaf values set by the caller, every
/// other node computed by its reference kernel, in tape order. [`Run`] is the `f32` one.
pub struct RunAs<'t, E> {
    tape: &'t Tape,
    values: Vec<Option<TensorOf<E>>>,
    math: MathProfile,
    arith: ArithProfile,
}

/// The forward interpreter in `f32`, the element of plans: the oracle.
pub type Run<'t> = RunAs<'t, f32>;

impl<'t, E: Element> RunAs<'t, E> {
    /// A run over `tape` with no value set yet, under the default (`precise`) math profile.
    pub fn new(tape: &'t Tape) -> RunAs<'t, E> {
        RunAs::with_math(tape, MathProfile::Precise)
    }

    /// A run over `tape` with no value set yet, its kernels (forward and reverse) under the
    /// math profile `math`.
    pub fn with_math(tape: &'t Tape, math: MathProfile) -> RunAs<'t, E> {
        RunAs {
            tape,
            values: vec![None; tape.len()],
            math,
            arith: ArithProfile::Separate,
        }
    }

    /// The same run with its kernels (forward and reverse) under the arithmetic profile
    /// `arith` (the matrix product's multiply-accumulate step).
    pub fn with_arith(mut self, arith: ArithProfile) -> RunAs<'t, E> {
        self.arith = arith;
        self
    }

    /// The math profile its kernels follow.
    pub fn math(&self) -> MathProfile {
        self.math
    }

    /// The arithmetic profile its kernels follow.
    pub fn arith(&self) -> ArithProfile {
        self.arith
    }

    /// Sets a node's value (inputs and parameters must be set before they are needed; setting
    /// another node overrides what it would compute).
    ///
    /// # Errors
    /// A foreign or unknown handle, or a value of the wrong shape.
    pub fn set(&mut self, id: NodeId, value: TensorOf<E>) -> Result<(), TapeError> {
        let i = self.tape.check(id)?;
        let expected = self.tape.nodes()[i].shape;
        if value.shape != expected || value.data.len() != expected.elems() {
            return Err(TapeError::ValueShape {
                index: i,
                expected,
                found: value.shape,
            });
        }
        self.values[i] = Some(value);
        Ok(())
    }

    /// Forgets every computed (non-leaf) value, keeping the leaves set by the caller, so a new
    /// forward pass recomputes them.
    pub fn clear_computed(&mut self) {
        for (v, n) in self.values.iter_mut().zip(self.tape.nodes()) {
            if !matches!(n.op, Opcode::Input | Opcode::Parameter) {
                *v = None;
            }
        }
    }

    /// Computes every node from the first up to and including `last` that has no value yet.
    ///
    /// # Errors
    /// An unset leaf ([`TapeError::MissingValue`]), or a kernel's error.
    pub fn forward_until(&mut self, last: NodeId) -> Result<(), TapeError> {
        let last = self.tape.check(last)?;
        for i in 0..=last {
            if self.values[i].is_some() {
                continue;
            }
            let node = &self.tape.nodes()[i];
            if matches!(node.op, Opcode::Input | Opcode::Parameter) {
                return Err(TapeError::MissingValue { index: i });
            }
            let mut args: Vec<&TensorOf<E>> = Vec::with_capacity(MAX_ARITY);
            for &a in node.arg_indices() {
                args.push(
                    self.values[a as usize]
                        .as_ref()
                        .ok_or(TapeError::MissingValue { index: a as usize })?,
                );
            }
            let v = node.op.express(
                &mut ComputeAs::<E>::with_profiles(self.math, self.arith),
                node.attr,
                &args,
            )?;
            self.values[i] = Some(v);
        }
        Ok(())
    }

    /// Computes the whole tape.
    ///
    /// # Errors
    /// As [`Run::forward_until`].
    pub fn forward(&mut self) -> Result<(), TapeError> {
        match self.tape.len() {
            0 => Ok(()),
            n => self.forward_until(self.tape.id(n - 1)?),
        }
    }

    /// The value of a node, once computed or set.
    pub fn value(&self, id: NodeId) -> Option<&TensorOf<E>> {
        let i = self.tape.check(id).ok()?;
        self.values[i].as_ref()
    }

    /// The engine reverse scan, the oracle: computes forward up to `root` if needed, then walks
    /// back with cotangent `seed`, applying each reached node's rule to tensors, and answers the
    /// adjoints. The same rules, mask and accumulation as [`Tape::vjp`].
    ///
    /// # Errors
    /// A bad root or handle, a seed of the wrong shape, a contribution of the wrong shape, or a
    /// forward error.
    pub fn backward(
        &mut self,
        root: NodeId,
        seed: TensorOf<E>,
        wrt: &[NodeId],
    ) -> Result<Adjoints<TensorOf<E>>, TapeError> {
        let root_i = self.tape.check(root)?;
        let mut wrt_i = Vec::with_capacity(wrt.len());
        for w in wrt {
            wrt_i.push(self.tape.check(*w)?);
        }
        self.forward_until(root)?;
        crate::autodiff::reverse_scan(
            &self.tape.nodes()[..=root_i],
            &self.values[..=root_i],
            &mut ComputeAs::<E>::with_profiles(self.math, self.arith),
            root_i,
            seed,
            &wrt_i,
        )
    }
}
