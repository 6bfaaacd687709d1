//! Convolution against an independent reading: a naive `f64` convolution written here from
//! ONNX's `Conv` definition (each output a sum over its group's channels and every kernel tap of
//! the zero-padded input), and its adjoints formed by brute force over every (output, tap) pair;
//! a Hessian-vector product through a small CNN loss planned and run by the runtime, bitwise
//! against the oracle and close to finite differences; hostile attribute words refused, never
//! a panic.

use tapeplan_core::ops::conv::output_extent;
use tapeplan_core::{ConvAttr, NodeId, Recordable, Run, Shape, Tape, Tensor};
use tapeplan_planner::protocol::SplitMix64;
use tapeplan_planner::{plan, EntrySpec, Root};
use tapeplan_runtime::{Plan as RtPlan, Session};
use tapeplan_tests::cases::bits;

/// A problem: `x: [n, c_in, sp…]`, `w: [c_out, c_in / groups, k…]`, the attribute.
#[derive(Clone, Debug)]
struct Problem {
    n: usize,
    c_in: usize,
    c_out: usize,
    input: Vec<usize>,
    kernel: Vec<usize>,
    a: ConvAttr,
}

impl Problem {
    fn r(&self) -> usize {
        self.input.len()
    }
    fn x_shape(&self) -> Vec<usize> {
        [vec![self.n, self.c_in], self.input.clone()].concat()
    }
    fn w_shape(&self) -> Vec<usize> {
        let g = self.a.groups as usize;
        [vec![self.c_out, self.c_in / g], self.kernel.clone()].concat()
    }
    /// ONNX's output extent, computed here in signed arithmetic.
    fn out(&self) -> Vec<usize> {
        (0..self.r())
            .map(|i| {
                let a = &self.a;
                let padded = self.input[i] as i64 + a.pad_begin[i] as i64 + a.pad_end[i] as i64;
                let reach = a.dilation[i] as i64 * (self.kernel[i] as i64 - 1) + 1;
                ((padded - reach) / a.stride[i] as i64 + 1) as usize
            })
            .collect()
    }
    fn y_shape(&self) -> Vec<usize> {
        [vec![self.n, self.c_out], self.out()].concat()
    }
    /// Every `(x index, w index, y index)` triple the convolution multiplies, padding excluded:
    /// the definition, spelled as loops over every output and every tap.
    fn triples(&self) -> Vec<(usize, usize, usize)> {
        let g = self.a.groups as usize;
        let (cin_g, cout_g) = (self.c_in / g, self.c_out / g);
        let (out, r) = (self.out(), self.r());
        // Spatial extents padded to two axes (1-D: height 1).
        let two = |v: &[usize]| if r == 1 { vec![1, v[0]] } else { v.to_vec() };
        let (inp, ker, out2) = (two(&self.input), two(&self.kernel), two(&out));
        let slot = |i: usize| if r == 1 { i - 1 } else { i };
        let mut t = Vec::new();
        for n in 0..self.n {
            for co in 0..self.c_out {
                for oh in 0..out2[0] {
                    for ow in 0..out2[1] {
                        let yi = ((n * self.c_out + co) * out2[0] + oh) * out2[1] + ow;
                        for cl in 0..cin_g {
                            let ci = (co / cout_g) * cin_g + cl;
                            for kh in 0..ker[0] {
                                for kw in 0..ker[1] {
                                    let pos = |axis: usize, o: usize, k: usize| -> Option<usize> {
                                        if r == 1 && axis == 0 {
                                            return Some(0);
                                        }
                                        let s = slot(axis);
                                        let p = (o * self.a.stride[s] as usize
                                            + k * self.a.dilation[s] as usize)
                                            as i64
                                            - self.a.pad_begin[s] as i64;
                                        (p >= 0 && (p as usize) < inp[axis]).then_some(p as usize)
                                    };
                                    let (Some(ih), Some(iw)) = (pos(0, oh, kh), pos(1, ow, kw))
                                    else {
                                        continue;
                                    };
                                    let xi = ((n * self.c_in + ci) * inp[0] + ih) * inp[1] + iw;
                                    let wi = ((co * cin_g + cl) * ker[0] + kh) * ker[1] + kw;
                                    t.push((xi, wi, yi));
                                }
                            }
                        }
                    }
                }
            }
        }
        t
    }
}

fn elems(s: &[usize]) -> usize {
    s.iter().product()
}

fn shape(s: &[usize]) -> Shape {
    Shape::new(s).unwrap()
}

fn random(rng: &mut SplitMix64, n: usize) -> Vec<f32> {
    (0..n).map(|_| 2.0 * rng.next_f32() - 1.0).collect()
}

