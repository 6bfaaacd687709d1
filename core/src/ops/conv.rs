//! `conv`: convolution (cross-correlation, as PyTorch's `nn.Conv1d`/`nn.Conv2d` and ONNX's
//! `Conv` compute it), 1-D and 2-D, channels first, with strides, explicit padding per side,
//! dilations and groups (depthwise included: `groups == C_in`). Its attribute is
//! [`Attr::Conv`]`(`[`ConvAttr`]`)`.
//!
//! # Shapes
//! `x: [N, C_in, L]`, `w: [C_out, C_in / groups, K]` → `[N, C_out, L_out]` (1-D);
//! `x: [N, C_in, H, W]`, `w: [C_out, C_in / groups, K_h, K_w]` → `[N, C_out, H_out, W_out]`
//! (2-D), where along each spatial axis
//! `out = (in + pad_begin + pad_end − dilation · (K − 1) − 1) / stride + 1` (rounded down, as
//! ONNX and PyTorch define it). Output channel `co` belongs to group `co / (C_out / groups)` and
//! reads that group's `C_in / groups` input channels.
//!
//! # Three instructions whose rules close
//! `y = conv(x, w)` is bilinear. Its adjoints are two more instructions over the same attribute,
//! and the adjoints of those are again among the three (⟨·,·⟩ the sum of elementwise products):
//!
//! | instruction | computes | `ā` (first argument) | `b̄` (second argument) |
//! |---|---|---|---|
//! | `conv(x, w) → y` | the convolution | `x̄ = conv_transpose(ȳ, w)` | `w̄ = conv_weight_grad(x, ȳ)` |
//! | `conv_transpose(g, w) → z` ([`super::conv_transpose`]) | `x`-shaped: the input gradient | `ḡ = conv(z̄, w)` | `w̄ = conv_weight_grad(z̄, g)` |
//! | `conv_weight_grad(x, g) → u` ([`super::conv_weight_grad`]) | `w`-shaped: the weight gradient | `x̄ = conv_transpose(g, ū)` | `ḡ = conv(x, ū)` |
//!
//! All three follow from the one identity `⟨g, conv(x, w)⟩ = ⟨conv_transpose(g, w), x⟩ =
//! ⟨conv_weight_grad(x, g), w⟩`, so a Hessian-vector product (or any higher derivative) through
//! a CNN speaks only these three plus what the rest of the model speaks. The attribute's
//! `extent` is each instruction's output spatial extent (a transposed convolution cannot infer
//! `x`'s extent, nor the weight gradient `w`'s, from its arguments when a stride exceeds 1); a
//! rule sets it from the shape of the argument whose gradient it forms.
//!
//! # Bias: a composition, not an argument
//! [`Recordable::conv`] with a bias records `add(y, broadcast(reshape(bias, [C_out, 1(, 1)]),
//! shape(y)))`. The bits are those of a bias added inside the kernel after the accumulation
//! (one rounding, the same operands). The arena is the same too in a fused plan (the default):
//! the fusion pass keeps a `broadcast` feeding an elementwise chain in a register slot, a tile
//! at a time, so the bias never takes a `y`-sized buffer (only `--no-fusion` plans pay one). In
//! exchange the three instructions keep two arguments each, the bias's gradient is `sum_to`'s
//! existing rule, and the closure table above stays three rows.
//!
//! # Padding
//! A tap whose input position falls in the padding contributes nothing: it is skipped, not
//! added as `0 · w` (which would be NaN for an infinite weight). Every accumulation starts from
//! `+0.0`, so an output no tap reaches is `+0.0`.

use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, ConvAttr, Element, Opcode, Recordable, Shape};

