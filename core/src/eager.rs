//! `Eager`: eager recording. Each operation computes its value now (like PyTorch's eager mode)
//! and appends its node to a tape; [`Eager::backward`] runs the engine reverse scan over the
//! retained values. Retaining every value for the backward walk is a memory posture, not a second
//! compiler: the nodes are the same, the rules are the same, and the tape can still be
//! differentiated as graph ([`Tape::vjp`]) and planned.

use alloc::vec::Vec;

use crate::ops::Attr;
use crate::run::{ComputeAs, Tensor};
use crate::tape::{NodeId, Tape, TapeError};
use crate::{Adjoints, Opcode, Recordable, Shape};

/// An eager recording: a tape and the value of every node on it.
///
/// (Named `Eager`, not `Entry`: an *entry* is a named run of a plan's instructions, such as
/// `forward` or `train_step`.)
#[derive(Clone, Debug, Default)]
pub struct Eager {
    tape: Tape,
    values: Vec<Option<Tensor>>,
}

impl Eager {
    /// An empty recording.
    pub fn new() -> Eager {
        Eager::default()
    }

    /// The tape recorded so far.
    pub fn tape(&self) -> &Tape {
        &self.tape
    }

    /// Records an input leaf holding `value`.
    pub fn input(&mut self, name: &str, value: Tensor) -> NodeId {
        let id = self.tape.input(name, value.shape);
        self.values.push(Some(value));
        id
    }

    /// Records a parameter leaf holding `value`.
    pub fn parameter(&mut self, name: &str, value: Tensor) -> NodeId {
        let id = self.tape.parameter(name, value.shape);
        self.values.push(Some(value));
        id
    }

    /// The value of a recorded node.
    ///
    /// # Errors
    /// A foreign or unknown handle.
    pub fn value(&self, id: NodeId) -> Result<&Tensor, TapeError> {
        let i = self.tape.check(id)?;
        self.values[i]
            .as_ref()
            .ok_or(TapeError::MissingValue { index: i })
    }

    /// The engine reverse scan from `root` (a scalar) with seed 1 over the retained values:
    /// the same walk, rules, mask and accumulation as `Run::backward`.
    ///
    /// # Errors
    /// A bad root or handle, a non-scalar root.
    pub fn backward(&self, root: NodeId, wrt: &[NodeId]) -> Result<Adjoints<Tensor>, TapeError> {
        let root_i = self.tape.check(root)?;
        let mut wrt_i = Vec::with_capacity(wrt.len());
        for w in wrt {
            wrt_i.push(self.tape.check(*w)?);
        }
        crate::autodiff::reverse_scan(
            &self.tape.nodes()[..=root_i],
            &self.values[..=root_i],
            &mut ComputeAs::<f32>::new(),
            root_i,
            Tensor::scalar(1.0),
            &wrt_i,
        )
    }
}

impl Recordable for Eager {
    type Value = NodeId;
    type Error = TapeError;

    fn shape_of(&self, value: &NodeId) -> Shape {
        self.tape.shape(*value).unwrap_or(Shape::SCALAR)
    }

    fn apply(&mut self, op: Opcode, attr: Attr, args: &[&NodeId]) -> Result<NodeId, TapeError> {
        let mut vals: Vec<&Tensor> = Vec::with_capacity(args.len());
        for a in args {
            vals.push(self.value(**a)?);
        }
        let v = op.express(&mut ComputeAs::<f32>::new(), attr, &vals)?;
        let ids: Vec<NodeId> = args.iter().map(|a| **a).collect();
        let id = self.tape.push(op, attr, &ids)?;
        self.values.push(Some(v));
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Run;

    #[test]
    fn eager_backward_equals_the_recorded_gradient() {
        let mut e = Eager::new();
        let x = e.parameter(
            "x",
            Tensor::new(Shape::vector(3), alloc::vec![0.5, -0.25, 1.5]).unwrap(),
        );
        let xx = e.mul(&x, &x).unwrap();
        let t = e.tanh(&xx).unwrap();
        let f = e.sum_all(&t).unwrap();
        assert_eq!(e.value(xx).unwrap().data, [0.25, 0.0625, 2.25]);
        let eager = e.backward(f, &[x]).unwrap().get(x).unwrap().clone();
        let mut tape = e.tape().clone();
        let g = *tape.differentiate(f, &[x]).unwrap().get(x).unwrap();
        let mut run = Run::new(&tape);
        run.set(x, e.value(x).unwrap().clone()).unwrap();
        run.forward_until(g).unwrap();
        assert_eq!(run.value(g).unwrap(), &eager);
    }
}