/// The problems: 1-D and 2-D, strides 1–3, asymmetric padding, dilation 2, groups 2,
/// depthwise, a channel multiplier.
fn problems() -> Vec<Problem> {
    let p = |n, c_in, c_out, input: &[usize], kernel: &[usize], a| Problem {
        n,
        c_in,
        c_out,
        input: input.to_vec(),
        kernel: kernel.to_vec(),
        a,
    };
    vec![
        p(2, 3, 4, &[11], &[3], ConvAttr::d1(2, 2, 1, 1, 1)),
        p(1, 4, 6, &[10], &[2], ConvAttr::d1(3, 0, 2, 2, 2)),
        p(2, 3, 3, &[7], &[3], ConvAttr::d1(1, 1, 1, 2, 3)),
        p(
            2,
            2,
            3,
            &[6, 5],
            &[3, 3],
            ConvAttr::d2([2, 1], [1, 0], [2, 1], [1, 1], 1),
        ),
        p(
            1,
            4,
            4,
            &[7, 8],
            &[2, 3],
            ConvAttr::d2([1, 2], [0, 2], [1, 0], [2, 2], 2),
        ),
        p(
            2,
            3,
            6,
            &[5, 5],
            &[3, 3],
            ConvAttr::d2([1, 1], [1, 1], [1, 1], [1, 1], 3),
        ),
        p(
            1,
            2,
            2,
            &[4, 9],
            &[1, 4],
            ConvAttr::d2([3, 2], [0, 3], [0, 0], [1, 1], 1),
        ),
    ]
}

fn eval(
    op: tapeplan_core::Opcode,
    a: ConvAttr,
    args: &[(&[f32], &[usize])],
    out: &[usize],
) -> Vec<f32> {
    let mut o = vec![f32::NAN; elems(out)];
    let shapes: Vec<Shape> = args.iter().map(|(_, s)| shape(s)).collect();
    let data: Vec<&[f32]> = args.iter().map(|(d, _)| *d).collect();
    tapeplan_core::ops::eval(
        op,
        tapeplan_core::Attr::Conv(a),
        tapeplan_core::MathProfile::Precise,
        &data,
        &shapes,
        &mut o,
    )
    .unwrap();
    o
}

fn close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g as f64 - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs f64 {w}"
        );
    }
}

#[test]
fn the_three_instructions_match_a_naive_f64_convolution_and_its_brute_force_adjoints() {
    let mut rng = SplitMix64::new(0xc0de);
    for p in problems() {
        let (xs, ws, ys) = (p.x_shape(), p.w_shape(), p.y_shape());
        let x = random(&mut rng, elems(&xs));
        let w = random(&mut rng, elems(&ws));
        let g = random(&mut rng, elems(&ys));
        let triples = p.triples();
        let (mut y64, mut dx64, mut dw64) = (
            vec![0.0f64; elems(&ys)],
            vec![0.0f64; elems(&xs)],
            vec![0.0f64; elems(&ws)],
        );
        for &(xi, wi, yi) in &triples {
            y64[yi] += x[xi] as f64 * w[wi] as f64;
            dx64[xi] += g[yi] as f64 * w[wi] as f64;
            dw64[wi] += x[xi] as f64 * g[yi] as f64;
        }
        let e = output_extent(&p.a, shape(&xs), shape(&ws)).unwrap();
        assert_eq!(e[..p.r()], p.out()[..], "{p:?}");
        let a = |ext: &[usize]| p.a.with_extent(ext);
        use tapeplan_core::Opcode::*;
        let y = eval(Conv, a(&p.out()), &[(&x, &xs), (&w, &ws)], &ys);
        close(&format!("y {p:?}"), &y, &y64);
        let dx = eval(ConvTranspose, a(&p.input), &[(&g, &ys), (&w, &ws)], &xs);
        close(&format!("dx {p:?}"), &dx, &dx64);
        let dw = eval(ConvWeightGrad, a(&p.kernel), &[(&x, &xs), (&g, &ys)], &ws);
        close(&format!("dw {p:?}"), &dw, &dw64);
    }
}

