//! Exchange with PyTorch: names, shapes and layouts of the safetensors files, the bit-exact
//! round trip, the rejections, and the CLI flow (train → checkpoint → export → import →
//! resume), with `scripts/check_export.py` run when numpy and safetensors are importable.

use crate::common;

use std::path::Path;
use std::process::Command;

use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use safetensors::SafeTensorError;
use tapeplan_core::Shape;
use tapeplan_planner::io::exchange::{
    export_safetensors, export_safetensors_renamed, import_safetensors, import_safetensors_renamed,
    is_training_state, torch_name, ExchangeError, Param, Rename, Role,
};

fn awkward(seed: u32, n: usize) -> Vec<f32> {
    let specials = [
        -0.0,
        0.0,
        f32::MIN_POSITIVE / 8.0, // subnormal
        -f32::MIN_POSITIVE,
        1.0e30,
        -3.5,
        f32::EPSILON,
    ];
    (0..n)
        .map(|i| {
            let k = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed);
            if k.is_multiple_of(5) {
                specials[(k as usize / 5) % specials.len()]
            } else {
                ((k >> 8) as f32 / (1u32 << 24) as f32 - 0.5) * 4.0
            }
        })
        .collect()
}

fn param(name: &str, dims: &[usize], seed: u32) -> Param {
    let shape = Shape::new(dims).unwrap();
    Param {
        name: name.into(),
        shape,
        values: awkward(seed, shape.elems()),
    }
}

