//! Windowed operators: `Conv`, `MaxPool`, `AveragePool`, `GlobalAveragePool`, and their shared geometry (`auto_pad`, `ceil_mode`).

use tapeplan_core::{ConvAttr, NodeId, PoolWindow, Recordable};

use crate::model::onnx::tensor::TensorData;
use crate::model::onnx::translate::{dims_of, NodeCx, FLOAT, INT64};
use crate::model::onnx::OnnxError;

/// A windowed operator's geometry (Conv, the pools) per spatial axis, its pads explicit.
pub(super) struct Window {
    strides: Vec<usize>,
    dilations: Vec<usize>,
    /// ONNX's order: every axis's begin, then every axis's end.
    pads: Vec<usize>,
}

/// An attribute list of `n` non-negative values, or `default` everywhere when absent.
pub(super) fn spatial_ints(
    cx: &NodeCx<'_>,
    name: &str,
    n: usize,
    default: usize,
) -> Result<Vec<usize>, OnnxError> {
    let Some(v) = cx.attr_ints(name) else {
        return Ok(vec![default; n]);
    };
    if v.len() != n {
        return Err(cx.invalid(format!("{name} has {} values for {n} axes", v.len())));
    }
    v.iter()
        .map(|&x| usize::try_from(x).map_err(|_| cx.invalid(format!("{name} value {x}"))))
        .collect()
}

/// The geometry of a windowed node over spatial extents `input` and kernel extents `kernel`:
/// `strides`, `dilations`, and the pads from `pads` or `auto_pad` (`SAME_UPPER`/`SAME_LOWER`:
/// `ceil(in / stride)` outputs, the total padding split evenly, the odd one at the end or the
/// beginning; `VALID`: none), made explicit at plan time. With `ceil_mode` (the pools), the
/// output extent is rounded up (a last window that would start in the end padding dropped, as
/// ONNX's reference and PyTorch) and the overhang added to the end pads; the second value is
/// each axis's overhang (0 without `ceil_mode`).
pub(super) fn window_geometry(
    cx: &NodeCx<'_>,
    input: &[usize],
    kernel: &[usize],
    ceil_mode: bool,
) -> Result<(Window, Vec<usize>), OnnxError> {
    let n = input.len();
    let strides = spatial_ints(cx, "strides", n, 1)?;
    let dilations = spatial_ints(cx, "dilations", n, 1)?;
    if strides.contains(&0) || dilations.contains(&0) {
        return Err(cx.invalid("a stride or dilation of 0"));
    }
    // Saturating: a hostile value saturates, and the instruction's attribute (u32, u16)
    // refuses it.
    let span = |a: usize| {
        kernel[a]
            .saturating_sub(1)
            .saturating_mul(dilations[a])
            .saturating_add(1)
    };
    let auto_pad = cx.attr_string("auto_pad", "NOTSET");
    let mut pads = match auto_pad.as_str() {
        "NOTSET" => spatial_ints(cx, "pads", 2 * n, 0)?,
        "VALID" => vec![0; 2 * n],
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut p = vec![0; 2 * n];
            for a in 0..n {
                let out = input[a].div_ceil(strides[a]);
                let total = ((out - 1) * strides[a])
                    .saturating_add(span(a))
                    .saturating_sub(input[a]);
                let small = total / 2;
                let (b, e) = if auto_pad == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                };
                p[a] = b;
                p[n + a] = e;
            }
            p
        }
        other => {
            return Err(cx.unsupported(
                format!("auto_pad {other:?}"),
                "auto_pad NOTSET, VALID, SAME_UPPER, SAME_LOWER",
            ))
        }
    };
    let mut overhang = vec![0; n];
    for a in 0..n {
        let padded = input[a].saturating_add(pads[a]).saturating_add(pads[n + a]);
        if padded < span(a) {
            return Err(cx.invalid(format!(
                "a window of {} does not fit {padded} padded positions",
                span(a)
            )));
        }
        if ceil_mode {
            let mut out = (padded - span(a)).div_ceil(strides[a]) + 1;
            if (out - 1).saturating_mul(strides[a]) >= input[a].saturating_add(pads[a]) {
                out -= 1;
            }
            let need = (out - 1).saturating_mul(strides[a]).saturating_add(span(a));
            if need > padded {
                pads[n + a] = pads[n + a].saturating_add(need - padded);
                overhang[a] = need - padded;
            }
        }
    }
    Ok((
        Window {
            strides,
            dilations,
            pads,
        },
        overhang,
    ))
}