/// Why a convolution's attribute does not fit its arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvError {
    /// The attribute's spatial axes are not 1 or 2, or an argument's rank is not 2 more.
    SpatialRank,
    /// A 1-D attribute whose second slot is not neutral (stride and dilation 1, padding and
    /// extent 0).
    UnusedSlot,
    /// A stride of 0.
    ZeroStride,
    /// A dilation of 0.
    ZeroDilation,
    /// Zero groups.
    ZeroGroups,
    /// A kernel extent of 0.
    ZeroKernel,
    /// `groups` does not divide the input or output channels, or the weight's second extent
    /// is not `C_in / groups`.
    Groups,
    /// The dilated kernel is longer than the padded input along an axis: the output would be
    /// empty.
    EmptyOutput,
    /// An extent, padded extent or channel count does not fit the machine's integers.
    Overflow,
    /// The attribute's output extent is not the one the shapes give.
    Extent,
    /// The arguments' batch or channel counts, or their spatial extents, disagree.
    Mismatch,
}

impl core::fmt::Display for ConvError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ConvError::SpatialRank => {
                "the arguments' ranks are not 2 + the attribute's spatial axes (1 or 2)"
            }
            ConvError::UnusedSlot => {
                "a 1-D attribute's second axis is not neutral (stride 1, padding 0, dilation 1, extent 0)"
            }
            ConvError::ZeroStride => "a stride is 0",
            ConvError::ZeroDilation => "a dilation is 0",
            ConvError::ZeroGroups => "groups is 0",
            ConvError::ZeroKernel => "a kernel extent is 0",
            ConvError::Groups => {
                "groups does not divide the channels, or the weight's input channels are not C_in / groups"
            }
            ConvError::EmptyOutput => {
                "the dilated kernel is longer than the padded input: the output would be empty"
            }
            ConvError::Overflow => "an extent overflows",
            ConvError::Extent => "the attribute's output extent disagrees with the shapes",
            ConvError::Mismatch => "the arguments' batch, channel or spatial extents disagree",
        })
    }
}

/// One spatial axis of a convolution: extents, stride, dilation and leading padding. Every
/// index a kernel forms along it, `o · stride + k · dilation`, is below the padded input extent,
/// which [`geometry`] checked fits a `usize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Axis {
    /// The input's extent.
    pub input: usize,
    /// The kernel's extent (at least 1).
    pub kernel: usize,
    /// The output's extent.
    pub output: usize,
    /// The stride (at least 1).
    pub stride: usize,
    /// The dilation (at least 1).
    pub dilation: usize,
    /// The padding before the first input element.
    pub pad: usize,
}

impl Axis {
    /// A trivial axis (extent 1, kernel 1): a 1-D convolution's height.
    const UNIT: Axis = Axis {
        input: 1,
        kernel: 1,
        output: 1,
        stride: 1,
        dilation: 1,
        pad: 0,
    };

    fn new(
        input: usize,
        kernel: usize,
        stride: u32,
        dilation: u32,
        pad_begin: u32,
        pad_end: u32,
    ) -> Result<Axis, ConvError> {
        if stride == 0 {
            return Err(ConvError::ZeroStride);
        }
        if dilation == 0 {
            return Err(ConvError::ZeroDilation);
        }
        if kernel == 0 {
            return Err(ConvError::ZeroKernel);
        }
        let of = |x: usize| u64::try_from(x).map_err(|_| ConvError::Overflow);
        let padded = of(input)?
            .checked_add(u64::from(pad_begin))
            .and_then(|p| p.checked_add(u64::from(pad_end)))
            .ok_or(ConvError::Overflow)?;
        let reach = (of(kernel)? - 1)
            .checked_mul(u64::from(dilation))
            .and_then(|r| r.checked_add(1))
            .ok_or(ConvError::Overflow)?;
        if reach > padded {
            return Err(ConvError::EmptyOutput);
        }
        // Every index the kernels form is below `padded`: it must fit a `usize`.
        usize::try_from(padded).map_err(|_| ConvError::Overflow)?;
        let output = (padded - reach) / u64::from(stride) + 1;
        let us = |x: u64| usize::try_from(x).map_err(|_| ConvError::Overflow);
        Ok(Axis {
            input,
            kernel,
            output: us(output)?,
            stride: us(stride.into())?,
            dilation: us(dilation.into())?,
            pad: us(pad_begin.into())?,
        })
    }

