//! Shape-only layers: PyTorch's `nn.Flatten` and `nn.Identity`.

use tapeplan_core::{NodeId, Recordable, Trace};

use super::{batched, Layer, LayerCx, LayerOutput, LayerParam};
use crate::model::graph::ModelError;
use crate::protocol::SplitMix64;

/// Flattens every dimension but the batch (PyTorch's `nn.Flatten()` with its defaults
/// `start_dim=1, end_dim=-1`), row-major.
///
/// # Shapes
/// `[d1, …, dk]` (without the batch) → `[d1 · … · dk]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Flatten;

impl Layer for Flatten {
    fn kind(&self) -> &'static str {
        "Flatten"
    }

    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        Ok(vec![input.iter().product()])
    }

    fn parameters(&self, _: &[usize], _: &mut SplitMix64) -> Result<Vec<LayerParam>, String> {
        Ok(Vec::new())
    }

    fn forward(
        &self,
        t: &mut Trace<'_>,
        x: NodeId,
        _params: &[NodeId],
        _cx: &LayerCx,
    ) -> Result<LayerOutput, ModelError> {
        let s = t.shape_of(&x);
        let batch = s.dim(0).unwrap_or(1);
        let target = batched(batch, &[s.elems() / batch.max(1)])?;
        Ok(LayerOutput::of(t.reshape(&x, target)?))
    }
}

/// The identity (PyTorch's `nn.Identity`).
///
/// # Shapes
/// Any shape → the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity;

impl Layer for Identity {
    fn kind(&self) -> &'static str {
        "Identity"
    }

    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        Ok(input.to_vec())
    }

    fn parameters(&self, _: &[usize], _: &mut SplitMix64) -> Result<Vec<LayerParam>, String> {
        Ok(Vec::new())
    }

    fn forward(
        &self,
        _t: &mut Trace<'_>,
        x: NodeId,
        _params: &[NodeId],
        _cx: &LayerCx,
    ) -> Result<LayerOutput, ModelError> {
        Ok(LayerOutput::of(x))
    }
}