/// The spatial extents of a channels-first input `[N, C, ..]` with one or two spatial axes.
pub(super) fn spatial_extents(cx: &NodeCx<'_>, x: NodeId) -> Result<Vec<usize>, OnnxError> {
    let dims = dims_of(cx.shape(x)?);
    if !(3..=4).contains(&dims.len()) {
        return Err(cx.unsupported(
            format!("an input of rank {}", dims.len()),
            "1-D and 2-D windows (inputs [N, C, L] and [N, C, H, W])",
        ));
    }
    Ok(dims[2..].to_vec())
}

pub(super) fn conv(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let w = cx.data(1)?;
    let b = if cx.has_input(2) {
        Some(cx.data(2)?)
    } else {
        None
    };
    let input = spatial_extents(cx, x)?;
    let kernel = dims_of(cx.shape(w)?)
        .get(2..)
        .map(<[usize]>::to_vec)
        .unwrap_or_default();
    if kernel.len() != input.len() {
        return Err(cx.invalid(format!(
            "a kernel of rank {} for the input",
            kernel.len() + 2
        )));
    }
    if let Some(k) = cx.attr_ints("kernel_shape") {
        if k.iter()
            .map(|&v| usize::try_from(v).ok())
            .ne(kernel.iter().map(|&v| Some(v)))
        {
            return Err(cx.invalid(format!("kernel_shape {k:?} is not the weight's {kernel:?}")));
        }
    }
    let (g, _) = window_geometry(cx, &input, &kernel, false)?;
    let as_i64 = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
    let attr = ConvAttr::from_onnx(
        &as_i64(&g.strides),
        &as_i64(&g.pads),
        &as_i64(&g.dilations),
        cx.attr_int("group", 1),
    )
    .ok_or_else(|| cx.invalid("strides, pads, dilations or group out of range"))?;
    let y = cx.record(|t| t.conv(&x, &w, b.as_ref(), attr))?;
    cx.set_output(0, y, FLOAT)
}

/// The geometry of a `MaxPool` or `AveragePool` node over spatial extents `input` (1, 2 or 3
/// axes): its kernel, its [`Window`] (`ceil_mode`'s overhang in the end pads) and each axis's
/// overhang.
fn pool_geometry(
    cx: &NodeCx<'_>,
    input: &[usize],
) -> Result<(Vec<usize>, Window, Vec<usize>), OnnxError> {
    let n = input.len();
    let kernel = spatial_ints(cx, "kernel_shape", n, 0)?;
    if cx.attr_ints("kernel_shape").is_none() || kernel.contains(&0) {
        return Err(cx.invalid("no kernel_shape, or an extent of 0"));
    }
    let ceil_mode = cx.attr_int("ceil_mode", 0) != 0;
    let (g, overhang) = window_geometry(cx, input, &kernel, ceil_mode)?;
    Ok((kernel, g, overhang))
}

/// The pooling instructions' windows of a geometry over 1, 2 or 3 spatial axes: one window
/// for 1-D (`[N, C, L]`) and 2-D (`[N, C, H, W]`); for 3-D two, the (H, W) window then the D
/// window, see [`pool_nd`].
fn pool_windows(
    cx: &NodeCx<'_>,
    kernel: &[usize],
    g: &Window,
) -> Result<Vec<PoolWindow>, OnnxError> {
    let w = |v: usize| {
        u16::try_from(v)
            .map_err(|_| cx.unsupported(format!("a window value {v}"), "values up to 65535"))
    };
    let (k, s, d, p) = (kernel, &g.strides, &g.dilations, &g.pads);
    Ok(match kernel.len() {
        1 => vec![PoolWindow::new_1d(w(k[0])?, w(s[0])?, [w(p[0])?, w(p[1])?])
            .with_dilations([1, w(d[0])?])],
        2 => vec![PoolWindow::new_2d(
            [w(k[0])?, w(k[1])?],
            [w(s[0])?, w(s[1])?],
            [w(p[0])?, w(p[1])?, w(p[2])?, w(p[3])?],
        )
        .with_dilations([w(d[0])?, w(d[1])?])],
        // ONNX's pads: [d_begin, h_begin, w_begin, d_end, h_end, w_end].
        _ => vec![
            PoolWindow::new_2d(
                [w(k[1])?, w(k[2])?],
                [w(s[1])?, w(s[2])?],
                [w(p[1])?, w(p[2])?, w(p[4])?, w(p[5])?],
            )
            .with_dilations([w(d[1])?, w(d[2])?]),
            PoolWindow::new_2d([w(k[0])?, 1], [w(s[0])?, 1], [w(p[0])?, 0, w(p[3])?, 0])
                .with_dilations([w(d[0])?, 1]),
        ],
    })
}

