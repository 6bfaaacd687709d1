//! An instruction's attribute, typed: what an opcode needs besides its arguments (a fill value,
//! an exponent, a window, an axis, a target shape). Each opcode has one [`AttrKind`] (a column
//! of the opcode table); [`crate::ops::infer`] rejects an attribute of another kind.
//!
//! This is the in-memory form. Its bytes in a plan are written only by
//! [`crate::format::encode_attr`] and read only by [`crate::format::decode_attr`]; the layout is
//! stated once, in `docs/plan-format.md` ("Attributes").

use core::hash::{Hash, Hasher};

use crate::Shape;

/// Which attribute an opcode takes (the opcode table's `attr` column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttrKind {
    /// None: the output shape follows from the arguments.
    None,
    /// A target shape, which is also the output shape.
    Target,
    /// A fill value and the output shape.
    Fill,
    /// A constant exponent.
    Pow,
    /// A window along one axis.
    Window,
    /// One axis.
    Axis,
    /// A convolution's geometry ([`ConvAttr`]).
    Conv,
    /// A pooling window (see [`PoolWindow`]).
    Pool,
    /// A pooling window and the pooled tensor's shape, which is the output shape (the adjoint
    /// of average pooling: the input's extents do not follow from the pooled ones).
    PoolTo,
    /// One axis and the output shape (`scatter_add`, `gather`'s adjoint).
    AxisTo,
    /// A set of axes and a direction (the scans of `prod_to`'s rule).
    Scan,
    /// A learning rate (`sgd_matmul`).
    Lr,
}

impl AttrKind {
    /// The kind's name, as the plan format's opcode table spells it.
    pub const fn name(self) -> &'static str {
        match self {
            AttrKind::None => "none",
            AttrKind::Target => "target",
            AttrKind::Fill => "fill",
            AttrKind::Pow => "pow",
            AttrKind::Window => "window",
            AttrKind::Axis => "axis",
            AttrKind::Conv => "conv",
            AttrKind::Pool => "pool",
            AttrKind::PoolTo => "pool_to",
            AttrKind::AxisTo => "axis_to",
            AttrKind::Scan => "scan",
            AttrKind::Lr => "lr",
        }
    }
}

/// An instruction's attribute.
///
/// New kinds (a pooling window) are new variants here, as the convolution's was
/// ([`ConvAttr`]), a new [`AttrKind`] and a new row of the plan format's attribute table; the
/// format's framing (an inline word or a length-prefixed block) does not change.
#[derive(Clone, Copy, Debug, Default)]
pub enum Attr {
    /// No attribute.
    #[default]
    None,
    /// The output shape, given rather than inferred (leaves, `reshape`, `broadcast`, `sum_to`,
    /// `max_to`, `one_hot`, `uniform`).
    Target(Shape),
    /// `fill`: every element of `shape` equal to `value`.
    Fill {
        /// The value (its bit pattern is kept: `-0.0` and NaN payloads included).
        value: f32,
        /// The output shape.
        shape: Shape,
    },
    /// `pow`: the constant exponent.
    Pow(f32),
    /// `sgd_matmul`: the learning rate.
    Lr(f32),
    /// `slice` and `pad`: the window `[start, start + len)` along `axis` of the larger tensor
    /// (`slice`'s argument, `pad`'s output) — for `slice`, `len` is the output's extent along
    /// `axis`; for `pad`, the output's extent along `axis` (the argument sits at `start`).
    Window {
        /// The axis.
        axis: usize,
        /// The window's first index along `axis`.
        start: usize,
        /// For `slice`: the window's length; for `pad`: the padded extent.
        len: usize,
    },
    /// `concat`: the axis.
    Axis(usize),
    /// `conv`, `conv_transpose`, `conv_weight_grad`: strides, padding per side, dilations,
    /// groups and the output's spatial extent.
    Conv(ConvAttr),
    /// `max_pool`, `max_pool_scatter`, `max_pool_gather`, `avg_pool`: the window.
    Pool(PoolWindow),
    /// `avg_pool_backward`: the window and the output shape (the pooled tensor's).
    PoolTo(PoolWindow, Shape),
    /// `scatter_add`: the axis and the output shape.
    AxisTo(usize, Shape),
    /// `cumprod_exclusive`, `affine_scan`: the axes along which a group runs (bit `k` for
    /// axis `k`; the elements that agree on every other axis form a group, walked in increasing
    /// flat index) and the direction.
    Scan {
        /// The group's axes, a bit mask.
        axes: u8,
        /// Walk each group in decreasing flat index.
        reverse: bool,
    },
}