/// A 3-layer MLP's parameters (4 → 3 → 5 → 2) and some optimizer state.
fn mlp_params() -> Vec<Param> {
    vec![
        param("w1", &[4, 3], 1),
        param("b1", &[3], 2),
        param("w2", &[3, 5], 3),
        param("b2", &[5], 4),
        param("w3", &[5, 2], 5),
        param("b3", &[2], 6),
        param("w1.m", &[4, 3], 7),
        param("opt.step", &[], 8),
    ]
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn f32s(view: &TensorView<'_>) -> Vec<f32> {
    view.data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn names_follow_nn_sequential_of_linear_layers() {
    let cases = [
        ("w1", Some(("0.weight", Role::Weight))),
        ("b1", Some(("0.bias", Role::Bias))),
        ("w2", Some(("2.weight", Role::Weight))),
        ("b2", Some(("2.bias", Role::Bias))),
        ("w12", Some(("22.weight", Role::Weight))),
        ("w0", None),
        ("w01", None),
        ("w", None),
        ("w1.m", None),
        ("b1.v", None),
        ("rng.key", None),
        ("x1", None),
    ];
    for (ours, theirs) in cases {
        let got = torch_name(ours);
        let want = theirs.map(|(n, r)| (n.to_string(), r));
        assert_eq!(got, want, "{ours}");
    }
}

#[test]
fn export_writes_pytorch_names_shapes_and_transposed_weights() {
    let params = mlp_params();
    let bytes = export_safetensors(&params, &[("tapeplan.activation", "tanh".into())]).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names = st.names();
    names.sort_unstable();
    assert_eq!(
        names,
        ["0.bias", "0.weight", "2.bias", "2.weight", "4.bias", "4.weight"],
        "optimizer state is not exported"
    );
    for (k, (d_in, d_out)) in [(4, 3), (3, 5), (5, 2)].into_iter().enumerate() {
        let w = st.tensor(&format!("{}.weight", 2 * k)).unwrap();
        assert_eq!(w.dtype(), Dtype::F32);
        assert_eq!(w.shape(), [d_out, d_in]);
        let ours = &params[2 * k].values;
        let theirs = f32s(&w);
        for i in 0..d_in {
            for o in 0..d_out {
                assert_eq!(
                    theirs[o * d_in + i].to_bits(),
                    ours[i * d_out + o].to_bits(),
                    "weight[{o}, {i}] of layer {k} is w{}[{i}, {o}]",
                    k + 1
                );
            }
        }
        let b = st.tensor(&format!("{}.bias", 2 * k)).unwrap();
        assert_eq!(b.shape(), [d_out]);
        assert_eq!(bits(&f32s(&b)), bits(&params[2 * k + 1].values));
    }
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta.metadata().clone().unwrap();
    assert_eq!(meta["format"], "pt");
    assert_eq!(meta["tapeplan.layers"], "4,3,5,2");
    assert_eq!(meta["tapeplan.activation"], "tanh");
}

#[test]
fn export_then_import_is_the_identity_on_bits_and_the_bytes_are_deterministic() {
    let params = mlp_params();
    let bytes = export_safetensors(&params, &[("a", "1".into()), ("b", "2".into())]).unwrap();
    for _ in 0..4 {
        assert_eq!(
            export_safetensors(&params, &[("a", "1".into()), ("b", "2".into())]).unwrap(),
            bytes,
            "the same parameters gave other bytes"
        );
    }
    let mut into: Vec<Param> = params
        .iter()
        .map(|p| Param {
            values: vec![0.0; p.values.len()],
            ..p.clone()
        })
        .collect();
    import_safetensors(&bytes, &mut into).unwrap();
    for (a, b) in params.iter().zip(&into) {
        if torch_name(&a.name).is_some() {
            assert_eq!(bits(&a.values), bits(&b.values), "{}", a.name);
        } else {
            assert!(
                b.values.iter().all(|v| v.to_bits() == 0),
                "{}: state not in the file must be left as it was",
                a.name
            );
        }
    }
}

fn file(tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) -> Vec<u8> {
    let views: Vec<(&str, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (*n, TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, None).unwrap()
}

fn le(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn import_rejects_what_does_not_fit_and_changes_nothing() {
    let params = vec![param("w1", &[2, 3], 1), param("b1", &[3], 2)];
    let good_w = ("0.weight", Dtype::F32, vec![3, 2], le(&[1.0; 6]));
    let good_b = ("0.bias", Dtype::F32, vec![3], le(&[2.0; 3]));
    let check = |bytes: Vec<u8>, ok: &dyn Fn(&ExchangeError) -> bool| {
        let mut p = params.clone();
        let err = import_safetensors(&bytes, &mut p).unwrap_err();
        assert!(ok(&err), "unexpected error {err:?}");
        assert!(!err.to_string().is_empty());
        assert_eq!(p, params, "a rejected import changed the parameters");
    };

    check(file(std::slice::from_ref(&good_w)), &|e| {
        matches!(e, ExchangeError::MissingTensor { torch_name, name }
            if torch_name == "0.bias" && name == "b1")
    });
    let extra = ("2.weight", Dtype::F32, vec![1], le(&[0.0]));
    check(
        file(&[good_w.clone(), good_b.clone(), extra]),
        &|e| matches!(e, ExchangeError::UnexpectedTensor(n) if n == "2.weight"),
    );
    let untransposed = ("0.weight", Dtype::F32, vec![2, 3], le(&[1.0; 6]));
    check(file(&[untransposed, good_b.clone()]), &|e| {
        matches!(e, ExchangeError::Shape { name, expected, found }
            if name == "0.weight" && expected == &[3, 2] && found == &[2, 3])
    });
    let f64_w = ("0.weight", Dtype::F64, vec![3, 2], vec![0u8; 48]);
    check(file(&[f64_w, good_b.clone()]), &|e| {
        matches!(
            e,
            ExchangeError::Dtype {
                dtype: Dtype::F64,
                ..
            }
        )
    });
    check(b"not a safetensors file".to_vec(), &|e| {
        matches!(e, ExchangeError::Safetensors(_))
    });
    let mut truncated = file(&[good_w.clone(), good_b.clone()]);
    truncated.truncate(truncated.len() - 1);
    check(truncated, &|e| {
        matches!(
            e,
            ExchangeError::Safetensors(SafeTensorError::MetadataIncompleteBuffer)
                | ExchangeError::Safetensors(_)
        )
    });

    // And the good file loads, transposed back.
    let mut p = params.clone();
    import_safetensors(&file(&[good_w, good_b]), &mut p).unwrap();
    assert_eq!(p[0].values, vec![1.0; 6]);
    assert_eq!(p[1].values, vec![2.0; 3]);
}

#[test]
fn a_non_dense_parameter_is_refused() {
    let err = export_safetensors(&[param("w1", &[6], 1)], &[]).unwrap_err();
    assert!(matches!(err, ExchangeError::NotDense { .. }), "{err:?}");
    let err = export_safetensors(&[param("rng.key", &[], 1)], &[]).unwrap_err();
    assert!(matches!(err, ExchangeError::NoLayers), "{err:?}");
}

// ---------------------------------------------------------------------------------------------
// The CLI flow.

use common::{ok, scratch_dir, tapeplan};

/// A model of the layer API or ONNX: PyTorch `state_dict` names, a buffer, and Adam's state.
fn state_dict_params() -> Vec<Param> {
    vec![
        param("features.0.weight", &[4, 2, 3], 1),
        param("features.0.bias", &[4], 2),
        param("bn.running_mean", &[4], 3),
        param("bn.num_batches_tracked", &[], 4),
        param("fc.weight", &[2, 4], 5),
        param("fc.weight.m", &[2, 4], 6),
        param("fc.weight.v", &[2, 4], 7),
        param("opt.step", &[], 8),
        param("rng.key", &[], 9),
    ]
}

#[test]
fn any_model_is_exchanged_under_its_plan_names_as_is() {
    let params = state_dict_params();
    let all: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
    let state: Vec<&str> = all
        .iter()
        .copied()
        .filter(|n| is_training_state(n, &all))
        .collect();
    assert_eq!(state, ["fc.weight.m", "fc.weight.v", "opt.step", "rng.key"]);
    // `bn.b` would be state only beside a tensor `bn`.
    assert!(!is_training_state("fc.b", &["fc.weight", "fc.b"]));
    assert!(is_training_state("fc.b", &["fc", "fc.b"]));

    let bytes = export_safetensors(&params, &[]).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names = st.names();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "bn.num_batches_tracked",
            "bn.running_mean",
            "fc.weight",
            "features.0.bias",
            "features.0.weight"
        ]
    );
    for p in &params[..5] {
        let view = st.tensor(&p.name).unwrap();
        assert_eq!(
            view.shape(),
            &p.shape.dims()[..p.shape.rank()],
            "{}",
            p.name
        );
        assert_eq!(
            bits(&f32s(&view)),
            bits(&p.values),
            "{}: not transposed",
            p.name
        );
    }
    let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
    let meta = meta.metadata().clone().unwrap();
    assert!(!meta.contains_key("tapeplan.layers"), "{meta:?}");

    // Back: bit for bit, the state untouched.
    let mut into = state_dict_params();
    for p in &mut into {
        p.values.iter_mut().for_each(|v| *v = 0.0);
    }
    import_safetensors(&bytes, &mut into).unwrap();
    for (a, b) in into.iter().zip(&params).take(5) {
        assert_eq!(bits(&a.values), bits(&b.values), "{}", a.name);
    }
    assert!(into[5..].iter().all(|p| p.values.iter().all(|&v| v == 0.0)));

    // A prefix remap out and back.
    let rules = [Rename {
        from: "features".into(),
        to: "backbone".into(),
    }];
    let renamed = export_safetensors_renamed(&params, &[], &rules).unwrap();
    let st = SafeTensors::deserialize(&renamed).unwrap();
    assert!(st.tensor("backbone.0.weight").is_ok() && st.tensor("features.0.weight").is_err());
    let back: Vec<Rename> = vec!["backbone=features".parse().unwrap()];
    let mut into = state_dict_params();
    import_safetensors_renamed(&renamed, &mut into, &back).unwrap();
    assert_eq!(bits(&into[0].values), bits(&params[0].values));
    // Two keys renamed onto one are refused; so is a rule that renames nothing.
    let clash: Vec<Rename> = vec!["features.0.bias=fc.weight".parse().unwrap()];
    let err = export_safetensors_renamed(&params, &[], &clash).unwrap_err();
    assert!(
        err.to_string()
            .contains("two tensors would be written as \"fc.weight\""),
        "{err}"
    );
    let err = import_safetensors_renamed(&bytes, &mut into, &back).unwrap_err();
    assert!(err.to_string().contains("matches no tensor name"), "{err}");
    // `Rename` matches a key, or a prefix at a `.`, never inside a name part.
    let r: Rename = "fc=head".parse().unwrap();
    assert_eq!(r.apply("fc"), Some("head".into()));
    assert_eq!(r.apply("fc.weight"), Some("head.weight".into()));
    assert_eq!(r.apply("fcx.weight"), None);
    let r: Rename = "layer.=block.".parse().unwrap();
    assert_eq!(r.apply("layer.1.weight"), Some("block.1.weight".into()));
    assert!("=x".parse::<Rename>().is_err() && "x=".parse::<Rename>().is_err());
}

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap()
}

/// The interpreter for `scripts/check_export.py`: `$TAPEPLAN_PYTHON` or `python3`, if it can
/// import numpy and safetensors.
fn python_with_numpy() -> Option<String> {
    let py = std::env::var("TAPEPLAN_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&py)
        .args(["-c", "import numpy, safetensors"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(py)
}

#[test]
fn cli_train_checkpoint_export_import_resume() {
    let dir = scratch_dir("exchange-cli");
    let small = ["--layers", "64,16,10", "--batch", "32"];
    ok(&dir, &[&["plan", "-o", "m.plan"][..], &small].concat());
    ok(
        &dir,
        &[&["plan", "-o", "other.plan", "--lr", "0.05"][..], &small].concat(),
    );

    // Two epochs straight, with every output.
    let out = ok(
        &dir,
        &[
            "train",
            "m.plan",
            "--epochs",
            "2",
            "--checkpoint",
            "full.ckpt",
            "--save-params",
            "full.safetensors",
            "--save-test-logits",
            "test.safetensors",
        ],
    );
    assert!(out.contains("loss curve: m.plan.loss.svg"), "{out}");
    let svg = String::from_utf8(read(&dir, "m.plan.loss.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("epoch mean"));
    assert!(
        !dir.join("full.ckpt.tmp").exists(),
        "the temporary file is renamed"
    );

    // One epoch, then resume to two: the same checkpoint bytes, the same parameters.
    ok(
        &dir,
        &[
            "train",
            "m.plan",
            "--epochs",
            "1",
            "--checkpoint",
            "half.ckpt",
        ],
    );
    let out = ok(
        &dir,
        &[
            "train",
            "m.plan",
            "--epochs",
            "2",
            "--resume",
            "half.ckpt",
            "--checkpoint",
            "half.ckpt",
            "--save-params",
            "resumed.safetensors",
            "--plot",
            "resumed.svg",
        ],
    );
    assert!(
        out.contains("resumed from half.ckpt after epoch 1"),
        "{out}"
    );
    assert_eq!(read(&dir, "half.ckpt"), read(&dir, "full.ckpt"));
    assert_eq!(
        read(&dir, "resumed.safetensors"),
        read(&dir, "full.safetensors")
    );
    // The loss curve kept beside the checkpoint covers both runs, as the straight run's does
    // (the resumed plot draws that whole curve).
    assert_eq!(
        read(&dir, "half.ckpt.losses.csv"),
        read(&dir, "full.ckpt.losses.csv")
    );

    // Export from the checkpoint gives the bytes train wrote; import gives the checkpoint back.
    ok(
        &dir,
        &[
            "export",
            "m.plan",
            "--checkpoint",
            "full.ckpt",
            "-o",
            "exported.safetensors",
        ],
    );
    assert_eq!(
        read(&dir, "exported.safetensors"),
        read(&dir, "full.safetensors")
    );
    ok(
        &dir,
        &[
            "import",
            "exported.safetensors",
            "m.plan",
            "--base",
            "full.ckpt",
            "-o",
            "imported.ckpt",
        ],
    );
    assert_eq!(read(&dir, "imported.ckpt"), read(&dir, "full.ckpt"));
    ok(
        &dir,
        &[
            "import",
            "exported.safetensors",
            "m.plan",
            "-o",
            "fresh.ckpt",
        ],
    );
    ok(
        &dir,
        &[
            "export",
            "m.plan",
            "--checkpoint",
            "fresh.ckpt",
            "-o",
            "again.safetensors",
        ],
    );
    assert_eq!(
        read(&dir, "again.safetensors"),
        read(&dir, "full.safetensors")
    );

    // Another plan's checkpoint is refused with a clear message.
    let out = tapeplan(
        &dir,
        &[
            "train",
            "other.plan",
            "--epochs",
            "2",
            "--resume",
            "full.ckpt",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is a checkpoint of plan"), "{err}");
    assert!(err.contains("not of other.plan"), "{err}");
    let out = tapeplan(&dir, &["export", "other.plan", "--checkpoint", "full.ckpt"]);
    assert!(!out.status.success());

    // Parameters exported from a tanh model are refused by a relu plan of the same shapes.
    ok(
        &dir,
        &[
            &["plan", "-o", "relu.plan", "--activation", "relu"][..],
            &small,
        ]
        .concat(),
    );
    let out = tapeplan(
        &dir,
        &[
            "import",
            "exported.safetensors",
            "relu.plan",
            "-o",
            "x.ckpt",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tanh model") && err.contains("relu"), "{err}");
    assert!(!dir.join("x.ckpt").exists());

    // A damaged checkpoint is refused.
    let mut bad = read(&dir, "full.ckpt");
    let last = bad.len() - 1;
    bad[last] ^= 1;
    std::fs::write(dir.join("bad.ckpt"), bad).unwrap();
    let out = tapeplan(&dir, &["train", "m.plan", "--resume", "bad.ckpt"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("checksum"));

    // The real check: numpy reproduces the runtime's forward pass from the exported file.
    match python_with_numpy() {
        Some(py) => {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/check_export.py");
            let out = Command::new(py)
                .current_dir(&dir)
                .arg(script)
                .args(["full.safetensors", "test.safetensors"])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            println!("{text}");
            assert!(
                out.status.success(),
                "check_export.py failed:\n{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(text.contains("OK: the exported model reproduces"));
        }
        None => println!(
            "note: scripts/check_export.py not run (no python3 with numpy and safetensors; \
             set TAPEPLAN_PYTHON)"
        ),
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A safetensors file from its JSON header, written as is, and its data.
fn raw(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn import_refuses_hostile_files_and_changes_nothing() {
    let params = vec![
        param("w1", &[2, 3], 1),
        param("b1", &[3], 2),
        param("w1.m", &[2, 3], 3),
    ];
    let import = |bytes: &[u8]| {
        let mut p = params.clone();
        let r = import_safetensors(bytes, &mut p);
        if r.is_err() {
            assert_eq!(p, params, "a rejected import changed the parameters");
        }
        r
    };
    let w = r#""0.weight":{"dtype":"F32","shape":[3,2],"data_offsets":[0,24]}"#;
    let b = r#""0.bias":{"dtype":"F32","shape":[3],"data_offsets":[24,36]}"#;
    let data = le(&[1.0; 9]);
    // The well-formed file loads.
    import(&raw(&format!("{{{w},{b}}}"), &data)).unwrap();

    // A header length beyond the file, and of u64::MAX.
    let mut long = raw(&format!("{{{w},{b}}}"), &data);
    let claimed = long.len() as u64;
    long[..8].copy_from_slice(&claimed.to_le_bytes());
    let e = import(&long).unwrap_err();
    assert!(matches!(e, ExchangeError::Safetensors(_)), "{e:?}");
    long[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    let e = import(&long).unwrap_err();
    assert!(matches!(e, ExchangeError::Safetensors(_)), "{e:?}");
    // Fewer than 8 bytes.
    assert!(import(&[1, 0, 0]).is_err());

    // A duplicate key: two different tensors under one name. Refused, whichever one a reader
    // would keep.
    let w_again = r#""0.weight":{"dtype":"F32","shape":[3,2],"data_offsets":[36,60]}"#;
    let r = import(&raw(&format!("{{{w},{b},{w_again}}}"), &le(&[1.0; 15])));
    assert!(r.is_err(), "a file with 0.weight twice was imported");

    // Other dtypes of the right byte size: I64 (8 bytes), F16 and BF16 (2 bytes).
    for (dtype, bytes) in [("I64", 48), ("F16", 12), ("BF16", 12)] {
        let wd =
            format!(r#""0.weight":{{"dtype":"{dtype}","shape":[3,2],"data_offsets":[0,{bytes}]}}"#);
        let bd = format!(
            r#""0.bias":{{"dtype":"F32","shape":[3],"data_offsets":[{bytes},{}]}}"#,
            bytes + 12
        );
        let e = import(&raw(&format!("{{{wd},{bd}}}"), &vec![0u8; bytes + 12])).unwrap_err();
        assert!(matches!(e, ExchangeError::Dtype { .. }), "{dtype}: {e:?}");
        assert!(e.to_string().contains("only F32"), "{e}");
    }

    // A zero extent.
    let w0 = r#""0.weight":{"dtype":"F32","shape":[3,0],"data_offsets":[0,0]}"#;
    let b0 = r#""0.bias":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}"#;
    let e = import(&raw(&format!("{{{w0},{b0}}}"), &le(&[1.0; 3]))).unwrap_err();
    assert!(
        matches!(&e, ExchangeError::Shape { found, .. } if found == &[3, 0]),
        "{e:?}"
    );

    // 2^31 elements claimed (8 GiB of data) in a file of a few bytes, and a shape whose
    // element count overflows.
    let huge = r#""0.weight":{"dtype":"F32","shape":[2147483648],"data_offsets":[0,8589934592]}"#;
    let e = import(&raw(&format!("{{{huge},{b}}}"), &data)).unwrap_err();
    assert!(matches!(e, ExchangeError::Safetensors(_)), "{e:?}");
    let over =
        r#""0.weight":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,24]}"#;
    let e = import(&raw(&format!("{{{over},{b}}}"), &data)).unwrap_err();
    assert!(matches!(e, ExchangeError::Safetensors(_)), "{e:?}");

    // A key naming optimizer state (the plan's `w1.m`): not a model tensor, refused.
    let m = r#""w1.m":{"dtype":"F32","shape":[2,3],"data_offsets":[36,60]}"#;
    let e = import(&raw(&format!("{{{w},{b},{m}}}"), &le(&[1.0; 15]))).unwrap_err();
    assert!(
        matches!(&e, ExchangeError::UnexpectedTensor(n) if n == "w1.m"),
        "{e:?}"
    );
}
