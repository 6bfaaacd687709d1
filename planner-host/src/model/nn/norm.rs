//! Normalization: PyTorch's `nn.BatchNorm1d`, `nn.BatchNorm2d` and `nn.LayerNorm`.

use tapeplan_core::{NodeId, Recordable, RunningStats, Shape, Trace};

use super::{
    buffer, checked_elems, expect_rank, leaf, param, Layer, LayerCx, LayerOutput, LayerParam,
};
use crate::model::graph::{Mode, ModelError};
use crate::protocol::SplitMix64;

/// Batch normalization over channels (axis 1), shared by [`BatchNorm1d`] and [`BatchNorm2d`].
#[derive(Clone, Copy, Debug, PartialEq)]
struct BatchNorm {
    num_features: usize,
    eps: f32,
    momentum: f32,
    affine: bool,
    /// Normalize with the running statistics in training too, never updating them.
    eval_mode: bool,
}

impl BatchNorm {
    fn new(num_features: usize) -> BatchNorm {
        BatchNorm {
            num_features,
            eps: 1e-5,
            momentum: 0.1,
            affine: true,
            eval_mode: false,
        }
    }

    fn output_shape(
        &self,
        input: &[usize],
        ranks: &[usize],
        what: &str,
    ) -> Result<Vec<usize>, String> {
        expect_rank(input, ranks, what)?;
        if input[0] != self.num_features {
            return Err(format!(
                "expects {} channels, got {}",
                self.num_features, input[0]
            ));
        }
        Ok(input.to_vec())
    }

    /// PyTorch's `state_dict` order: `weight`, `bias` (with `affine`), `running_mean`,
    /// `running_var`, `num_batches_tracked`; PyTorch's `reset_parameters`: weight 1, bias 0,
    /// running mean 0, running variance 1, count 0.
    fn parameters(&self) -> Vec<LayerParam> {
        let c = self.num_features;
        let mut out = Vec::new();
        if self.affine {
            out.push(param("weight", vec![c], vec![1.0; c]));
            out.push(param("bias", vec![c], vec![0.0; c]));
        }
        out.push(buffer("running_mean", vec![c], vec![0.0; c]));
        out.push(buffer("running_var", vec![c], vec![1.0; c]));
        out.push(buffer("num_batches_tracked", vec![], vec![0.0]));
        out
    }

    fn forward(
        &self,
        t: &mut Trace<'_>,
        x: NodeId,
        params: &[NodeId],
        cx: &LayerCx,
        kind: &str,
    ) -> Result<LayerOutput, ModelError> {
        let k = if self.affine { 2 } else { 0 };
        let (w, b) = if self.affine {
            (Some(leaf(params, 0, kind)?), Some(leaf(params, 1, kind)?))
        } else {
            (None, None)
        };
        let rm = leaf(params, k, kind)?;
        let rv = leaf(params, k + 1, kind)?;
        let count = leaf(params, k + 2, kind)?;
        let mode = if self.eval_mode { Mode::Eval } else { cx.mode };
        match mode {
            Mode::Eval => Ok(LayerOutput::of(t.batch_norm_eval(
                &x,
                w.as_ref(),
                b.as_ref(),
                &rm,
                &rv,
                self.eps,
            )?)),
            Mode::Train => {
                let stats = RunningStats::PyTorch {
                    momentum: self.momentum,
                };
                let out =
                    t.batch_norm_train(&x, w.as_ref(), b.as_ref(), &rm, &rv, stats, self.eps)?;
                let one = t.fill(1.0, Shape::SCALAR)?;
                let counted = t.add(&count, &one)?;
                Ok(LayerOutput {
                    y: out.y,
                    buffer_updates: vec![
                        (k, out.running_mean),
                        (k + 1, out.running_var),
                        (k + 2, counted),
                    ],
                })
            }
        }
    }
}

/// The builder methods and the [`Layer`] implementation of a batch normalization layer.
macro_rules! batch_norm_layer {
    ($name:ident, $ranks:expr, $what:literal, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, Debug, PartialEq)]
        pub struct $name(BatchNorm);

        impl $name {
            /// PyTorch's constructor with its defaults: `eps = 1e-5`, `momentum = 0.1`,
            /// `affine = True`, running statistics tracked.
            pub fn new(num_features: usize) -> Self {
                $name(BatchNorm::new(num_features))
            }

            /// The value added to the variance (default `1e-5`).
            pub fn eps(mut self, eps: f32) -> Self {
                self.0.eps = eps;
                self
            }

            /// The weight of the batch statistic in the running statistics' update (default
            /// 0.1; PyTorch's `momentum=None`, a cumulative average, is not provided).
            pub fn momentum(mut self, momentum: f32) -> Self {
                self.0.momentum = momentum;
                self
            }

            /// With or without the learnable `weight` and `bias` (default with).
            pub fn affine(mut self, affine: bool) -> Self {
                self.0.affine = affine;
                self
            }

            /// Keeps the layer in evaluation mode in training too (PyTorch's `module.eval()`
            /// on it, as when fine-tuning on a frozen backbone): `train_step` normalizes with
            /// the running statistics, as `forward` does, and leaves them and
            /// `num_batches_tracked` unchanged. `weight` and `bias` still train unless frozen.
            /// Default off (training normalizes with the batch's statistics and updates the
            /// running ones). The ONNX import's counterpart is `--frozen-bn eval`.
            pub fn eval_mode(mut self, eval_mode: bool) -> Self {
                self.0.eval_mode = eval_mode;
                self
            }
        }

        impl Layer for $name {
            fn kind(&self) -> &'static str {
                stringify!($name)
            }

            fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
                self.0.output_shape(input, $ranks, $what)
            }

            fn parameters(
                &self,
                input: &[usize],
                _rng: &mut SplitMix64,
            ) -> Result<Vec<LayerParam>, String> {
                self.output_shape(input)?;
                checked_elems(&[self.0.num_features])?;
                Ok(self.0.parameters())
            }

            fn forward(
                &self,
                t: &mut Trace<'_>,
                x: NodeId,
                params: &[NodeId],
                cx: &LayerCx,
            ) -> Result<LayerOutput, ModelError> {
                self.0.forward(t, x, params, cx, stringify!($name))
            }
        }
    };
}