/// A pooling window over the spatial axes of a channels-first tensor (`[N, C, L]` or
/// `[N, C, H, W]`), in ONNX's terms (`kernel_shape`, `strides`, `dilations`, `pads`,
/// `count_include_pad`), each value at most `u16::MAX`. Entries are per spatial axis `[h, w]`; a 1-D tensor `[N, C, L]` is
/// pooled as `[N, C, 1, L]`, so its values are the `w` entries and the `h` entries must be the
/// identity (kernel 1, stride 1, dilation 1, no padding): [`PoolWindow::new_1d`] builds that.
///
/// The output extent along an axis of extent `len` is ONNX's and PyTorch's floor rule:
/// `(len + pad_begin + pad_end - ((kernel - 1) * dilation + 1)) / stride + 1`. The pooling
/// instructions' shape rule ([`crate::ops::pool`]) also refuses a window that holds no element of the input
/// (only padding): every window has at least one real element.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolWindow {
    /// The kernel's extents `[h, w]` (ONNX `kernel_shape`; each at least 1).
    pub kernel: [u16; 2],
    /// The strides `[h, w]` (each at least 1).
    pub strides: [u16; 2],
    /// The dilations `[h, w]` (each at least 1; 1 is a dense window).
    pub dilations: [u16; 2],
    /// Padding in ONNX's `pads` order: `[h_begin, w_begin, h_end, w_end]`.
    pub pads: [u16; 4],
    /// Average pooling only (`false` for the max-pool opcodes): whether padded positions count
    /// in the divisor. ONNX's `count_include_pad` (default 0: they do not); PyTorch's
    /// `nn.AvgPool2d` defaults to `count_include_pad=True`.
    pub count_include_pad: bool,
}

impl PoolWindow {
    /// A 2-D window: kernel, strides, dilations `[h, w]`, `pads` in ONNX order
    /// `[h_begin, w_begin, h_end, w_end]`.
    pub fn new_2d(kernel: [u16; 2], strides: [u16; 2], pads: [u16; 4]) -> PoolWindow {
        PoolWindow {
            kernel,
            strides,
            dilations: [1, 1],
            pads,
            count_include_pad: false,
        }
    }

    /// A 1-D window (a tensor `[N, C, L]`): kernel, stride, `pads` in ONNX order
    /// `[begin, end]`.
    pub fn new_1d(kernel: u16, stride: u16, pads: [u16; 2]) -> PoolWindow {
        PoolWindow::new_2d([1, kernel], [1, stride], [0, pads[0], 0, pads[1]])
    }

    /// The same window with dilations `[h, w]`.
    pub fn with_dilations(self, dilations: [u16; 2]) -> PoolWindow {
        PoolWindow { dilations, ..self }
    }

    /// The same window with `count_include_pad` set.
    pub fn with_count_include_pad(self, count_include_pad: bool) -> PoolWindow {
        PoolWindow {
            count_include_pad,
            ..self
        }
    }

    /// The plan format's words (the `pool` block, 11 words): kernel `h, w`, strides `h, w`,
    /// dilations `h, w`, pads `h_begin, w_begin, h_end, w_end`, `count_include_pad` (0 or 1).
    pub fn words(&self) -> [u32; 11] {
        let [kh, kw] = self.kernel;
        let [sh, sw] = self.strides;
        let [dh, dw] = self.dilations;
        let [p0, p1, p2, p3] = self.pads;
        let c = u16::from(self.count_include_pad);
        [kh, kw, sh, sw, dh, dw, p0, p1, p2, p3, c].map(u32::from)
    }

    /// The inverse of [`PoolWindow::words`]; `Err(word)` for the first word out of its range
    /// (a value above `u16::MAX`, a flag other than 0 or 1).
    pub fn from_words(w: [u32; 11]) -> Result<PoolWindow, u32> {
        let mut v = [0u16; 11];
        for (o, &x) in v.iter_mut().zip(&w) {
            *o = u16::try_from(x).map_err(|_| x)?;
        }
        let [kh, kw, sh, sw, dh, dw, p0, p1, p2, p3, c] = v;
        let count_include_pad = match c {
            0 => false,
            1 => true,
            _ => return Err(u32::from(c)),
        };
        Ok(PoolWindow {
            kernel: [kh, kw],
            strides: [sh, sw],
            dilations: [dh, dw],
            pads: [p0, p1, p2, p3],
            count_include_pad,
        })
    }
}

impl Attr {
    /// No attribute.
    pub const NONE: Attr = Attr::None;

    /// A target shape.
    pub fn target(shape: Shape) -> Attr {
        Attr::Target(shape)
    }

    /// A fill value and its shape.
    pub fn fill(value: f32, shape: Shape) -> Attr {
        Attr::Fill { value, shape }
    }