    /// The output positions `[lo, hi)` whose tap `k` reads inside the input (not the
    /// padding): `0 ≤ o · stride + k · dilation − pad < input`.
    pub fn valid(&self, k: usize) -> (usize, usize) {
        let kd = k * self.dilation;
        let lo = if self.pad > kd {
            (self.pad - kd).div_ceil(self.stride)
        } else {
            0
        };
        let last = self.input + self.pad; // one past the last input position, padded coordinates
        if self.input == 0 || last <= kd {
            return (0, 0);
        }
        let hi = ((last - 1 - kd) / self.stride + 1).min(self.output);
        (lo.min(hi), hi)
    }

    /// The input position tap `k` of output `o` reads (`o` within [`Axis::valid`]`(k)`).
    #[inline(always)]
    pub fn source(&self, o: usize, k: usize) -> usize {
        o * self.stride + k * self.dilation - self.pad
    }
}

/// The sizes of one convolution `x: [N, C_in, …] ⊛ w: [C_out, C_in / groups, …] → y: [N, C_out,
/// …]`, a 1-D problem as a 2-D one of height 1 (`axes[0]` trivial).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The number of spatial axes of the tensors (1 or 2).
    pub spatial: usize,
    /// `N`.
    pub batch: usize,
    /// `C_in`.
    pub c_in: usize,
    /// `C_out`.
    pub c_out: usize,
    /// `groups` (at least 1, dividing both channel counts).
    pub groups: usize,
    /// Height, then width.
    pub axes: [Axis; 2],
}

impl Geometry {
    /// The element counts of one channel's input plane, output plane and kernel:
    /// `(H·W, H_out·W_out, K_h·K_w)`.
    pub fn planes(&self) -> (usize, usize, usize) {
        let [h, w] = self.axes;
        (h.input * w.input, h.output * w.output, h.kernel * w.kernel)
    }

    /// Input channels per group.
    pub fn c_in_group(&self) -> usize {
        self.c_in / self.groups
    }

    /// Output channels per group.
    pub fn c_out_group(&self) -> usize {
        self.c_out / self.groups
    }

    /// `x`'s element count.
    #[inline(never)]
    pub fn x_elems(&self) -> usize {
        let [h, w] = self.axes;
        prod(&[self.batch, self.c_in, h.input, w.input])
    }

    /// `w`'s element count.
    pub fn w_elems(&self) -> usize {
        let [h, w] = self.axes;
        prod(&[self.c_out, self.c_in_group(), h.kernel, w.kernel])
    }

    /// `y`'s element count.
    #[inline(never)]
    pub fn y_elems(&self) -> usize {
        let [h, w] = self.axes;
        prod(&[self.batch, self.c_out, h.output, w.output])
    }

    /// The spatial extents picked by `f`, in the attribute's slot order (unused slot 0).
    fn slots(&self, f: impl Fn(&Axis) -> usize) -> [usize; 2] {
        if self.spatial == 1 {
            [f(&self.axes[1]), 0]
        } else {
            [f(&self.axes[0]), f(&self.axes[1])]
        }
    }

    /// A tensor shape `[lead, channels, extents…]` with this problem's spatial rank.
    fn shape(&self, lead: usize, channels: usize, extents: [usize; 2]) -> Result<Shape, OpError> {
        tensor_shape(self.spatial, lead, channels, extents)
    }

    /// `y`'s shape.
    pub fn y_shape(&self) -> Result<Shape, OpError> {
        self.shape(self.batch, self.c_out, self.slots(|a| a.output))
    }
}

/// A product of extents, saturating (a shape the rule accepted never saturates).
#[inline(never)]
fn prod(x: &[usize]) -> usize {
    x.iter().fold(1, |a: usize, &b| a.saturating_mul(b))
}

