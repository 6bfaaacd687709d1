//! `Linear`: PyTorch's `nn.Linear`.

use tapeplan_core::{NodeId, Recordable, Shape, Trace};

use super::{
    checked_elems, leaf, param, shape_dims, uniform_fan_in, Layer, LayerCx, LayerOutput, LayerParam,
};
use crate::model::graph::ModelError;
use crate::protocol::SplitMix64;

/// A fully connected layer (PyTorch's `nn.Linear`): `y = x · Wᵀ + b`.
///
/// # Shapes
/// Input `[…, in_features]` (without the batch), output `[…, out_features]`; `weight`
/// `[out_features, in_features]` (PyTorch's layout), `bias` `[out_features]`. Leading
/// dimensions are folded into the batch for the product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    /// Input features.
    pub in_features: usize,
    /// Output features.
    pub out_features: usize,
    /// Whether the layer has a bias (default true).
    pub has_bias: bool,
}

impl Linear {
    /// `nn.Linear(in_features, out_features)`.
    pub fn new(in_features: usize, out_features: usize) -> Linear {
        Linear {
            in_features,
            out_features,
            has_bias: true,
        }
    }

    /// With or without the bias (`bias=False`).
    pub fn bias(self, has_bias: bool) -> Linear {
        Linear { has_bias, ..self }
    }
}

impl Layer for Linear {
    fn kind(&self) -> &'static str {
        "Linear"
    }

    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        match input.last() {
            Some(&f) if f == self.in_features => {
                let mut out = input.to_vec();
                if let Some(last) = out.last_mut() {
                    *last = self.out_features;
                }
                Ok(out)
            }
            Some(&f) => Err(format!(
                "expects {} input features, got {f}",
                self.in_features
            )),
            None => Err("expects at least one dimension of features".into()),
        }
    }

    fn parameters(&self, input: &[usize], rng: &mut SplitMix64) -> Result<Vec<LayerParam>, String> {
        self.output_shape(input)?;
        let (i, o) = (self.in_features, self.out_features);
        let n = checked_elems(&[o, i])?;
        let mut out = vec![param("weight", vec![o, i], uniform_fan_in(n, i, rng))];
        if self.has_bias {
            out.push(param("bias", vec![o], uniform_fan_in(o, i, rng)));
        }
        Ok(out)
    }

    fn forward(
        &self,
        t: &mut Trace<'_>,
        x: NodeId,
        params: &[NodeId],
        _cx: &LayerCx,
    ) -> Result<LayerOutput, ModelError> {
        let dims = shape_dims(t, x);
        let rows: usize = dims[..dims.len().saturating_sub(1)].iter().product();
        let flat = Shape::matrix(rows, self.in_features);
        let x2 = if dims.len() == 2 {
            x
        } else {
            t.reshape(&x, flat)?
        };
        let wt = t.transpose(&leaf(params, 0, "Linear")?)?;
        let mut y = t.matmul(&x2, &wt)?;
        if let Some(b) = params.get(1).filter(|_| self.has_bias) {
            let ys = t.shape_of(&y);
            let bb = t.broadcast(b, ys)?;
            y = t.add(&y, &bb)?;
        }
        if dims.len() != 2 {
            let mut out = dims.clone();
            if let Some(last) = out.last_mut() {
                *last = self.out_features;
            }
            let s = Shape::new(&out).map_err(|e| ModelError::Invalid(e.to_string()))?;
            y = t.reshape(&y, s)?;
        }
        Ok(LayerOutput::of(y))
    }
}