    /// The attribute's kind.
    pub fn kind(&self) -> AttrKind {
        match self {
            Attr::None => AttrKind::None,
            Attr::Target(_) => AttrKind::Target,
            Attr::Fill { .. } => AttrKind::Fill,
            Attr::Pow(_) => AttrKind::Pow,
            Attr::Lr(_) => AttrKind::Lr,
            Attr::Window { .. } => AttrKind::Window,
            Attr::Axis(_) => AttrKind::Axis,
            Attr::Conv(_) => AttrKind::Conv,
            Attr::Pool(_) => AttrKind::Pool,
            Attr::PoolTo(..) => AttrKind::PoolTo,
            Attr::AxisTo(..) => AttrKind::AxisTo,
            Attr::Scan { .. } => AttrKind::Scan,
        }
    }

    /// The shape the attribute gives as the output shape (targets and fills), if any.
    pub fn target_shape(&self) -> Option<Shape> {
        match self {
            Attr::Target(s)
            | Attr::Fill { shape: s, .. }
            | Attr::PoolTo(_, s)
            | Attr::AxisTo(_, s) => Some(*s),
            _ => None,
        }
    }

    /// The scalar a `fill` writes, a `pow` raises to or an `sgd_matmul` scales by (`0.0` for
    /// every other attribute).
    pub fn scalar(&self) -> f32 {
        match self {
            Attr::Fill { value, .. } => *value,
            Attr::Pow(p) | Attr::Lr(p) => *p,
            _ => 0.0,
        }
    }

    /// The same attribute with its target shape (if it has one) replaced by `shape`.
    pub fn with_target(self, shape: Shape) -> Attr {
        match self {
            Attr::Target(_) => Attr::Target(shape),
            Attr::Fill { value, .. } => Attr::Fill { value, shape },
            Attr::PoolTo(w, _) => Attr::PoolTo(w, shape),
            Attr::AxisTo(a, _) => Attr::AxisTo(a, shape),
            other => other,
        }
    }

    /// A value that compares and hashes as the attribute does (floats by their bits).
    fn key(&self) -> (AttrKind, [u32; 4], Option<Shape>, Geometry) {
        let u = |x: usize| x as u32;
        match *self {
            Attr::None => (AttrKind::None, [0; 4], None, Geometry::None),
            Attr::Target(s) => (AttrKind::Target, [0; 4], Some(s), Geometry::None),
            Attr::Fill { value, shape } => (
                AttrKind::Fill,
                [value.to_bits(), 0, 0, 0],
                Some(shape),
                Geometry::None,
            ),
            Attr::Pow(p) => (AttrKind::Pow, [p.to_bits(), 0, 0, 0], None, Geometry::None),
            Attr::Lr(p) => (AttrKind::Lr, [p.to_bits(), 0, 0, 0], None, Geometry::None),
            Attr::Window { axis, start, len } => (
                AttrKind::Window,
                [u(axis), u(start), u(len), 0],
                None,
                Geometry::None,
            ),
            Attr::Axis(a) => (AttrKind::Axis, [u(a), 0, 0, 0], None, Geometry::None),
            Attr::Conv(c) => (AttrKind::Conv, [0; 4], None, Geometry::Conv(c)),
            Attr::Pool(w) => (AttrKind::Pool, [0; 4], None, Geometry::Pool(w)),
            Attr::PoolTo(w, s) => (AttrKind::PoolTo, [0; 4], Some(s), Geometry::Pool(w)),
            Attr::AxisTo(a, s) => (AttrKind::AxisTo, [u(a), 0, 0, 0], Some(s), Geometry::None),
            Attr::Scan { axes, reverse } => (
                AttrKind::Scan,
                [u32::from(axes), u32::from(reverse), 0, 0],
                None,
                Geometry::None,
            ),
        }
    }
}

/// The block-sized part of an attribute's comparison key ([`Attr::key`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Geometry {
    None,
    Conv(ConvAttr),
    Pool(PoolWindow),
}