/// The convolution attribute of `attr` (a neutral one for another kind, which
/// [`super::infer`] has rejected before any caller gets here).
#[inline(never)]
pub fn conv_attr(attr: Attr) -> ConvAttr {
    match attr {
        Attr::Conv(c) => c,
        _ => ConvAttr::d1(1, 0, 0, 1, 1),
    }
}

/// The shape `[lead, channels, extents…]` with `spatial` (1 or 2) spatial axes.
pub(crate) fn tensor_shape(
    spatial: usize,
    lead: usize,
    channels: usize,
    extents: [usize; 2],
) -> Result<Shape, OpError> {
    let d = [lead, channels, extents[0], extents[1]];
    Ok(Shape::new(&d[..2 + spatial.min(2)])?)
}

/// The spatial extents of `s` after batch and channels, in slot order.
pub(crate) fn spatial_of(s: Shape) -> [usize; 2] {
    let d = s.dims();
    [d[2], if s.rank() > 3 { d[3] } else { 0 }]
}

/// The sizes of `conv(x, w)` under `a`, every value checked; `args` are the instruction's
/// argument shapes, which an error names.
///
/// # Errors
/// [`OpError::Conv`] naming what does not fit (see [`ConvError`]).
pub fn geometry(
    op: Opcode,
    a: &ConvAttr,
    x: Shape,
    w: Shape,
    args: (Shape, Shape),
) -> Result<Geometry, OpError> {
    let err = |error| OpError::Conv {
        op,
        error,
        lhs: args.0,
        rhs: args.1,
    };
    let spatial = match a.spatial {
        1 => 1,
        2 => 2,
        _ => return Err(err(ConvError::SpatialRank)),
    };
    if x.rank() != 2 + spatial || w.rank() != 2 + spatial {
        return Err(err(ConvError::SpatialRank));
    }
    if spatial == 1
        && (a.stride[1] != 1
            || a.dilation[1] != 1
            || a.pad_begin[1] != 0
            || a.pad_end[1] != 0
            || a.extent[1] != 0)
    {
        return Err(err(ConvError::UnusedSlot));
    }
    let groups = usize::try_from(a.groups).map_err(|_| err(ConvError::Overflow))?;
    if groups == 0 {
        return Err(err(ConvError::ZeroGroups));
    }
    let (xd, wd) = (x.dims(), w.dims());
    let (batch, c_in, c_out, c_in_group) = (xd[0], xd[1], wd[0], wd[1]);
    if c_in % groups != 0 || c_out % groups != 0 || c_in / groups != c_in_group {
        return Err(err(ConvError::Groups));
    }
    let axis = |slot: usize, dim: usize| {
        Axis::new(
            xd[dim],
            wd[dim],
            a.stride[slot],
            a.dilation[slot],
            a.pad_begin[slot],
            a.pad_end[slot],
        )
        .map_err(err)
    };
    let axes = if spatial == 1 {
        [Axis::UNIT, axis(0, 2)?]
    } else {
        [axis(0, 2)?, axis(1, 3)?]
    };
    Ok(Geometry {
        spatial,
        batch,
        c_in,
        c_out,
        groups,
        axes,
    })
}

