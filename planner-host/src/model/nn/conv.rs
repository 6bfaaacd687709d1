//! `Conv1d` and `Conv2d`: PyTorch's `nn.Conv1d` and `nn.Conv2d`.

use tapeplan_core::{ConvAttr, NodeId, Recordable, Trace};

use super::{
    checked_elems, conv_u32, expect_rank, leaf, param, uniform_fan_in, window_extent, Layer,
    LayerCx, LayerOutput, LayerParam,
};
use crate::model::graph::ModelError;
use crate::protocol::SplitMix64;

/// What both convolutions share: channels, kernel, stride, padding (symmetric, as PyTorch's
/// integer `padding`), dilation, groups, bias; `[h, w]` per axis (1-D uses the first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ConvSpec {
    spatial: usize,
    in_channels: usize,
    out_channels: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
    has_bias: bool,
}

impl ConvSpec {
    fn new(spatial: usize, in_channels: usize, out_channels: usize, kernel: [usize; 2]) -> Self {
        ConvSpec {
            spatial,
            in_channels,
            out_channels,
            kernel,
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
            has_bias: true,
        }
    }

    fn kernel_elems(&self) -> usize {
        self.kernel[..self.spatial].iter().product()
    }

    fn weight_shape(&self) -> Vec<usize> {
        let mut s = vec![self.out_channels, self.in_channels / self.groups.max(1)];
        s.extend_from_slice(&self.kernel[..self.spatial]);
        s
    }

    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        let what = if self.spatial == 1 {
            "[C, L]"
        } else {
            "[C, H, W]"
        };
        expect_rank(input, &[self.spatial + 1], what)?;
        if self.groups == 0
            || !self.in_channels.is_multiple_of(self.groups)
            || !self.out_channels.is_multiple_of(self.groups)
        {
            return Err(format!(
                "groups {} must divide in_channels {} and out_channels {}",
                self.groups, self.in_channels, self.out_channels
            ));
        }
        if input[0] != self.in_channels {
            return Err(format!(
                "expects {} input channels, got {}",
                self.in_channels, input[0]
            ));
        }
        let mut out = vec![self.out_channels];
        for a in 0..self.spatial {
            out.push(window_extent(
                input[a + 1],
                self.kernel[a],
                self.stride[a],
                self.padding[a],
                self.dilation[a],
            )?);
        }
        Ok(out)
    }

    fn parameters(&self, input: &[usize], rng: &mut SplitMix64) -> Result<Vec<LayerParam>, String> {
        self.output_shape(input)?;
        let fan_in = self.in_channels / self.groups * self.kernel_elems();
        let w = self.weight_shape();
        let n = checked_elems(&w)?;
        let mut out = vec![param("weight", w, uniform_fan_in(n, fan_in, rng))];
        if self.has_bias {
            out.push(param(
                "bias",
                vec![self.out_channels],
                uniform_fan_in(self.out_channels, fan_in, rng),
            ));
        }
        Ok(out)
    }

    fn attr(&self) -> Result<ConvAttr, String> {
        let u = |v: [usize; 2], what: &str| -> Result<[u32; 2], String> {
            Ok([conv_u32(v[0], what)?, conv_u32(v[1], what)?])
        };
        let (s, p, d) = (
            u(self.stride, "stride")?,
            u(self.padding, "padding")?,
            u(self.dilation, "dilation")?,
        );
        let g = conv_u32(self.groups, "groups")?;
        Ok(if self.spatial == 1 {
            ConvAttr::d1(s[0], p[0], p[0], d[0], g)
        } else {
            ConvAttr::d2(s, p, p, d, g)
        })
    }

    fn forward(
        &self,
        t: &mut Trace<'_>,
        x: NodeId,
        params: &[NodeId],
        kind: &str,
    ) -> Result<LayerOutput, ModelError> {
        let attr = self.attr().map_err(ModelError::Invalid)?;
        let w = leaf(params, 0, kind)?;
        let b = if self.has_bias {
            Some(leaf(params, 1, kind)?)
        } else {
            None
        };
        Ok(LayerOutput::of(t.conv(&x, &w, b.as_ref(), attr)?))
    }
}

