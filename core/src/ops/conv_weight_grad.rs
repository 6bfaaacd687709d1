//! `conv_weight_grad`: `conv`'s weight gradient, the correlation of the input with the
//! cotangent (PyTorch's `torch.nn.grad.conv2d_weight`): `u = conv_weight_grad(x, g)` is the `u`
//! with `⟨u, w⟩ = ⟨g, conv(x, w)⟩` for every `w`. Its attribute is `conv`'s, with `extent` the
//! kernel's spatial extent.
//!
//! # Shapes
//! `x: [N, C_in, L]`, `g: [N, C_out, L_out]` → `[C_out, C_in / groups, K]` (1-D; 2-D likewise),
//! `K` the attribute's `extent`, where `conv` of `x` by a `[C_out, C_in / groups, K]` weight
//! under the same attribute gives `g`'s shape.
//!
//! Rule (see [`super::conv`]): `x̄ = conv_transpose(g, ū)`, `ḡ = conv(x, ū)`.

use super::conv::{adjoint_geometry, conv_attr, spatial_of, Geometry};
use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule: see the module's `# Shapes`.
///
/// # Errors
/// [`OpError::Conv`] when the attribute does not fit the arguments.
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (x, g) = (super::nth(args, 0), super::nth(args, 1));
    Ok(adjoint_geometry(op, &conv_attr(attr), x, g)?.1)
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let (geo, _) = adjoint_geometry(k.op, &conv_attr(k.attr), k.shape(0), k.shape(1))?;
    kernel(k.arg(0), k.arg(1), k.out, &geo);
    Ok(())
}

/// The reference kernel: `u = conv_weight_grad(x, g)` over row-major `x`, `g` (`y`-shaped) and
/// `u` (`w`-shaped) of [`Geometry`] `geo` (the forward convolution's).
///
/// # Arithmetic order (the definition of the bits)
/// Each element `u[co, ci_local, kh, kw]` is accumulated on its own, starting from `+0.0`: over
/// the batch `n` in increasing order, then over the output positions `(oh, ow)` in row-major
/// order, `acc = acc + x[n, ci, ih, iw] * g[n, co, oh, ow]` (rounded product, rounded sum, never
/// fused) with `ih = oh · stride_h + kh · dilation_h − pad_h` (likewise `iw`); positions whose
/// `(ih, iw)` lies in the padding are skipped.
///
/// Writes nothing if a buffer is shorter than `geo` needs.
pub fn kernel<E: Element>(x: &[E], g: &[E], out: &mut [E], geo: &Geometry) {
    if x.len() < geo.x_elems() || g.len() < geo.y_elems() || out.len() < geo.w_elems() {
        return;
    }
    let [ah, aw] = geo.axes;
    let (cin_g, cout_g) = (geo.c_in_group(), geo.c_out_group());
    let (hw_in, hw_out, taps) = geo.planes();
    for co in 0..geo.c_out {
        let group = co / cout_g;
        for cil in 0..cin_g {
            let ci = group * cin_g + cil;
            let uc = &mut out[(co * cin_g + cil) * taps..][..taps];
            for kh in 0..ah.kernel {
                let (oh_lo, oh_hi) = ah.valid(kh);
                for kw in 0..aw.kernel {
                    let (ow_lo, ow_hi) = aw.valid(kw);
                    let mut acc = E::ZERO;
                    for n in 0..geo.batch {
                        let xc = &x[(n * geo.c_in + ci) * hw_in..][..hw_in];
                        let gc = &g[(n * geo.c_out + co) * hw_out..][..hw_out];
                        for oh in oh_lo..oh_hi {
                            let xrow = &xc[ah.source(oh, kh) * aw.input..][..aw.input];
                            let grow = &gc[oh * aw.output..][..aw.output];
                            for ow in ow_lo..ow_hi {
                                acc = acc + xrow[aw.source(ow, kw)] * grow[ow];
                            }
                        }
                    }
                    uc[kh * aw.kernel + kw] = acc;
                }
            }
        }
    }
}

pub(crate) fn vjp<R: Recordable>(
    r: &mut R,
    v: &VjpArgs<'_, R::Value>,
) -> Result<Contributions<R::Value>, R::Error> {
    let (x, g, du) = (v.args[0], v.args[1], v.cotangent);
    let a = conv_attr(v.attr);
    let dx = want(v.wants[0], || {
        let e = spatial_of(r.shape_of(x));
        r.conv_transpose(g, du, a, &e[..a.spatial_rank()])
    })?;
    let dg = want(v.wants[1], || r.conv(x, du, None, a))?;
    Ok([dx, dg, None])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConvAttr;

    #[test]
    fn literal_dilated_with_padding() {
        // 1-D, x = [1, 2, 3], padding 1 each side, dilation 2, kernel 2: padded
        // [0, 1, 2, 3, 0], reach 3, outputs at padded 0, 1, 2 (taps at +0 and +2).
        // u[0] = Σ_o x_pad[o] g[o] = 0·g0 + 1·g1 + 2·g2; u[1] = Σ_o x_pad[o + 2] g[o] =
        // 2·g0 + 3·g1 + 0·g2. With g = [1, 10, 100]: u = [210, 32].
        let a = ConvAttr::d1(1, 1, 1, 2, 1).with_extent(&[2]);
        let (x, g) = (
            Shape::new(&[1, 1, 3]).unwrap(),
            Shape::new(&[1, 1, 3]).unwrap(),
        );
        let attr = Attr::Conv(a);
        let us = super::super::infer(Opcode::ConvWeightGrad, attr, &[x, g]).unwrap();
        assert_eq!(us, Shape::new(&[1, 1, 2]).unwrap());
        let mut u = [f32::NAN; 2];
        super::super::eval(
            Opcode::ConvWeightGrad,
            attr,
            crate::MathProfile::Precise,
            &[&[1.0, 2.0, 3.0], &[1.0, 10.0, 100.0]],
            &[x, g],
            &mut u,
        )
        .unwrap();
        assert_eq!(u, [210.0, 32.0]);
    }
}
