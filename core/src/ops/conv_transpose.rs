//! `conv_transpose`: the transposed convolution, `conv`'s input gradient (ONNX's
//! `ConvTranspose` with `output_shape` given and the same weight layout; PyTorch's
//! `torch.nn.grad.conv2d_input`): `z = conv_transpose(g, w)` is the `z` with
//! `⟨z, x⟩ = ⟨g, conv(x, w)⟩` for every `x`. Its attribute is `conv`'s, with `extent` the
//! spatial extent of `z` (the convolution's input).
//!
//! # Shapes
//! `g: [N, C_out, L_out]`, `w: [C_out, C_in / groups, K]` → `[N, C_in, L]` (1-D; 2-D likewise
//! with two spatial axes), `L` the attribute's `extent`, where `conv` of a `[N, C_in, L]` input
//! by `w` under the same attribute gives `L_out`.
//!
//! Rule (see [`super::conv`]): `ḡ = conv(z̄, w)`, `w̄ = conv_weight_grad(z̄, g)`.

use super::conv::{adjoint_geometry, conv_attr, spatial_of, Geometry};
use super::{want, Contributions, Kernel, OpError, VjpArgs};
use crate::{Attr, Element, Opcode, Recordable, Shape};

/// The shape rule: see the module's `# Shapes`.
///
/// # Errors
/// [`OpError::Conv`] when the attribute does not fit the arguments.
pub(crate) fn infer(op: Opcode, attr: Attr, args: &[Shape]) -> Result<Shape, OpError> {
    let (g, w) = (super::nth(args, 0), super::nth(args, 1));
    Ok(adjoint_geometry(op, &conv_attr(attr), g, w)?.1)
}

/// Through [`kernel`].
pub(crate) fn eval<E: Element>(k: Kernel<'_, E>) -> Result<(), OpError> {
    let (geo, _) = adjoint_geometry(k.op, &conv_attr(k.attr), k.shape(0), k.shape(1))?;
    kernel(k.arg(0), k.arg(1), k.out, &geo);
    Ok(())
}

/// The reference kernel: `z = conv_transpose(g, w)` over row-major `g` (`y`-shaped), `w` and
/// `z` (`x`-shaped) of [`Geometry`] `geo` (the forward convolution's).
///
/// # Arithmetic order (the definition of the bits)
/// Each element `z[n, ci, ih, iw]` is accumulated on its own, starting from `+0.0`: over the
/// output channels `co` of its group in increasing order, then over the kernel taps `(kh, kw)`
/// in row-major order, `acc = acc + g[n, co, oh, ow] * w[co, ci_local, kh, kw]` (rounded product,
/// rounded sum, never fused) for the one output position `(oh, ow)` with `oh · stride_h +
/// kh · dilation_h − pad_h = ih` (and likewise `ow`), when it exists; a tap with no such output
/// position (off the stride, or beyond the output) contributes nothing. The kernel scatters
/// over output positions in that order, which is the same order per element: for one `(co, kh,
/// kw)` each `z` element receives at most one product.
///
/// Writes nothing if a buffer is shorter than `geo` needs.
pub fn kernel<E: Element>(g: &[E], w: &[E], out: &mut [E], geo: &Geometry) {
    if g.len() < geo.y_elems() || w.len() < geo.w_elems() || out.len() < geo.x_elems() {
        return;
    }
    let [ah, aw] = geo.axes;
    let (cin_g, cout_g) = (geo.c_in_group(), geo.c_out_group());
    let (hw_in, hw_out, taps) = geo.planes();
    for n in 0..geo.batch {
        for ci in 0..geo.c_in {
            let plane = &mut out[(n * geo.c_in + ci) * hw_in..][..hw_in];
            for o in plane.iter_mut() {
                *o = E::ZERO;
            }
            let (group, cil) = (ci / cin_g, ci % cin_g);
            for col in 0..cout_g {
                let co = group * cout_g + col;
                let gc = &g[(n * geo.c_out + co) * hw_out..][..hw_out];
                let wc = &w[(co * cin_g + cil) * taps..][..taps];
                for kh in 0..ah.kernel {
                    let (oh_lo, oh_hi) = ah.valid(kh);
                    for kw in 0..aw.kernel {
                        let wv = wc[kh * aw.kernel + kw];
                        let (ow_lo, ow_hi) = aw.valid(kw);
                        for oh in oh_lo..oh_hi {
                            let grow = &gc[oh * aw.output..][..aw.output];
                            let zrow = &mut plane[ah.source(oh, kh) * aw.input..][..aw.input];
                            for (ow, &gv) in (ow_lo..ow_hi).zip(&grow[ow_lo..ow_hi]) {
                                let iw = aw.source(ow, kw);
                                zrow[iw] = zrow[iw] + gv * wv;
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
    let (g, w, dz) = (v.args[0], v.args[1], v.cotangent);
    let a = conv_attr(v.attr);
    let dg = want(v.wants[0], || r.conv(dz, w, None, a))?;
    let dw = want(v.wants[1], || {
        let e = spatial_of(r.shape_of(w));
        r.conv_weight_grad(dz, g, a, &e[..a.spatial_rank()])
    })?;
    Ok([dg, dw, None])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ConvAttr;

    #[test]
    fn literal_stride_two_is_a_spread() {
        // 1-D, stride 2, kernel [1, 10], no padding, x of length 5 → y of length 2.
        // z[i] = Σ g[o] w[k] over o·2 + k = i: z = [g0, 10 g0, g1, 10 g1, 0].
        let a = ConvAttr::d1(2, 0, 0, 1, 1).with_extent(&[5]);
        let (g, w) = (
            Shape::new(&[1, 1, 2]).unwrap(),
            Shape::new(&[1, 1, 2]).unwrap(),
        );
        let attr = Attr::Conv(a);
        let zs = super::super::infer(Opcode::ConvTranspose, attr, &[g, w]).unwrap();
        assert_eq!(zs, Shape::new(&[1, 1, 5]).unwrap());
        let mut z = [f32::NAN; 5];
        super::super::eval(
            Opcode::ConvTranspose,
            attr,
            crate::MathProfile::Precise,
            &[&[3.0, 5.0], &[1.0, 10.0]],
            &[g, w],
            &mut z,
        )
        .unwrap();
        assert_eq!(z, [3.0, 30.0, 5.0, 50.0, 0.0]);
        // An extent the forward convolution does not map to the cotangent's is refused: a
        // length-7 input gives 3 outputs, not 2.
        let bad = Attr::Conv(a.with_extent(&[7]));
        assert!(matches!(
            super::super::infer(Opcode::ConvTranspose, bad, &[g, w]),
            Err(OpError::Conv {
                error: super::super::conv::ConvError::Mismatch,
                ..
            })
        ));
    }
}
