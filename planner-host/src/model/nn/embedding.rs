//! `Embedding`: PyTorch's `nn.Embedding`.

use tapeplan_core::{NodeId, Recordable, Trace};

use super::{checked_elems, leaf, param, standard_normal, Layer, LayerCx, LayerOutput, LayerParam};
use crate::model::graph::ModelError;
use crate::protocol::SplitMix64;

/// A lookup table of `num_embeddings` vectors of `embedding_dim` (PyTorch's `nn.Embedding`,
/// weight initialized `N(0, 1)` as its `reset_parameters` does, by [`super::standard_normal`]).
/// The input holds integer indices stored as `f32`; an index outside the table gives zeros (the
/// `gather` instruction's rule; PyTorch raises an error).
///
/// # Shapes
/// Input `[…]` (without the batch, at most rank 2: `[]` or `[T]`), output `[…, embedding_dim]`;
/// `weight` `[num_embeddings, embedding_dim]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Embedding {
    /// The table's size.
    pub num_embeddings: usize,
    /// Each vector's size.
    pub embedding_dim: usize,
}

impl Embedding {
    /// `nn.Embedding(num_embeddings, embedding_dim)`.
    pub fn new(num_embeddings: usize, embedding_dim: usize) -> Embedding {
        Embedding {
            num_embeddings,
            embedding_dim,
        }
    }
}

impl Layer for Embedding {
    fn kind(&self) -> &'static str {
        "Embedding"
    }

    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        if input.len() > 2 {
            return Err(format!(
                "expects indices of rank at most 2 (without the batch), got rank {}",
                input.len()
            ));
        }
        let mut out = input.to_vec();
        out.push(self.embedding_dim);
        Ok(out)
    }

    fn parameters(&self, input: &[usize], rng: &mut SplitMix64) -> Result<Vec<LayerParam>, String> {
        self.output_shape(input)?;
        let (v, d) = (self.num_embeddings, self.embedding_dim);
        let n = checked_elems(&[v, d])?;
        Ok(vec![param("weight", vec![v, d], standard_normal(n, rng))])
    }

    fn forward(
        &self,
        t: &mut Trace<'_>,
        x: NodeId,
        params: &[NodeId],
        _cx: &LayerCx,
    ) -> Result<LayerOutput, ModelError> {
        let w = leaf(params, 0, "Embedding")?;
        Ok(LayerOutput::of(t.embedding(&w, &x)?))
    }
}