/// The geometry of the convolution that an adjoint instruction (`conv_transpose(g, w)`, or
/// `conv_weight_grad(x, g)`) belongs to, with the adjoint's output shape (`x`'s, or `w`'s,
/// spatial extent the attribute's `extent`); every value checked: the forward convolution of
/// that `x` by that `w` must give `g`'s shape.
///
/// # Errors
/// [`OpError::Conv`] naming what does not fit.
pub fn adjoint_geometry(
    op: Opcode,
    a: &ConvAttr,
    lhs: Shape,
    rhs: Shape,
) -> Result<(Geometry, Shape), OpError> {
    let err = |error| OpError::Conv {
        op,
        error,
        lhs,
        rhs,
    };
    let r = usize::from(a.spatial);
    if !(1..=2).contains(&r) || lhs.rank() != 2 + r || rhs.rank() != 2 + r {
        return Err(err(ConvError::SpatialRank));
    }
    let groups = usize::try_from(a.groups).map_err(|_| err(ConvError::Overflow))?;
    if groups == 0 {
        return Err(err(ConvError::ZeroGroups));
    }
    let e = a.extent.map(|e| usize::try_from(e).unwrap_or(usize::MAX));
    let (l, rd) = (lhs.dims(), rhs.dims());
    let (x, w, g) = if op == Opcode::ConvTranspose {
        // `lhs` is `g: [N, C_out, …]`, `rhs` is `w: [C_out, C_in / groups, …]`.
        let c_in = rd[1].checked_mul(groups).ok_or(err(ConvError::Overflow))?;
        (tensor_shape(r, l[0], c_in, e)?, rhs, lhs)
    } else {
        // `lhs` is `x: [N, C_in, …]`, `rhs` is `g: [N, C_out, …]`.
        if l[1] % groups != 0 {
            return Err(err(ConvError::Groups));
        }
        (lhs, tensor_shape(r, rd[1], l[1] / groups, e)?, rhs)
    };
    let geo = geometry(op, a, x, w, (lhs, rhs))?;
    if geo.y_shape()? != g {
        return Err(err(ConvError::Mismatch));
    }
    Ok((geo, if op == Opcode::ConvTranspose { x } else { w }))
}

/// Checks that the attribute's `extent` is `extents` (in slot order).
pub(crate) fn check_extent(
    op: Opcode,
    a: &ConvAttr,
    extents: [usize; 2],
    args: (Shape, Shape),
) -> Result<(), OpError> {
    let same = a
        .extent
        .iter()
        .zip(extents)
        .all(|(&e, x)| usize::try_from(e).is_ok_and(|e| e == x));
    if same {
        Ok(())
    } else {
        Err(OpError::Conv {
            op,
            error: ConvError::Extent,
            lhs: args.0,
            rhs: args.1,
        })
    }
}

/// The output spatial extents of `conv(x, w)` under `a` (slot order; the unused slot 0), which
/// [`Recordable::conv`] writes into the attribute.
///
/// # Errors
/// As [`geometry`].
pub fn output_extent(a: &ConvAttr, x: Shape, w: Shape) -> Result<[usize; 2], OpError> {
    Ok(geometry(Opcode::Conv, a, x, w, (x, w))?.slots(|ax| ax.output))
}

/// The shape rule: see the module's `# Shapes`; the attribute's `extent` must be the output's
/// spatial extent.
///
/// # Errors
/// [`OpError::Conv`] when the attribute does not fit the arguments.
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (x, w) = (super::nth(args, 0), super::nth(args, 1));
    let a = conv_attr(attr);
    let g = geometry(op, &a, x, w, (x, w))?;
    check_extent(op, &a, g.slots(|ax| ax.output), (x, w))?;
    g.y_shape()
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let (x, w) = (k.shape(0), k.shape(1));
    let g = geometry(k.op, &conv_attr(k.attr), x, w, (x, w))?;
    kernel(k.arg(0), k.arg(1), k.out, &g);
    Ok(())
}

