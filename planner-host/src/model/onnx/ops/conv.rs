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
/// ONNX's reference and PyTorch) and the overhang added to the end pads: `ceil_overhang` tells
/// whether any was.
pub(super) fn window_geometry(
    cx: &NodeCx<'_>,
    input: &[usize],
    kernel: &[usize],
    ceil_mode: bool,
) -> Result<(Window, bool), OnnxError> {
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
    let mut overhang = false;
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
                overhang = true;
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

/// The pooling window of a `MaxPool` or `AveragePool` node over `x`, and whether `ceil_mode`
/// added end padding past the explicit pads.
pub(super) fn pool_window(cx: &NodeCx<'_>, x: NodeId) -> Result<(PoolWindow, bool), OnnxError> {
    let input = spatial_extents(cx, x)?;
    let n = input.len();
    let kernel = spatial_ints(cx, "kernel_shape", n, 0)?;
    if cx.attr_ints("kernel_shape").is_none() || kernel.contains(&0) {
        return Err(cx.invalid("no kernel_shape, or an extent of 0"));
    }
    let ceil_mode = cx.attr_int("ceil_mode", 0) != 0;
    let (g, overhang) = window_geometry(cx, &input, &kernel, ceil_mode)?;
    let w = |v: usize| {
        u16::try_from(v)
            .map_err(|_| cx.unsupported(format!("a window value {v}"), "values up to 65535"))
    };
    let win = if n == 1 {
        PoolWindow::new_1d(
            w(kernel[0])?,
            w(g.strides[0])?,
            [w(g.pads[0])?, w(g.pads[1])?],
        )
        .with_dilations([1, w(g.dilations[0])?])
    } else {
        PoolWindow::new_2d(
            [w(kernel[0])?, w(kernel[1])?],
            [w(g.strides[0])?, w(g.strides[1])?],
            [w(g.pads[0])?, w(g.pads[1])?, w(g.pads[2])?, w(g.pads[3])?],
        )
        .with_dilations([w(g.dilations[0])?, w(g.dilations[1])?])
    };
    Ok((win, overhang))
}

pub(super) fn max_pool(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    let column_major = match cx.attr_int("storage_order", 0) {
        0 => false,
        1 => true,
        v => return Err(cx.invalid(format!("storage_order {v}"))),
    };
    let (win, _) = pool_window(cx, x)?;
    let y = cx.record(|t| t.max_pool(&x, win))?;
    cx.set_output(0, y, FLOAT)?;
    if cx.has_output(1) {
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
        let dims = dims_of(s);
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
    let x = cx.data(0)?;
    let include = cx.attr_int("count_include_pad", 0) != 0;
    let (win, overhang) = pool_window(cx, x)?;
    if include && overhang {
        return Err(cx.unsupported(
            "ceil_mode with count_include_pad=1 and a window past the end padding",
            "ceil_mode with count_include_pad=0, or windows within the padding",
        ));
    }
    let win = win.with_count_include_pad(include);
    let y = cx.record(|t| t.avg_pool(&x, win))?;
    cx.set_output(0, y, FLOAT)
}

pub(super) fn global_average_pool(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let x = cx.data(0)?;
    spatial_extents(cx, x)?;
    let y = cx.record(|t| t.global_avg_pool(&x))?;
    cx.set_output(0, y, FLOAT)
}
