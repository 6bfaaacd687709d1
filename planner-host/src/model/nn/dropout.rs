//! `Dropout`: PyTorch's `nn.Dropout`.

use tapeplan_core::{NodeId, Recordable, Shape, Trace};

use super::{Layer, LayerCx, LayerOutput, LayerParam, DROPOUT_STREAMS};
use crate::model::graph::{Mode, ModelError};
use crate::protocol::SplitMix64;

/// Inverted dropout (PyTorch's `nn.Dropout`, [`Recordable::dropout`]): in [`Mode::Train`] each
/// element is kept with probability `1 − p` and scaled by `1 / (1 − p)`; in [`Mode::Eval`] the
/// identity. Each dropout layer of a model draws from its own stream of the model's generator,
/// `(key, counter · DROPOUT_STREAMS + k)` for the model's `k`-th dropout layer, so masks differ
/// between layers and between steps (the job advances the counter every step).
///
/// # Shapes
/// Any shape → the same.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dropout {
    /// The probability of dropping an element, in `[0, 1)`.
    pub p: f32,
}

impl Dropout {
    /// `nn.Dropout(p)`.
    pub fn new(p: f32) -> Dropout {
        Dropout { p }
    }
}

impl Layer for Dropout {
    fn kind(&self) -> &'static str {
        "Dropout"
    }

    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        if !(0.0..1.0).contains(&self.p) {
            return Err(format!("p {} must be in [0, 1)", self.p));
        }
        Ok(input.to_vec())
    }

    fn parameters(
        &self,
        input: &[usize],
        _rng: &mut SplitMix64,
    ) -> Result<Vec<LayerParam>, String> {
        self.output_shape(input)?;
        Ok(Vec::new())
    }

    fn dropout_streams(&self) -> usize {
        1
    }

    fn forward(
        &self,
        t: &mut Trace<'_>,
        x: NodeId,
        _params: &[NodeId],
        cx: &LayerCx,
    ) -> Result<LayerOutput, ModelError> {
        if cx.mode == Mode::Eval || self.p == 0.0 {
            return Ok(LayerOutput::of(x));
        }
        let rng = cx.rng.ok_or_else(|| {
            ModelError::Invalid(
                "a training-mode Dropout needs the model's generator (ForwardCx::rng)".into(),
            )
        })?;
        let streams = t.fill(DROPOUT_STREAMS as f32, Shape::SCALAR)?;
        let base = t.mul(&rng.counter, &streams)?;
        let k = t.fill(cx.stream as f32, Shape::SCALAR)?;
        let c = t.add(&base, &k)?;
        Ok(LayerOutput::of(t.dropout(&x, self.p, &rng.key, &c)?))
    }
}
