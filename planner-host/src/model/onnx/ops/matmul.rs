//! Matrix products: `MatMul` (batched, broadcast) and `Gemm`.

use tapeplan_core::{Attr, NodeId, Opcode, Shape};

use crate::model::onnx::translate::{broadcast_shapes, dims_of, NodeCx, FLOAT};
use crate::model::onnx::OnnxError;

pub(super) fn matmul(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let (a, b) = (cx.data(0)?, cx.data(1)?);
    let (sa, sb) = (cx.shape(a)?, cx.shape(b)?);
    if sa.rank() == 0 || sb.rank() == 0 {
        return Err(cx.invalid(format!("operands of shapes {sa} and {sb}")));
    }
    // numpy's matmul: a vector is a matrix of one row (`a`) or one column (`b`), that extent
    // dropped from the result; the batch axes (all but the last two) broadcast.
    let (da, db) = (dims_of(sa), dims_of(sb));
    let ma: Vec<usize> = if da.len() == 1 {
        vec![1, da[0]]
    } else {
        da.clone()
    };
    let mb: Vec<usize> = if db.len() == 1 {
        vec![db[0], 1]
    } else {
        db.clone()
    };
    let (ba, bb) = (&ma[..ma.len() - 2], &mb[..mb.len() - 2]);
    let batch = broadcast_shapes(cx.shape_from(ba)?, cx.shape_from(bb)?)
        .map(dims_of)
        .ok_or_else(|| cx.invalid(format!("batch axes of {sa} and {sb} do not broadcast")))?;
    let nb: usize = batch.iter().product();
    let (m, k, n) = (ma[ma.len() - 2], ma[ma.len() - 1], mb[mb.len() - 1]);
    let operand = |cx: &mut NodeCx<'_>, x: NodeId, mat: &[usize], rows: usize, cols: usize| {
        let full: Vec<usize> = batch.iter().copied().chain([rows, cols]).collect();
        let x = cx.reshape(x, cx.shape_from(mat)?)?;
        let x = cx.broadcast(x, cx.shape_from(&full)?)?;
        let flat: Vec<usize> = if nb == 1 {
            vec![rows, cols]
        } else {
            vec![nb, rows, cols]
        };
        cx.reshape(x, cx.shape_from(&flat)?)
    };
    let a3 = operand(cx, a, &ma, m, k)?;
    let b3 = operand(cx, b, &mb, k, n)?;
    let y = cx.push(Opcode::MatMul, Attr::NONE, &[a3, b3])?;
    let mut out = batch.clone();
    if da.len() >= 2 {
        out.push(m);
    }
    if db.len() >= 2 {
        out.push(n);
    }
    let out = Shape::new(&out).map_err(|e| cx.invalid(e.to_string()))?;
    let y = cx.reshape(y, out)?;
    cx.set_output(0, y, FLOAT)
}

pub(super) fn gemm(cx: &mut NodeCx<'_>) -> Result<(), OnnxError> {
    let (mut a, mut b) = (cx.data(0)?, cx.data(1)?);
    let (alpha, beta) = (cx.attr_float("alpha", 1.0), cx.attr_float("beta", 1.0));
    if cx.attr_int("transA", 0) != 0 {
        a = cx.push(Opcode::Transpose, Attr::NONE, &[a])?;
    }
    if cx.attr_int("transB", 0) != 0 {
        b = cx.push(Opcode::Transpose, Attr::NONE, &[b])?;
    }
    let mut y = cx.push(Opcode::MatMul, Attr::NONE, &[a, b])?;
    let ys = cx.shape(y)?;
    // numpy's `alpha * (A @ B) + beta * C`: a multiplication by 1 is exact, so it is left out.
    if alpha.to_bits() != 1.0f32.to_bits() {
        let f = cx.fill(alpha, ys)?;
        y = cx.push(Opcode::Mul, Attr::NONE, &[f, y])?;
    }
    if cx.has_input(2) {
        let mut c = cx.data(2)?;
        if beta.to_bits() != 1.0f32.to_bits() {
            let cs = cx.shape(c)?;
            let f = cx.fill(beta, cs)?;
            c = cx.push(Opcode::Mul, Attr::NONE, &[f, c])?;
        }
        y = cx.elementwise(Opcode::Add, &[y, c])?;
    }
    cx.set_output(0, y, FLOAT)
}
