//! Activation layers: PyTorch's `nn.ReLU`, `nn.Tanh`, `nn.Sigmoid`, `nn.GELU`, `nn.SiLU`,
//! `nn.LeakyReLU`, `nn.ReLU6`, `nn.Hardtanh`, `nn.Hardsigmoid`, `nn.Hardswish`, `nn.Softplus`,
//! `nn.Softmax`, `nn.LogSoftmax`. Each is elementwise (or along one axis for the softmaxes) and
//! keeps the shape; each records the core instruction or composition of the same name.

use tapeplan_core::{NodeId, Recordable, Trace};

use super::{Layer, LayerCx, LayerOutput, LayerParam};
use crate::model::graph::ModelError;
use crate::protocol::SplitMix64;

/// The [`Layer`] implementation of a shape-keeping activation: `$apply(layer, trace, x)`.
macro_rules! activation_layer {
    ($name:ident, $apply:expr) => {
        impl Layer for $name {
            fn kind(&self) -> &'static str {
                stringify!($name)
            }

            fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
                self.check(input)?;
                Ok(input.to_vec())
            }

            fn parameters(
                &self,
                input: &[usize],
                _rng: &mut SplitMix64,
            ) -> Result<Vec<LayerParam>, String> {
                self.check(input)?;
                Ok(Vec::new())
            }

            fn forward(
                &self,
                t: &mut Trace<'_>,
                x: NodeId,
                _params: &[NodeId],
                _cx: &LayerCx,
            ) -> Result<LayerOutput, ModelError> {
                let apply: fn(&$name, &mut Trace<'_>, &NodeId) -> Result<NodeId, _> = $apply;
                Ok(LayerOutput::of(apply(self, t, &x)?))
            }
        }
    };
}

/// A parameterless activation: a unit struct, its doc and its [`Layer`] implementation.
macro_rules! unit_activation {
    ($name:ident, $method:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name;

        impl $name {
            fn check(&self, _input: &[usize]) -> Result<(), String> {
                Ok(())
            }
        }

        activation_layer!($name, |_, t, x| t.$method(x));
    };
}

unit_activation!(ReLU, relu, "`max(x, 0)` (PyTorch's `nn.ReLU`).");
unit_activation!(Tanh, tanh, "`tanh(x)` (PyTorch's `nn.Tanh`).");
unit_activation!(
    Sigmoid,
    sigmoid,
    "`1 / (1 + e^−x)` (PyTorch's `nn.Sigmoid`)."
);
unit_activation!(
    SiLU,
    silu,
    "`x · sigmoid(x)` (PyTorch's `nn.SiLU`, Hendrycks & Gimpel's sigmoid-weighted unit)."
);
unit_activation!(ReLU6, relu6, "`min(max(x, 0), 6)` (PyTorch's `nn.ReLU6`).");
unit_activation!(
    Hardswish,
    hardswish,
    "`x · clamp(x/6 + 1/2, 0, 1)` (PyTorch's `nn.Hardswish`, Howard et al., MobileNetV3; \
     [`Recordable::hardswish`])."
);

/// `clamp(x/6 + 1/2, 0, 1)` (PyTorch's `nn.Hardsigmoid`, recorded as
/// [`Recordable::hardsigmoid`] with `alpha = 1/6`, `beta = 1/2`: within an ulp or two of
/// PyTorch's `relu6(x + 3) / 6`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hardsigmoid;

impl Hardsigmoid {
    fn check(&self, _input: &[usize]) -> Result<(), String> {
        Ok(())
    }
}

activation_layer!(Hardsigmoid, |_, t, x| t.hardsigmoid(x, 1.0 / 6.0, 0.5));

/// The Gaussian error linear unit (Hendrycks & Gimpel, 2016; PyTorch's `nn.GELU`): exact,
/// `x · Φ(x)` with `erf`, by default; `approximate = "tanh"` with [`GELU::tanh`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct GELU {
    /// Whether the tanh approximation is used.
    pub tanh_approximation: bool,
}

impl GELU {
    /// `nn.GELU()` (exact).
    pub fn new() -> GELU {
        GELU::default()
    }

    /// `nn.GELU(approximate='tanh')`.
    pub fn tanh() -> GELU {
        GELU {
            tanh_approximation: true,
        }
    }

    fn check(&self, _input: &[usize]) -> Result<(), String> {
        Ok(())
    }
}

activation_layer!(GELU, |l, t, x| if l.tanh_approximation {
    t.gelu_tanh(x)
} else {
    t.gelu(x)
});

/// `x` where positive, `negative_slope · x` elsewhere (PyTorch's `nn.LeakyReLU`, default slope
/// 0.01).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeakyReLU {
    /// The slope for negative inputs.
    pub negative_slope: f32,
}

impl LeakyReLU {
    /// `nn.LeakyReLU(negative_slope)`.
    pub fn new(negative_slope: f32) -> LeakyReLU {
        LeakyReLU { negative_slope }
    }

    fn check(&self, _input: &[usize]) -> Result<(), String> {
        Ok(())
    }
}

impl Default for LeakyReLU {
    fn default() -> LeakyReLU {
        LeakyReLU::new(0.01)
    }
}