/// A pooling node's input: the tape node, its ONNX extents (`[N, C, L]`, `[N, C, H, W]` or
/// `[N, C, D, H, W]`, the last held folded as `[N·C, D, H, W]`) and its spatial extents.
fn pool_input(cx: &mut NodeCx<'_>) -> Result<(NodeId, Vec<usize>, Vec<usize>), OnnxError> {
    let (x, dims) = cx.data_rank5(0)?;
    if !(3..=5).contains(&dims.len()) {
        return Err(cx.unsupported(
            format!("an input of rank {}", dims.len()),
            "1-D, 2-D and 3-D windows (inputs [N, C, L], [N, C, H, W] and [N, C, D, H, W])",
        ));
    }
    let spatial = dims[2..].to_vec();
    Ok((x, dims, spatial))
}

/// Pools `x` (ONNX extents `dims`) through `windows` with `pool` (`max_pool` or `avg_pool`) and
/// sets output 0. 1-D and 2-D: one instruction. 3-D (`[N, C, D, H, W]`, on the tape
/// `[N·C, D, H, W]`): the box window is a product of one window per axis, and both reductions
/// are separable over it:
///
/// 1. `z = pool(x, (H, W) window)`: a 2-D pool with `N·C` as the batch and `D` as the
///    channels, `[N·C, D, H', W']`;
/// 2. `y = pool(reshape(z, [N·C, 1, D, H'·W']), D window)`: a 2-D pool whose width window is
///    one tap (kernel 1, stride 1, no pads), so that it pools `D` alone, `[N·C, 1, D', H'·W']`,
///    reshaped to `[N·C, D', H', W']` (ONNX's `[N, C, D', H', W']`).
///
/// Max: the maximum over the box is the maximum over `d` of the maxima over `(h, w)`; step 1
/// keeps each `(h, w)` window's first maximum in row-major order, step 2 the first `d` whose
/// maximum is the largest, so the element kept (and the gradient's destination through
/// `max_pool`'s rule) is the first maximum of the box in row-major window order: first by `d`,
/// then by `(h, w)`, the 3-D window's own order. Padding is `-inf` in both steps.
///
/// Average: the real taps of a box window are the product of each axis's real taps, so the
/// box's count is the product of the counts (`count_include_pad=0`), as the kernel's tap count
/// is the product of the axes' (`count_include_pad=1`), and the mean over the box is the mean
/// over `d` of the means over `(h, w)` (in exact arithmetic; in `f32` a rounding per mean, within
/// the row's `sums` tolerance).
fn pool_nd(
    cx: &mut NodeCx<'_>,
    x: NodeId,
    dims: &[usize],
    windows: &[PoolWindow],
    pool: fn(
        &mut tapeplan_core::Trace<'_>,
        &NodeId,
        PoolWindow,
    ) -> Result<NodeId, tapeplan_core::TapeError>,
) -> Result<(), OnnxError> {
    let [hw, d] = windows else {
        let y = cx.record(|t| pool(t, &x, windows[0]))?;
        return cx.set_output(0, y, FLOAT);
    };
    let z = cx.record(|t| pool(t, &x, *hw))?;
    let zs = dims_of(cx.shape(z)?);
    let (planes, depth, h_out, w_out) = (zs[0], zs[1], zs[2], zs[3]);
    let z = cx.reshape(z, cx.shape_from(&[planes, 1, depth, h_out * w_out])?)?;
    let y = cx.record(|t| pool(t, &z, *d))?;
    let d_out = dims_of(cx.shape(y)?)[2];
    let y = cx.reshape(y, cx.shape_from(&[planes, d_out, h_out, w_out])?)?;
    cx.set_output_rank5(0, y, vec![dims[0], dims[1], d_out, h_out, w_out])
}