macro_rules! conv_layer {
    ($name:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name(ConvSpec);

        impl $name {
            /// The step between output positions (default 1).
            pub fn stride(mut self, stride: usize) -> Self {
                self.0.stride = [stride, stride];
                self
            }

            /// Implicit zeros on both sides of each spatial axis (default 0).
            pub fn padding(mut self, padding: usize) -> Self {
                self.0.padding = [padding, padding];
                self
            }

            /// The step between kernel taps (default 1).
            pub fn dilation(mut self, dilation: usize) -> Self {
                self.0.dilation = [dilation, dilation];
                self
            }

            /// The number of channel groups (default 1; `in_channels` for depthwise).
            pub fn groups(mut self, groups: usize) -> Self {
                self.0.groups = groups;
                self
            }

            /// With or without the bias (`bias=False`).
            pub fn bias(mut self, has_bias: bool) -> Self {
                self.0.has_bias = has_bias;
                self
            }
        }

        impl Layer for $name {
            fn kind(&self) -> &'static str {
                stringify!($name)
            }

            fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
                self.0.output_shape(input)
            }

            fn parameters(
                &self,
                input: &[usize],
                rng: &mut SplitMix64,
            ) -> Result<Vec<LayerParam>, String> {
                self.0.parameters(input, rng)
            }

            fn forward(
                &self,
                t: &mut Trace<'_>,
                x: NodeId,
                params: &[NodeId],
                _cx: &LayerCx,
            ) -> Result<LayerOutput, ModelError> {
                self.0.forward(t, x, params, stringify!($name))
            }
        }
    };
}

conv_layer!(
    Conv1d,
    "A 1-D convolution (PyTorch's `nn.Conv1d`, a cross-correlation).\n\n# Shapes\nInput \
     `[C_in, L]` (without the batch), output `[C_out, L_out]` with `L_out = ⌊(L + 2·padding − \
     dilation·(kernel − 1) − 1) / stride⌋ + 1`; `weight` `[C_out, C_in / groups, kernel]`, \
     `bias` `[C_out]`. Initialized as PyTorch's `reset_parameters` \
     ([`super::uniform_fan_in`], `fan_in = C_in / groups · kernel`)."
);

conv_layer!(
    Conv2d,
    "A 2-D convolution (PyTorch's `nn.Conv2d`, a cross-correlation).\n\n# Shapes\nInput \
     `[C_in, H, W]` (without the batch), output `[C_out, H_out, W_out]`, each extent as \
     [`Conv1d`]'s; `weight` `[C_out, C_in / groups, kH, kW]`, `bias` `[C_out]`. Arguments \
     are one value for both axes, or `[h, w]` through the `_hw` methods. Initialized as PyTorch's `reset_parameters` \
     (`fan_in = C_in / groups · kH · kW`)."
);

impl Conv1d {
    /// `nn.Conv1d(in_channels, out_channels, kernel_size)`.
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: usize) -> Conv1d {
        Conv1d(ConvSpec::new(
            1,
            in_channels,
            out_channels,
            [kernel_size, 1],
        ))
    }
}

impl Conv2d {
    /// `nn.Conv2d(in_channels, out_channels, kernel_size)`, a square kernel.
    pub fn new(in_channels: usize, out_channels: usize, kernel_size: usize) -> Conv2d {
        Conv2d(ConvSpec::new(
            2,
            in_channels,
            out_channels,
            [kernel_size, kernel_size],
        ))
    }

    /// The kernel `[kH, kW]` (PyTorch's tuple `kernel_size`).
    pub fn kernel_size_hw(mut self, kernel_size: [usize; 2]) -> Conv2d {
        self.0.kernel = kernel_size;
        self
    }

    /// The stride `[h, w]`.
    pub fn stride_hw(mut self, stride: [usize; 2]) -> Conv2d {
        self.0.stride = stride;
        self
    }

    /// The padding `[h, w]` (each on both sides of its axis).
    pub fn padding_hw(mut self, padding: [usize; 2]) -> Conv2d {
        self.0.padding = padding;
        self
    }

    /// The dilation `[h, w]`.
    pub fn dilation_hw(mut self, dilation: [usize; 2]) -> Conv2d {
        self.0.dilation = dilation;
        self
    }
}