/// A small CNN: `conv(stride 2, padding, bias) → tanh → conv(groups 2) → tanh → flatten →
/// dense → softmax cross-entropy`, its gradient recorded, then the Hessian-vector product
/// `∇_θ ⟨∇_θ L, v⟩` recorded, planned and run by the runtime.
#[test]
fn hvp_through_a_cnn_loss_is_planned_and_run_bitwise() {
    let (n, c_in, c1, hw, classes) = (2usize, 2usize, 4usize, 5usize, 3usize);
    let a1 = ConvAttr::d2([2, 2], [1, 1], [1, 0], [1, 1], 1);
    let a2 = ConvAttr::d2([1, 1], [0, 0], [0, 0], [1, 1], 2);
    let mut tape = Tape::new();
    let x = tape.input("x", shape(&[n, c_in, hw, hw]));
    let labels = tape.input("labels", shape(&[n]));
    let theta: Vec<(&str, Vec<usize>)> = vec![
        ("w1", vec![c1, c_in, 3, 3]),
        ("b1", vec![c1]),
        ("w2", vec![c1, 2, 2, 1]),
        ("wd", vec![c1 * 2 * 2, classes]),
        ("bd", vec![classes]),
    ];
    let params: Vec<NodeId> = theta
        .iter()
        .map(|(name, s)| tape.input(name, shape(s)))
        .collect();
    let loss = {
        let mut t = tape.trace();
        let h = t.conv(&x, &params[0], Some(&params[1]), a1).unwrap();
        // (5 + 1 + 1 - 3) / 2 + 1 = 3 rows, (5 + 1 + 0 - 3) / 2 + 1 = 2 columns.
        assert_eq!(t.shape_of(&h), shape(&[n, c1, 3, 2]));
        let h = t.tanh(&h).unwrap();
        let h = t.conv(&h, &params[2], None, a2).unwrap();
        assert_eq!(t.shape_of(&h), shape(&[n, c1, 2, 2]));
        let h = t.tanh(&h).unwrap();
        let flat = t.reshape(&h, shape(&[n, c1 * 4])).unwrap();
        let z = t.matmul(&flat, &params[3]).unwrap();
        let zs = t.shape_of(&z);
        let bd = t.broadcast(&params[4], zs).unwrap();
        let logits = t.add(&z, &bd).unwrap();
        tapeplan_planner::model::softmax_cross_entropy(&mut t, &logits, &labels).unwrap()
    };
    let grads = tape.differentiate(loss, &params).unwrap();
    let vs: Vec<NodeId> = theta
        .iter()
        .map(|(name, s)| tape.input(&format!("v_{name}"), shape(s)))
        .collect();
    let gv = {
        let mut t = tape.trace();
        let mut acc: Option<NodeId> = None;
        for (p, v) in params.iter().zip(&vs) {
            let g = *grads.get(*p).unwrap();
            let m = t.mul(&g, v).unwrap();
            let s = t.sum_all(&m).unwrap();
            acc = Some(match acc {
                None => s,
                Some(a) => t.add(&a, &s).unwrap(),
            });
        }
        acc.unwrap()
    };
    let hv = tape.differentiate(gv, &params).unwrap();
    let hv: Vec<NodeId> = params.iter().map(|p| *hv.get(*p).unwrap()).collect();
    // The second-order graph speaks every convolution instruction.
    for op in [
        tapeplan_core::Opcode::Conv,
        tapeplan_core::Opcode::ConvTranspose,
        tapeplan_core::Opcode::ConvWeightGrad,
    ] {
        assert!(tape.nodes().iter().any(|nd| nd.op == op), "{op} not spoken");
    }

    let mut rng = SplitMix64::new(7);
    let mut values: Vec<(String, Vec<usize>, Vec<f32>)> = vec![
        (
            "x".into(),
            vec![n, c_in, hw, hw],
            random(&mut rng, n * c_in * hw * hw),
        ),
        ("labels".into(), vec![n], vec![2.0, 0.0]),
    ];
    for (name, s) in &theta {
        values.push((name.to_string(), s.clone(), random(&mut rng, elems(s))));
    }
    for (name, s) in &theta {
        values.push((format!("v_{name}"), s.clone(), random(&mut rng, elems(s))));
    }
    let leaves: Vec<NodeId> = [x, labels]
        .into_iter()
        .chain(params.iter().copied())
        .chain(vs.iter().copied())
        .collect();
    let oracle = |vals: &[(String, Vec<usize>, Vec<f32>)], nodes: &[NodeId]| -> Vec<Vec<f32>> {
        let mut run = Run::new(&tape);
        for (leaf, (_, s, v)) in leaves.iter().zip(vals) {
            run.set(*leaf, Tensor::new(shape(s), v.clone()).unwrap())
                .unwrap();
        }
        run.forward().unwrap();
        nodes
            .iter()
            .map(|h| run.value(*h).unwrap().data.clone())
            .collect()
    };
    let want = oracle(&values, &hv);

    // The runtime runs the planned HVP entry bit for bit as the oracle computes it.
    let roots = hv
        .iter()
        .zip(&theta)
        .map(|(h, (name, _))| Root::Output {
            name: format!("hv_{name}"),
            node: *h,
        })
        .collect();
    let p = plan(
        &tape,
        &[EntrySpec {
            name: "hvp".into(),
            roots,
            guarded: false,
        }],
    )
    .unwrap();
    let bytes = p.to_bytes();
    let rt = RtPlan::parse(&bytes).unwrap();
    let e = rt.entry("hvp").unwrap();
    let mut arena = vec![f32::NAN; rt.arena_elems()];
    let mut s = Session::bind(&rt, &mut arena).unwrap();
    for (name, _, v) in &values {
        if rt.input(e, name).is_some() {
            s.set_input(e, name, v).unwrap();
        }
    }
    s.run(e).unwrap();
    for ((name, _), w) in theta.iter().zip(&want) {
        let got = s.output(e, &format!("hv_{name}")).unwrap();
        assert_eq!(bits(got), bits(w), "runtime H·v for {name}");
        assert!(w.iter().any(|v| *v != 0.0), "H·v for {name} is all zero");
    }

    // Finite differences of the gradient along v: (∇L(θ + hv) − ∇L(θ − hv)) / 2h ≈ H·v.
    let grad_nodes: Vec<NodeId> = params.iter().map(|p| *grads.get(*p).unwrap()).collect();
    let h = 1e-2f32;
    let shifted = |sign: f32| {
        let mut vals = values.clone();
        for k in 0..theta.len() {
            let v = values[2 + theta.len() + k].2.clone();
            for (t, d) in vals[2 + k].2.iter_mut().zip(v) {
                *t += sign * h * d;
            }
        }
        oracle(&vals, &grad_nodes)
    };
    let (up, down) = (shifted(1.0), shifted(-1.0));
    for (k, (name, _)) in theta.iter().enumerate() {
        for (j, hv) in want[k].iter().enumerate() {
            let fd = (up[k][j] - down[k][j]) / (2.0 * h);
            assert!(
                (fd - hv).abs() <= 2e-2 * (1.0 + hv.abs()),
                "{name}[{j}]: finite difference {fd} vs H·v {hv}"
            );
        }
    }
}