activation_layer!(LeakyReLU, |l, t, x| t.leaky_relu(x, l.negative_slope));

/// `x` clamped to `[min_val, max_val]` (PyTorch's `nn.Hardtanh`, default `[−1, 1]`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hardtanh {
    /// The lower bound.
    pub min_val: f32,
    /// The upper bound.
    pub max_val: f32,
}

impl Hardtanh {
    /// `nn.Hardtanh(min_val, max_val)`.
    pub fn new(min_val: f32, max_val: f32) -> Hardtanh {
        Hardtanh { min_val, max_val }
    }

    fn check(&self, _input: &[usize]) -> Result<(), String> {
        if self.min_val <= self.max_val {
            Ok(())
        } else {
            Err(format!(
                "min_val {} exceeds max_val {}",
                self.min_val, self.max_val
            ))
        }
    }
}

activation_layer!(Hardtanh, |l, t, x| t.hardtanh(x, l.min_val, l.max_val));

/// `log(1 + e^(β·x)) / β`, linear above `threshold` (PyTorch's `nn.Softplus`, defaults
/// `β = 1`, `threshold = 20`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Softplus {
    /// β.
    pub beta: f32,
    /// Where the function reverts to the identity (in units of `β·x`).
    pub threshold: f32,
}

impl Softplus {
    /// `nn.Softplus(beta, threshold)`.
    pub fn new(beta: f32, threshold: f32) -> Softplus {
        Softplus { beta, threshold }
    }

    fn check(&self, _input: &[usize]) -> Result<(), String> {
        Ok(())
    }
}

impl Default for Softplus {
    fn default() -> Softplus {
        Softplus::new(1.0, 20.0)
    }
}

activation_layer!(Softplus, |l, t, x| t.softplus_beta(x, l.beta, l.threshold));

/// The axis of a PyTorch `dim` (counting the batch as axis 0; negative counts from the end)
/// for a sample of rank `rank` (without the batch).
fn axis_of(dim: isize, rank: usize) -> Result<usize, String> {
    let full = rank as isize + 1;
    let a = if dim < 0 { dim + full } else { dim };
    if (0..full).contains(&a) {
        Ok(a as usize)
    } else {
        Err(format!(
            "dim {dim} is outside a tensor of rank {full} (with the batch)"
        ))
    }
}

/// The softmax along `dim` (PyTorch's `nn.Softmax(dim)`; `dim` counts the batch as axis 0,
/// negative counts from the end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Softmax {
    /// The axis, as PyTorch's `dim`.
    pub dim: isize,
}

/// The log of the softmax along `dim` (PyTorch's `nn.LogSoftmax(dim)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogSoftmax {
    /// The axis, as PyTorch's `dim`.
    pub dim: isize,
}

impl Softmax {
    /// `nn.Softmax(dim)`.
    pub fn new(dim: isize) -> Softmax {
        Softmax { dim }
    }

    fn check(&self, input: &[usize]) -> Result<(), String> {
        axis_of(self.dim, input.len()).map(|_| ())
    }
}

impl LogSoftmax {
    /// `nn.LogSoftmax(dim)`.
    pub fn new(dim: isize) -> LogSoftmax {
        LogSoftmax { dim }
    }

    fn check(&self, input: &[usize]) -> Result<(), String> {
        axis_of(self.dim, input.len()).map(|_| ())
    }
}

/// The axis of `dim` for the recorded `x` (its rank includes the batch).
fn recorded_axis(t: &Trace<'_>, x: &NodeId, dim: isize) -> Result<usize, ModelError> {
    let rank = t.shape_of(x).rank();
    axis_of(dim, rank.saturating_sub(1)).map_err(ModelError::Invalid)
}

impl Layer for Softmax {
    fn kind(&self) -> &'static str {
        "Softmax"
    }

    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        self.check(input)?;
        Ok(input.to_vec())
    }

    fn parameters(&self, input: &[usize], _: &mut SplitMix64) -> Result<Vec<LayerParam>, String> {
        self.check(input)?;
        Ok(Vec::new())
    }

    fn forward(
        &self,
        t: &mut Trace<'_>,
        x: NodeId,
        _params: &[NodeId],
        _cx: &LayerCx,
    ) -> Result<LayerOutput, ModelError> {
        let axis = recorded_axis(t, &x, self.dim)?;
        Ok(LayerOutput::of(t.softmax(&x, axis)?))
    }
}

impl Layer for LogSoftmax {
    fn kind(&self) -> &'static str {
        "LogSoftmax"
    }

    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        self.check(input)?;
        Ok(input.to_vec())
    }

    fn parameters(&self, input: &[usize], _: &mut SplitMix64) -> Result<Vec<LayerParam>, String> {
        self.check(input)?;
        Ok(Vec::new())
    }

    fn forward(
        &self,
        t: &mut Trace<'_>,
        x: NodeId,
        _params: &[NodeId],
        _cx: &LayerCx,
    ) -> Result<LayerOutput, ModelError> {
        let axis = recorded_axis(t, &x, self.dim)?;
        Ok(LayerOutput::of(t.log_softmax(&x, axis)?))
    }
}