/// Floats compare by their bit patterns (so `-0.0 != 0.0` and a NaN equals itself): two equal
/// attributes give the same bits.
impl PartialEq for Attr {
    fn eq(&self, other: &Attr) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Attr {}

impl Hash for Attr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

/// A convolution's attribute: ONNX `Conv`'s `strides`, `pads`, `dilations` and `group`
/// (PyTorch's `stride`, `padding`, `dilation`, `groups`), per spatial axis, for one or two
/// spatial axes, plus the spatial extent of the instruction's output (which `conv_transpose` and
/// `conv_weight_grad` cannot infer from their arguments: several input extents, or kernel
/// extents, give one output extent when a stride exceeds 1).
///
/// Slot `i` of each array is spatial axis `i` (the axis after batch and channels). A 1-D
/// attribute uses slot 0 only; its slot 1 holds the neutral values (stride and dilation 1,
/// padding 0, extent 0), which the constructors write and the shape rule requires, so that equal
/// convolutions have equal attributes.
///
/// The shape rule ([`crate::ops::conv`]) checks every value against the shapes: strides,
/// dilations and groups of at least 1, groups dividing both channel counts, a dilated kernel
/// that fits the padded input, and no overflow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvAttr {
    /// The number of spatial axes: 1 (`[N, C, L]`) or 2 (`[N, C, H, W]`).
    pub spatial: u8,
    /// The step between output positions, in input elements (ONNX `strides`).
    pub stride: [u32; 2],
    /// Implicit zeros before the first input element (ONNX `pads[i]`).
    pub pad_begin: [u32; 2],
    /// Implicit zeros after the last input element (ONNX `pads[spatial + i]`).
    pub pad_end: [u32; 2],
    /// The step between kernel taps, in input elements (ONNX `dilations`).
    pub dilation: [u32; 2],
    /// The number of channel groups (ONNX `group`; depthwise: `groups == C_in`).
    pub groups: u32,
    /// The spatial extent of the instruction's output: `conv`'s output positions,
    /// `conv_transpose`'s input extent (`x`'s), `conv_weight_grad`'s kernel extent (`w`'s).
    pub extent: [u32; 2],
}

impl ConvAttr {
    /// A 1-D convolution's attribute (`x: [N, C_in, L]`), extent unset (`0`; the
    /// [`crate::Recordable`] spellings set it).
    pub const fn d1(stride: u32, pad_begin: u32, pad_end: u32, dilation: u32, groups: u32) -> Self {
        ConvAttr {
            spatial: 1,
            stride: [stride, 1],
            pad_begin: [pad_begin, 0],
            pad_end: [pad_end, 0],
            dilation: [dilation, 1],
            groups,
            extent: [0, 0],
        }
    }

    /// A 2-D convolution's attribute (`x: [N, C_in, H, W]`), `[height, width]` per array,
    /// extent unset (`0`; the [`crate::Recordable`] spellings set it).
    pub const fn d2(
        stride: [u32; 2],
        pad_begin: [u32; 2],
        pad_end: [u32; 2],
        dilation: [u32; 2],
        groups: u32,
    ) -> Self {
        ConvAttr {
            spatial: 2,
            stride,
            pad_begin,
            pad_end,
            dilation,
            groups,
            extent: [0, 0],
        }
    }

    /// The attribute from ONNX `Conv`'s attributes: `strides`, `pads` (`[x1_begin, x2_begin,
    /// x1_end, x2_end]`, or `[begin, end]` in 1-D), `dilations` and `group`; `None` when the
    /// lengths are not one or two spatial axes' worth, or a value exceeds `u32`.
    pub fn from_onnx(strides: &[i64], pads: &[i64], dilations: &[i64], group: i64) -> Option<Self> {
        let r = strides.len();
        if !(1..=2).contains(&r) || pads.len() != 2 * r || dilations.len() != r {
            return None;
        }
        let w = |x: i64| u32::try_from(x).ok();
        let mut a = ConvAttr::d1(1, 0, 0, 1, w(group)?);
        a.spatial = r as u8;
        for i in 0..r {
            a.stride[i] = w(strides[i])?;
            a.pad_begin[i] = w(pads[i])?;
            a.pad_end[i] = w(pads[r + i])?;
            a.dilation[i] = w(dilations[i])?;
        }
        Some(a)
    }

    /// The number of spatial axes as a count (1 or 2; a larger stored value reads as 2).
    pub fn spatial_rank(&self) -> usize {
        if self.spatial <= 1 {
            1
        } else {
            2
        }
    }

    /// The same attribute with the output's spatial extent `extent` (one value per spatial
    /// axis; a value above `u32::MAX` is stored as `u32::MAX`, which the shape rule refuses).
    pub fn with_extent(mut self, extent: &[usize]) -> Self {
        self.extent = [0, 0];
        for (o, &e) in self.extent.iter_mut().zip(extent) {
            *o = u32::try_from(e).unwrap_or(u32::MAX);
        }
        self
    }
}

impl core::fmt::Display for ConvAttr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let r = self.spatial_rank();
        write!(
            f,
            "stride={:?} pads={:?}{:?} dilation={:?} groups={} extent={:?}",
            &self.stride[..r],
            &self.pad_begin[..r],
            &self.pad_end[..r],
            &self.dilation[..r],
            self.groups,
            &self.extent[..r]
        )
    }
}
