//! Pooling: PyTorch's `nn.MaxPool1d/2d`, `nn.AvgPool1d/2d`, `nn.AdaptiveAvgPool1d/2d`, and
//! ONNX's `GlobalAveragePool`.

use tapeplan_core::{NodeId, PoolWindow, Recordable, Trace};

use super::{expect_rank, pool_u16, window_extent, Layer, LayerCx, LayerOutput, LayerParam};
use crate::model::graph::ModelError;
use crate::protocol::SplitMix64;

/// A pooling window over 1 or 2 spatial axes, `[h, w]` per array (1-D uses the first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    spatial: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
}

impl Window {
    fn new(spatial: usize, kernel: [usize; 2]) -> Window {
        Window {
            spatial,
            kernel,
            stride: kernel,
            padding: [0, 0],
            dilation: [1, 1],
        }
    }

    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        let what = if self.spatial == 1 {
            "[C, L]"
        } else {
            "[C, H, W]"
        };
        expect_rank(input, &[self.spatial + 1], what)?;
        let mut out = vec![input[0]];
        for a in 0..self.spatial {
            if 2 * self.padding[a] > self.kernel[a] {
                return Err(format!(
                    "padding {} must be at most half the kernel {} (PyTorch's rule)",
                    self.padding[a], self.kernel[a]
                ));
            }
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

    fn pool_window(&self) -> Result<PoolWindow, ModelError> {
        let u = |v: usize, what: &str| pool_u16(v, what).map_err(ModelError::Invalid);
        let (k, s, p, d) = (self.kernel, self.stride, self.padding, self.dilation);
        Ok(if self.spatial == 1 {
            PoolWindow::new_1d(
                u(k[0], "kernel")?,
                u(s[0], "stride")?,
                [u(p[0], "padding")?; 2],
            )
            .with_dilations([1, u(d[0], "dilation")?])
        } else {
            let (ph, pw) = (u(p[0], "padding")?, u(p[1], "padding")?);
            PoolWindow::new_2d(
                [u(k[0], "kernel")?, u(k[1], "kernel")?],
                [u(s[0], "stride")?, u(s[1], "stride")?],
                [ph, pw, ph, pw],
            )
            .with_dilations([u(d[0], "dilation")?, u(d[1], "dilation")?])
        })
    }
}

/// The builder methods and the [`Layer`] implementation of a pooling layer over a [`Window`].
macro_rules! pool_layer {
    ($name:ident, $max:expr, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub struct $name {
            window: Window,
            count_include_pad: bool,
        }

        impl $name {
            /// The step between windows (default: the kernel size).
            pub fn stride(mut self, stride: usize) -> Self {
                self.window.stride = [stride, stride];
                self
            }

            /// Implicit padding on both sides of each spatial axis (default 0; at most half the
            /// kernel). Max pooling never picks padding; average pooling counts it in the
            /// divisor when `count_include_pad` (PyTorch's default).
            pub fn padding(mut self, padding: usize) -> Self {
                self.window.padding = [padding, padding];
                self
            }
        }

        impl Layer for $name {
            fn kind(&self) -> &'static str {
                stringify!($name)
            }

            fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
                self.window.output_shape(input)
            }

            fn parameters(
                &self,
                input: &[usize],
                _rng: &mut SplitMix64,
            ) -> Result<Vec<LayerParam>, String> {
                self.window.output_shape(input)?;
                Ok(Vec::new())
            }

            fn forward(
                &self,
                t: &mut Trace<'_>,
                x: NodeId,
                _params: &[NodeId],
                _cx: &LayerCx,
            ) -> Result<LayerOutput, ModelError> {
                let w = self.window.pool_window()?;
                let y = if $max {
                    t.max_pool(&x, w)?
                } else {
                    t.avg_pool(&x, w.with_count_include_pad(self.count_include_pad))?
                };
                Ok(LayerOutput::of(y))
            }
        }
    };
}