pub(super) fn max_pool(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let (x, dims, input) = pool_input(cx)?;
    let column_major = match cx.attr_int("storage_order", 0) {
        0 => false,
        1 => true,
        v => return Err(cx.invalid(format!("storage_order {v}"))),
    };
    let (kernel, g, _) = pool_geometry(cx, &input)?;
    let windows = pool_windows(cx, &kernel, &g)?;
    if dims.len() == 5 && cx.has_output(1) {
        return Err(cx.unsupported(
            "the Indices output of a 3-D MaxPool",
            "Indices of 1-D and 2-D MaxPool (3-D: output Y only)",
        ));
    }
    pool_nd(cx, x, &dims, &windows, |t, x, w| t.max_pool(x, w))?;
    if cx.has_output(1) {
        let win = windows[0];
        // Indices: the flat index of each window's first maximum, read from a table of every
        // element's flat index (exact in f32 below 2^24): row-major, or with `storage_order=1`
        // the spatial axes column-major (`(n·C + c)·H·W + w·H + h`).
        let s = cx.shape(x)?;
        if s.elems() > 1 << 24 {
            return Err(cx.unsupported(
                format!("Indices of {} elements", s.elems()),
                "at most 2^24 elements (f32 integers)",
            ));
        }
        let plane: usize = dims[2..].iter().product();
        let (h, w) = if dims.len() == 4 {
            (dims[2], dims[3])
        } else {
            (1, dims[2])
        };
        let index = |i: usize| {
            let (base, p) = (i - i % plane, i % plane);
            let (r, c) = (p / w, p % w);
            (if column_major { base + c * h + r } else { i }) as f32
        };
        let ramp = TensorData::f32(dims, (0..s.elems()).map(index).collect());
        let ramp = cx.constant("ramp", ramp)?;
        let idx = cx.record(|t| t.max_pool_gather(&x, &ramp, win))?;
        cx.set_output(1, idx, INT64)?;
    }
    Ok(())
}

pub(super) fn average_pool(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let (mut x, dims, input) = pool_input(cx)?;
    let include = cx.attr_int("count_include_pad", 0) != 0;
    let (kernel, mut g, overhang) = pool_geometry(cx, &input)?;
    // Every pad fits the instruction's u16 (checked here, before the pads are summed below).
    pool_windows(cx, &kernel, &g)?;
    let mut include_flag = include;
    if include && overhang.iter().any(|&o| o > 0) {
        // `ceil_mode` with `count_include_pad=1` and a window past the end padding: ONNX's
        // reference (and PyTorch) count a window's explicit padding in its divisor but not the
        // overhang past it. The explicit padding becomes zeros on the tape (`pad`), and the
        // pool counts the real taps only (`count_include_pad=0`) over that padded input: its
        // divisor is then the taps within the explicit padding, the overhang left out.
        let n = input.len();
        let first = dims_of(cx.shape(x)?).len() - n;
        for a in 0..n {
            let (begin, end) = (g.pads[a], g.pads[n + a] - overhang[a]);
            if begin + end == 0 {
                continue;
            }
            let mut target = dims_of(cx.shape(x)?);
            target[first + a] += begin + end;
            let target = cx.shape_from(&target)?;
            x = cx.record(|t| t.pad(&x, first + a, begin, target))?;
            g.pads[a] = 0;
            g.pads[n + a] = overhang[a];
        }
        include_flag = false;
    }
    let windows: Vec<PoolWindow> = pool_windows(cx, &kernel, &g)?
        .into_iter()
        .map(|w| w.with_count_include_pad(include_flag))
        .collect();
    pool_nd(cx, x, &dims, &windows, |t, x, w| t.avg_pool(x, w))
}

pub(super) fn global_average_pool(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    spatial_extents(cx, x)?;
    let y = cx.record(|t| t.global_avg_pool(&x))?;
    cx.set_output(0, y, FLOAT)
}