/// A planned `conv` (2-D, groups 2) whose attribute words are overwritten: every refusal names
/// the convolution, and random words never make the runtime panic; whatever it accepts runs.
#[test]
fn hostile_conv_attributes_are_refused_never_a_panic() {
    let a = ConvAttr::d2([1, 2], [1, 0], [0, 1], [1, 1], 2);
    let (xs, ws) = (shape(&[1, 4, 5, 6]), shape(&[2, 2, 3, 2]));
    let mut tape = Tape::new();
    let x = tape.input("x", xs);
    let w = tape.input("w", ws);
    let y = {
        let mut t = tape.trace();
        t.conv(&x, &w, None, a).unwrap()
    };
    let p = plan(
        &tape,
        &[EntrySpec {
            name: "f".into(),
            roots: vec![Root::Output {
                name: "y".into(),
                node: y,
            }],
            guarded: false,
        }],
    )
    .unwrap();
    let good = p.to_bytes();
    let rt = RtPlan::parse(&good).unwrap();
    // The work a watchdog budget counts: the elements read and written (x 120, w 24, y 24) and
    // the multiply-accumulates, y's 24 elements times C_in/groups · K_h · K_w = 2 · 3 · 2.
    assert_eq!(
        rt.entry_work(rt.entry("f").unwrap()),
        120 + 24 + 24 + 24 * 12
    );
    // The block is the last 12 words: its length (11), groups, strides, pads begin, pads end,
    // dilations, extent.
    let block = good.len() - 48;
    let word = |b: &[u8], i: usize| {
        u32::from_le_bytes(b[block + 4 * i..block + 4 * i + 4].try_into().unwrap())
    };
    assert_eq!(
        (0..12).map(|i| word(&good, i)).collect::<Vec<_>>(),
        [11, 2, 1, 2, 1, 0, 0, 1, 1, 1, 4, 3]
    );
    let with = |edits: &[(usize, u32)]| {
        let mut b = good.clone();
        for &(i, v) in edits {
            b[block + 4 * i..block + 4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        let crc = tapeplan_core::format::plan_crc(&b).unwrap();
        b[12..16].copy_from_slice(&crc.to_le_bytes());
        b
    };
    use tapeplan_core::ops::conv::ConvError::*;
    for (edits, want) in [
        (&[(2, 0)][..], ZeroStride),
        (&[(8, 0)][..], ZeroDilation),
        (&[(1, 0)][..], ZeroGroups),
        (&[(1, 3)][..], Groups),
        (&[(1, 4)][..], Groups),
        (&[(8, 4)][..], EmptyOutput),
        (&[(9, u32::MAX)][..], EmptyOutput),
        (&[(4, u32::MAX), (6, u32::MAX)][..], Extent),
        (&[(10, 5)][..], Extent),
        (&[(11, 0)][..], Extent),
    ] {
        let Err(err) = RtPlan::parse(&with(edits)) else {
            panic!("{edits:?} accepted");
        };
        let msg = err.to_string();
        assert!(
            msg.contains(&want.to_string()) && msg.contains("conv"),
            "{edits:?}: {msg}"
        );
    }
    // A block length other than 6 or 11.
    let err = RtPlan::parse(&with(&[(0, 7)])).unwrap_err().to_string();
    assert!(err.contains("attribute block"), "{err}");
    // A 6-word (1-D) block in front of 4-D tensors: the ranks do not fit.
    let err = RtPlan::parse(&with(&[(0, 6)])).unwrap_err().to_string();
    assert!(err.contains(&SpatialRank.to_string()), "{err}");

    // Random words: no panic; an accepted plan runs.
    let mut rng = SplitMix64::new(99);
    let interesting = [0, 1, 2, 3, 4, 5, 6, 11, 0xffff, 0x7fff_ffff, u32::MAX];
    let mut accepted = 0;
    for _ in 0..3000 {
        let k = 1 + rng.below(3);
        let edits: Vec<(usize, u32)> = (0..k)
            .map(|_| {
                let i = rng.below(12);
                let v = if rng.below(2) == 0 {
                    interesting[rng.below(interesting.len())]
                } else {
                    rng.next_u64() as u32
                };
                (i, v)
            })
            .collect();
        let b = with(&edits);
        if let Ok(rt) = RtPlan::parse(&b) {
            accepted += 1;
            let e = rt.entry("f").unwrap();
            let mut arena = vec![0.0f32; rt.arena_elems()];
            let mut s = Session::bind(&rt, &mut arena).unwrap();
            s.set_input(e, "x", &vec![1.0; xs.elems()]).unwrap();
            s.set_input(e, "w", &vec![1.0; ws.elems()]).unwrap();
            s.run(e).unwrap();
        }
    }
    assert!(accepted > 0, "no mutation kept a valid plan");
}

/// The bias is a composition (`add(y, broadcast(reshape(bias)))`, see `tapeplan_core::ops::conv`)
/// and costs no `y`-sized buffer in a fused plan: `relu(conv(x, w) + bias)` plans into the arena
/// of `relu(conv(x, w))` plus the bias and its reshape (`C_out` elements each, aligned), while
/// unfused it needs room for a `y`-sized broadcast (here 2 312 elements against 2 016: the
/// broadcast partly reuses `x`'s buffer, dead after the convolution).
#[test]
fn a_bias_costs_no_output_sized_buffer_in_a_fused_plan() {
    let (xs, ws, bs) = (shape(&[1, 4, 12, 12]), shape(&[8, 4, 3, 3]), shape(&[8]));
    let a = ConvAttr::d2([1, 1], [1, 1], [1, 1], [1, 1], 1);
    let arena = |bias: bool, fuse: bool| {
        let mut tape = Tape::new();
        let x = tape.input("x", xs);
        let w = tape.input("w", ws);
        let b = tape.input("b", bs);
        let y = {
            let mut t = tape.trace();
            let y = t.conv(&x, &w, bias.then_some(&b), a).unwrap();
            t.relu(&y).unwrap()
        };
        let spec = EntrySpec {
            name: "f".into(),
            roots: vec![Root::Output {
                name: "y".into(),
                node: y,
            }],
            guarded: false,
        };
        let options = tapeplan_planner::plan::PlanOptions {
            fusion: tapeplan_planner::FusionPolicy::all_or_off(fuse),
            ..Default::default()
        };
        tapeplan_planner::plan::plan_with(&tape, &[spec], options)
            .unwrap()
            .arena_elems
    };
    let y_elems = 8 * 12 * 12;
    println!(
        "arena elems: fused {} (bias) / {} (none), unfused {} / {}",
        arena(true, true),
        arena(false, true),
        arena(true, false),
        arena(false, false)
    );
    assert!(
        arena(true, true) <= arena(false, true) + 2 * 8,
        "fused: {} with a bias, {} without",
        arena(true, true),
        arena(false, true)
    );
    assert!(
        arena(true, false) > arena(false, false) + y_elems / 8,
        "unfused: {} with a bias, {} without",
        arena(true, false),
        arena(false, false)
    );
}