pool_layer!(
    MaxPool1d,
    true,
    "1-D max pooling (PyTorch's `nn.MaxPool1d`, floor mode).\n\n# Shapes\n`[C, L]` → `[C, \
     L_out]`, `L_out = ⌊(L + 2·padding − dilation·(kernel − 1) − 1) / stride⌋ + 1`."
);
pool_layer!(
    MaxPool2d,
    true,
    "2-D max pooling (PyTorch's `nn.MaxPool2d`, floor mode).\n\n# Shapes\n`[C, H, W]` → `[C, \
     H_out, W_out]`, each extent as [`MaxPool1d`]'s."
);
pool_layer!(
    AvgPool1d,
    false,
    "1-D average pooling (PyTorch's `nn.AvgPool1d`, floor mode, `count_include_pad=True` by \
     default).\n\n# Shapes\n`[C, L]` → `[C, L_out]`, `L_out = ⌊(L + 2·padding − kernel) / \
     stride⌋ + 1`."
);
pool_layer!(
    AvgPool2d,
    false,
    "2-D average pooling (PyTorch's `nn.AvgPool2d`, floor mode, `count_include_pad=True` by \
     default).\n\n# Shapes\n`[C, H, W]` → `[C, H_out, W_out]`, each extent as \
     [`AvgPool1d`]'s."
);

impl MaxPool1d {
    /// `nn.MaxPool1d(kernel_size)` (stride defaults to the kernel).
    pub fn new(kernel_size: usize) -> MaxPool1d {
        MaxPool1d {
            window: Window::new(1, [kernel_size, 1]),
            count_include_pad: false,
        }
    }

    /// The step between window taps (default 1).
    pub fn dilation(mut self, dilation: usize) -> MaxPool1d {
        self.window.dilation[0] = dilation;
        self
    }
}

impl MaxPool2d {
    /// `nn.MaxPool2d(kernel_size)`, a square window (stride defaults to the kernel).
    pub fn new(kernel_size: usize) -> MaxPool2d {
        MaxPool2d::new_hw([kernel_size, kernel_size])
    }

    /// `nn.MaxPool2d((kH, kW))` (stride defaults to the kernel).
    pub fn new_hw(kernel_size: [usize; 2]) -> MaxPool2d {
        MaxPool2d {
            window: Window::new(2, kernel_size),
            count_include_pad: false,
        }
    }

    /// The step between window taps (default 1).
    pub fn dilation(mut self, dilation: usize) -> MaxPool2d {
        self.window.dilation = [dilation, dilation];
        self
    }
}

/// The `[h, w]` builder methods of a 2-D pooling layer.
macro_rules! pool_2d_hw {
    ($name:ident) => {
        impl $name {
            /// The stride `[h, w]`.
            pub fn stride_hw(mut self, stride: [usize; 2]) -> $name {
                self.window.stride = stride;
                self
            }

            /// The padding `[h, w]` (each on both sides of its axis).
            pub fn padding_hw(mut self, padding: [usize; 2]) -> $name {
                self.window.padding = padding;
                self
            }
        }
    };
}

pool_2d_hw!(MaxPool2d);
pool_2d_hw!(AvgPool2d);

impl AvgPool1d {
    /// `nn.AvgPool1d(kernel_size)` (stride defaults to the kernel).
    pub fn new(kernel_size: usize) -> AvgPool1d {
        AvgPool1d {
            window: Window::new(1, [kernel_size, 1]),
            count_include_pad: true,
        }
    }

    /// Whether padded positions count in the divisor (default true, as PyTorch).
    pub fn count_include_pad(mut self, include: bool) -> AvgPool1d {
        self.count_include_pad = include;
        self
    }
}

impl AvgPool2d {
    /// `nn.AvgPool2d(kernel_size)`, a square window (stride defaults to the kernel).
    pub fn new(kernel_size: usize) -> AvgPool2d {
        AvgPool2d::new_hw([kernel_size, kernel_size])
    }

    /// `nn.AvgPool2d((kH, kW))` (stride defaults to the kernel).
    pub fn new_hw(kernel_size: [usize; 2]) -> AvgPool2d {
        AvgPool2d {
            window: Window::new(2, kernel_size),
            count_include_pad: true,
        }
    }

    /// Whether padded positions count in the divisor (default true, as PyTorch).
    pub fn count_include_pad(mut self, include: bool) -> AvgPool2d {
        self.count_include_pad = include;
        self
    }
}