/// The reference kernel: `y = conv(x, w)` over row-major `x`, `w`, `y` of [`Geometry`] `g`.
///
/// # Arithmetic order (the definition of the bits)
/// Each output element `y[n, co, oh, ow]` is accumulated on its own, starting from `+0.0`: over
/// the input channels of its group in increasing order, then over the kernel taps `(kh, kw)` in
/// row-major order, `acc = acc + x[n, ci, ih, iw] * w[co, ci_local, kh, kw]` (a rounded product,
/// then a rounded sum; never a fused multiply-add), with `ih = oh · stride_h + kh · dilation_h −
/// pad_h` and likewise `iw`; a tap whose `(ih, iw)` lies in the padding is skipped. A vectorized
/// kernel vectorizes across outputs (`ow`, `oh`, `co`) and keeps this order for each output.
///
/// Writes nothing if a buffer is shorter than `g` needs; the dispatcher [`super::eval`] checks
/// lengths first.
pub fn kernel<E: Element>(x: &[E], w: &[E], out: &mut [E], g: &Geometry) {
    if x.len() < g.x_elems() || w.len() < g.w_elems() || out.len() < g.y_elems() {
        return;
    }
    let [ah, aw] = g.axes;
    let (cin_g, cout_g) = (g.c_in_group(), g.c_out_group());
    let (hw_in, hw_out, taps) = g.planes();
    for n in 0..g.batch {
        for co in 0..g.c_out {
            let plane = &mut out[(n * g.c_out + co) * hw_out..][..hw_out];
            for o in plane.iter_mut() {
                *o = E::ZERO;
            }
            let group = co / cout_g;
            for cil in 0..cin_g {
                let ci = group * cin_g + cil;
                let xc = &x[(n * g.c_in + ci) * hw_in..][..hw_in];
                let wc = &w[(co * cin_g + cil) * taps..][..taps];
                for kh in 0..ah.kernel {
                    let (oh_lo, oh_hi) = ah.valid(kh);
                    for kw in 0..aw.kernel {
                        let wv = wc[kh * aw.kernel + kw];
                        let (ow_lo, ow_hi) = aw.valid(kw);
                        for oh in oh_lo..oh_hi {
                            let xrow = &xc[ah.source(oh, kh) * aw.input..][..aw.input];
                            let orow = &mut plane[oh * aw.output..][..aw.output];
                            for ow in ow_lo..ow_hi {
                                orow[ow] = orow[ow] + xrow[aw.source(ow, kw)] * wv;
                            }
                        }
                    }
                }
            }
        }
    }
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let (x, w, g) = (v.args[0], v.args[1], v.cotangent);
    let a = conv_attr(v.attr);
    let dx = want(v.wants[0], || {
        let e = spatial_of(r.shape_of(x));
        r.conv_transpose(g, w, a, &e[..a.spatial_rank()])
    })?;
    let dw = want(v.wants[1], || {
        let e = spatial_of(r.shape_of(w));
        r.conv_weight_grad(x, g, a, &e[..a.spatial_rank()])
    })?;
    Ok([dx, dw, None])
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    fn s(d: &[usize]) -> Shape {
        Shape::new(d).unwrap()
    }

    fn run(a: ConvAttr, x: &[f32], xs: &[usize], w: &[f32], ws: &[usize]) -> (Shape, Vec<f32>) {
        let (xs, ws) = (s(xs), s(ws));
        let e = output_extent(&a, xs, ws).unwrap();
        let attr = Attr::Conv(a.with_extent(&e[..a.spatial_rank()]));
        let out = super::super::infer(Opcode::Conv, attr, &[xs, ws]).unwrap();
        let mut y = vec![f32::NAN; out.elems()];
        super::super::eval(
            Opcode::Conv,
            attr,
            crate::MathProfile::Precise,
            &[x, w],
            &[xs, ws],
            &mut y,
        )
        .unwrap();
        (out, y)
    }

    #[test]
    fn one_d_literal_stride_padding_dilation() {
        // x = [1, 2, 3, 4, 5], w = [1, 10, 100], padding 2 before and 1 after, dilation 2,
        // stride 2: padded x = [0, 0, 1, 2, 3, 4, 5, 0] (8 positions), reach 5, outputs at
        // padded positions 0, 2: taps at 0, 2, 4 and 2, 4, 6.
        // y0 = 0·1 + 1·10 + 3·100 = 310; y1 = 1·1 + 3·10 + 5·100 = 531.
        let a = ConvAttr::d1(2, 2, 1, 2, 1);
        let (out, y) = run(
            a,
            &[1., 2., 3., 4., 5.],
            &[1, 1, 5],
            &[1., 10., 100.],
            &[1, 1, 3],
        );
        assert_eq!(out, s(&[1, 1, 2]));
        assert_eq!(y, [310., 531.]);
    }

    #[test]
    fn two_d_literal_asymmetric_padding() {
        // x 3×3 = 1..9, w 2×2 = [[1, 2], [3, 4]], padding top 1, left 0, bottom 0, right 1,
        // stride 1: the padded input is 4×4 with a zero row on top and a zero column on the
        // right; outputs 3×3.
        let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let a = ConvAttr::d2([1, 1], [1, 0], [0, 1], [1, 1], 1);
        let (out, y) = run(a, &x, &[1, 1, 3, 3], &[1., 2., 3., 4.], &[1, 1, 2, 2]);
        assert_eq!(out, s(&[1, 1, 3, 3]));
        // Row 0 reads padding (top) and x row 0: 3·x[0, c] + 4·x[0, c + 1].
        // y[0,0] = 3·1 + 4·2 = 11, y[0,1] = 3·2 + 4·3 = 18, y[0,2] = 3·3 + 4·0 = 9.
        // y[1,0] = 1·1 + 2·2 + 3·4 + 4·5 = 37, y[1,1] = 2 + 6 + 15 + 24 = 47, y[1,2] = 3 + 18 = 21.
        // y[2,0] = 4 + 10 + 21 + 32 = 67, y[2,1] = 5 + 12 + 24 + 36 = 77, y[2,2] = 6 + 27 = 33.
        assert_eq!(y, [11., 18., 9., 37., 47., 21., 67., 77., 33.]);
    }

    #[test]
    fn groups_and_depthwise() {
        // Two groups, C_in = 2, C_out = 2, 1-D, kernel 1: each output channel scales its own
        // input channel.
        let a = ConvAttr::d1(1, 0, 0, 1, 2);
        let (_, y) = run(a, &[1., 2., 3., 4.], &[1, 2, 2], &[10., 100.], &[2, 1, 1]);
        assert_eq!(y, [10., 20., 300., 400.]);
        // Depthwise with a channel multiplier of 2: groups = C_in = 2, C_out = 4.
        let (_, y) = run(
            a,
            &[1., 2., 3., 4.],
            &[1, 2, 2],
            &[1., 2., 3., 4.],
            &[4, 1, 1],
        );
        assert_eq!(y, [1., 2., 2., 4., 9., 12., 12., 16.]);
    }

    #[test]
    fn padding_taps_are_skipped_not_multiplied() {
        // An infinite weight on a tap that only ever reads padding leaves the output finite.
        let a = ConvAttr::d1(1, 1, 0, 1, 1);
        let (_, y) = run(a, &[2.0], &[1, 1, 1], &[f32::INFINITY, 3.0], &[1, 1, 2]);
        assert_eq!(y, [6.0]);
    }

    #[test]
    fn order_is_channels_then_taps_from_plus_zero() {
        // Products (channel, tap): (0, 0) = 1e8, (0, 1) = -1e8, (1, 0) = 1, (1, 1) = 0.
        // Channels then taps: ((1e8 - 1e8) + 1) + 0 = 1. Taps then channels would lose the 1:
        // (1e8 + 1) - 1e8 = 0; so would the reverse order.
        let a = ConvAttr::d1(1, 0, 0, 1, 1);
        let (_, y) = run(
            a,
            &[1e8, -1e8, 1.0, 0.0],
            &[1, 2, 2],
            &[1.0, 1.0, 1.0, 1.0],
            &[1, 2, 2],
        );
        assert_eq!(y, [1.0]);
    }

    #[test]
    fn onnx_attributes_map_onto_the_fields() {
        // ONNX `pads` is every begin, then every end.
        assert_eq!(
            ConvAttr::from_onnx(&[2, 1], &[1, 0, 2, 3], &[1, 2], 2),
            Some(ConvAttr::d2([2, 1], [1, 0], [2, 3], [1, 2], 2))
        );
        assert_eq!(
            ConvAttr::from_onnx(&[3], &[1, 2], &[2], 1),
            Some(ConvAttr::d1(3, 1, 2, 2, 1))
        );
        assert_eq!(ConvAttr::from_onnx(&[1], &[0, 0, 0, 0], &[1], 1), None);
        assert_eq!(ConvAttr::from_onnx(&[1, 1, 1], &[0; 6], &[1; 3], 1), None);
        assert_eq!(ConvAttr::from_onnx(&[-1], &[0, 0], &[1], 1), None);
        assert_eq!(ConvAttr::from_onnx(&[1], &[0, 0], &[1], 1 << 40), None);
    }

    #[test]
    fn hostile_attributes_are_refused() {
        let (x, w) = (s(&[1, 4, 5, 5]), s(&[4, 2, 3, 3]));
        let ok = ConvAttr::d2([1, 1], [0, 0], [0, 0], [1, 1], 2);
        let e = output_extent(&ok, x, w).unwrap();
        let ok = ok.with_extent(&e);
        let bad = |f: &dyn Fn(&mut ConvAttr), x: Shape, w: Shape| {
            let mut a = ok;
            f(&mut a);
            match infer(Opcode::Conv, Attr::Conv(a), &[x, w]) {
                Err(OpError::Conv { error, .. }) => error,
                other => panic!("accepted: {other:?}"),
            }
        };
        assert!(infer(Opcode::Conv, Attr::Conv(ok), &[x, w]).is_ok());
        assert_eq!(bad(&|a| a.stride[1] = 0, x, w), ConvError::ZeroStride);
        assert_eq!(bad(&|a| a.dilation[0] = 0, x, w), ConvError::ZeroDilation);
        assert_eq!(bad(&|a| a.groups = 0, x, w), ConvError::ZeroGroups);
        assert_eq!(bad(&|a| a.groups = 3, x, w), ConvError::Groups);
        assert_eq!(bad(&|a| a.groups = 1, x, w), ConvError::Groups);
        assert_eq!(bad(&|a| a.dilation[0] = 3, x, w), ConvError::EmptyOutput);
        assert_eq!(bad(&|a| a.spatial = 3, x, w), ConvError::SpatialRank);
        assert_eq!(bad(&|a| a.extent[0] = 2, x, w), ConvError::Extent);
        assert_eq!(
            bad(&|a| a.dilation[1] = u32::MAX, x, w),
            ConvError::EmptyOutput
        );
        assert_eq!(bad(&|a| a.pad_begin[1] = u32::MAX, x, w), ConvError::Extent);
        assert_eq!(bad(&|_| {}, x, s(&[4, 2, 0, 3])), ConvError::ZeroKernel);
        assert_eq!(bad(&|_| {}, s(&[1, 4, 5]), w), ConvError::SpatialRank);
        let one = ConvAttr::d1(1, 0, 0, 1, 1).with_extent(&[3]);
        let mut junk = one;
        junk.stride[1] = 2;
        assert_eq!(
            infer(
                Opcode::Conv,
                Attr::Conv(junk),
                &[s(&[1, 1, 5]), s(&[1, 1, 3])]
            ),
            Err(OpError::Conv {
                op: Opcode::Conv,
                error: ConvError::UnusedSlot,
                lhs: s(&[1, 1, 5]),
                rhs: s(&[1, 1, 3]),
            })
        );
        assert!(infer(
            Opcode::Conv,
            Attr::Conv(one),
            &[s(&[1, 1, 5]), s(&[1, 1, 3])]
        )
        .is_ok());
        // Another kind of attribute.
        assert!(matches!(
            super::super::infer(Opcode::Conv, Attr::None, &[x, w]),
            Err(OpError::BadAttr { .. })
        ));
    }
}