batch_norm_layer!(
    BatchNorm1d,
    &[1, 2],
    "[C] or [C, L]",
    "Batch normalization of `[N, C]` or `[N, C, L]` (PyTorch's `nn.BatchNorm1d`).\n\nTraining \
     normalizes with the batch's mean and biased variance and updates the buffers as PyTorch \
     does: `running = (1 − momentum) · running + momentum · stat`, the running variance from the \
     unbiased batch variance, `num_batches_tracked + 1` (held as an `f32`, exact to 2^24 \
     steps). Evaluation normalizes with the running statistics.\n\n# Shapes\n`[C]` or `[C, L]` \
     (without the batch) → the same; `weight`, `bias`, `running_mean`, `running_var` `[C]`, \
     `num_batches_tracked` a scalar."
);
batch_norm_layer!(
    BatchNorm2d,
    &[3],
    "[C, H, W]",
    "Batch normalization of `[N, C, H, W]` (PyTorch's `nn.BatchNorm2d`), per channel over the \
     batch and both spatial axes; training and evaluation as [`BatchNorm1d`].\n\n# Shapes\n`[C, \
     H, W]` (without the batch) → the same; parameters and buffers as [`BatchNorm1d`]'s."
);

/// Layer normalization over the trailing `normalized_shape` (Ba et al., 2016; PyTorch's
/// `nn.LayerNorm`, `eps = 1e-5`, `elementwise_affine = True`: weight 1, bias 0).
///
/// # Shapes
/// `[…, *normalized_shape]` (without the batch) → the same; `weight`, `bias`
/// `normalized_shape`.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNorm {
    normalized_shape: Vec<usize>,
    eps: f32,
    affine: bool,
}

impl LayerNorm {
    /// `nn.LayerNorm(normalized_shape)`.
    pub fn new(normalized_shape: &[usize]) -> LayerNorm {
        LayerNorm {
            normalized_shape: normalized_shape.to_vec(),
            eps: 1e-5,
            affine: true,
        }
    }

    /// The value added to the variance (default `1e-5`).
    pub fn eps(mut self, eps: f32) -> LayerNorm {
        self.eps = eps;
        self
    }

    /// With or without the learnable `weight` and `bias` (`elementwise_affine`, default with).
    pub fn elementwise_affine(mut self, affine: bool) -> LayerNorm {
        self.affine = affine;
        self
    }
}

impl Layer for LayerNorm {
    fn kind(&self) -> &'static str {
        "LayerNorm"
    }

    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        let k = self.normalized_shape.len();
        if k == 0 || input.len() < k || input[input.len() - k..] != self.normalized_shape[..] {
            return Err(format!(
                "normalized_shape {:?} must be non-empty and end the input shape",
                self.normalized_shape
            ));
        }
        Ok(input.to_vec())
    }

    fn parameters(
        &self,
        input: &[usize],
        _rng: &mut SplitMix64,
    ) -> Result<Vec<LayerParam>, String> {
        self.output_shape(input)?;
        if !self.affine {
            return Ok(Vec::new());
        }
        let n = checked_elems(&self.normalized_shape)?;
        Ok(vec![
            param("weight", self.normalized_shape.clone(), vec![1.0; n]),
            param("bias", self.normalized_shape.clone(), vec![0.0; n]),
        ])
    }

    fn forward(
        &self,
        t: &mut Trace<'_>,
        x: NodeId,
        params: &[NodeId],
        _cx: &LayerCx,
    ) -> Result<LayerOutput, ModelError> {
        let (w, b) = if self.affine {
            (
                Some(leaf(params, 0, "LayerNorm")?),
                Some(leaf(params, 1, "LayerNorm")?),
            )
        } else {
            (None, None)
        };
        let y = t.layer_norm(
            &x,
            self.normalized_shape.len(),
            w.as_ref(),
            b.as_ref(),
            self.eps,
        )?;
        Ok(LayerOutput::of(y))
    }
}