/// The window of an adaptive average pooling from `input` to `output` extents: PyTorch's
/// adaptive windows (`[⌊i·L/out⌋, ⌈(i+1)·L/out⌉)`) are all of size `L / out` with stride
/// `L / out` exactly when `out` divides `L`; other sizes (overlapping, uneven windows) are
/// refused.
fn adaptive_window(spatial: usize, input: &[usize], output: [usize; 2]) -> Result<Window, String> {
    let what = if spatial == 1 { "[C, L]" } else { "[C, H, W]" };
    expect_rank(input, &[spatial + 1], what)?;
    let mut kernel = [1, 1];
    for a in 0..spatial {
        let (len, out) = (input[a + 1], output[a]);
        if out == 0 || !len.is_multiple_of(out) {
            return Err(format!(
                "output size {out} must divide the input extent {len} (uneven adaptive \
                 windows are not supported)"
            ));
        }
        kernel[a] = len / out;
    }
    Ok(Window::new(spatial, kernel))
}

/// Adaptive average pooling to a fixed output size (PyTorch's `nn.AdaptiveAvgPool1d`), for
/// output sizes that divide the input extent.
///
/// # Shapes
/// `[C, L]` → `[C, output_size]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveAvgPool1d(pub usize);

/// Adaptive average pooling to a fixed output size (PyTorch's `nn.AdaptiveAvgPool2d`), for
/// output sizes that divide the input extents.
///
/// # Shapes
/// `[C, H, W]` → `[C, out_h, out_w]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveAvgPool2d(pub [usize; 2]);

impl AdaptiveAvgPool1d {
    /// `nn.AdaptiveAvgPool1d(output_size)`.
    pub fn new(output_size: usize) -> AdaptiveAvgPool1d {
        AdaptiveAvgPool1d(output_size)
    }
}

impl AdaptiveAvgPool2d {
    /// `nn.AdaptiveAvgPool2d(output_size)`, a square output.
    pub fn new(output_size: usize) -> AdaptiveAvgPool2d {
        AdaptiveAvgPool2d([output_size, output_size])
    }

    /// `nn.AdaptiveAvgPool2d((h, w))`.
    pub fn new_hw(output_size: [usize; 2]) -> AdaptiveAvgPool2d {
        AdaptiveAvgPool2d(output_size)
    }
}

/// The [`Layer`] implementation of an adaptive pooling layer.
macro_rules! adaptive_layer {
    ($name:ident, $spatial:expr, $size:expr) => {
        impl Layer for $name {
            fn kind(&self) -> &'static str {
                stringify!($name)
            }

            fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
                adaptive_window($spatial, input, $size(self))?.output_shape(input)
            }

            fn parameters(
                &self,
                input: &[usize],
                _rng: &mut SplitMix64,
            ) -> Result<Vec<LayerParam>, String> {
                self.output_shape(input)?;
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
                let dims = s.dims();
                let w = adaptive_window($spatial, &dims[1..s.rank()], $size(self))
                    .map_err(ModelError::Invalid)?
                    .pool_window()?;
                Ok(LayerOutput::of(t.avg_pool(&x, w)?))
            }
        }
    };
}

adaptive_layer!(AdaptiveAvgPool1d, 1, |l: &AdaptiveAvgPool1d| [l.0, 1]);
adaptive_layer!(AdaptiveAvgPool2d, 2, |l: &AdaptiveAvgPool2d| l.0);

/// Global average pooling (ONNX's `GlobalAveragePool`; PyTorch's `AdaptiveAvgPool*d(1)`): the
/// mean over every spatial position, per channel, spatial axes kept at extent 1.
///
/// # Shapes
/// `[C, L]` → `[C, 1]`; `[C, H, W]` → `[C, 1, 1]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobalAvgPool;

impl Layer for GlobalAvgPool {
    fn kind(&self) -> &'static str {
        "GlobalAvgPool"
    }

    fn output_shape(&self, input: &[usize]) -> Result<Vec<usize>, String> {
        expect_rank(input, &[2, 3], "[C, L] or [C, H, W]")?;
        let mut out = vec![1; input.len()];
        out[0] = input[0];
        Ok(out)
    }

    fn parameters(
        &self,
        input: &[usize],
        _rng: &mut SplitMix64,
    ) -> Result<Vec<LayerParam>, String> {
        self.output_shape(input)?;
        Ok(Vec::new())
    }

    fn forward(
        &self,
        t: &mut Trace<'_>,
        x: NodeId,
        _params: &[NodeId],
        _cx: &LayerCx,
    ) -> Result<LayerOutput, ModelError> {
        Ok(LayerOutput::of(t.global_avg_pool(&x)?))
    }
}
