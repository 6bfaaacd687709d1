//! The runtime compiled to WebAssembly, run by `wasm-bindgen-test` in Node
//! (`wasm-pack test --node wasm`) and in headless Chromium (`WASM_BINDGEN_USE_BROWSER=1
//! wasm-pack test --headless --chrome --chromedriver /usr/bin/chromedriver wasm`): the demo's
//! fixed training run equals the host oracle bit for bit, and bad input throws JavaScript
//! `Error`s.
//!
//! The plan, data and the oracle's results come from `wasm/www/assets/`, which
//! `cargo xtask web-assets` generates (the `wasm-test` and `browser` steps run it first).
#![cfg(target_arch = "wasm32")]

use js_sys::Error as JsErrorObject;
use tapeplan_wasm::{digest_f32_hex, Trainer};
use wasm_bindgen::{JsCast, JsError, JsValue};
use wasm_bindgen_test::wasm_bindgen_test;

const PLAN: &[u8] = include_bytes!("../www/assets/digits.plan");
const MANIFEST: &str = include_str!("../www/assets/manifest.json");
const TRAIN_PIXELS: &[u8] = include_bytes!("../www/assets/train-pixels.u8");
const TRAIN_LABELS: &[u8] = include_bytes!("../www/assets/train-labels.u8");
const TEST_PIXELS: &[u8] = include_bytes!("../www/assets/test-pixels.u8");
const TEST_LABELS: &[u8] = include_bytes!("../www/assets/test-labels.u8");
const EPOCH_ORDER: &[u8] = include_bytes!("../www/assets/epoch-order.u16");
const INIT: &[u8] = include_bytes!("../www/assets/init.f32");
const LOSSES: &[u8] = include_bytes!("../www/assets/loss-trace.f32");

/// A field of the manifest: the text after `"key": ` up to the next `,` or `}` (unquoted).
fn field(key: &str) -> &'static str {
    let tag = format!("\"{key}\": ");
    let at = MANIFEST.find(&tag).unwrap_or_else(|| panic!("no {key}")) + tag.len();
    let rest = &MANIFEST[at..];
    let end = rest.find([',', '\n', '}']).unwrap_or(rest.len());
    rest[..end].trim().trim_matches('"')
}

fn num(key: &str) -> usize {
    field(key).parse().unwrap()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn features(pixels: &[u8]) -> Vec<f32> {
    pixels.iter().map(|&p| f32::from(p) * 0.0625).collect()
}

fn message(e: JsError) -> String {
    let v = JsValue::from(e);
    let err = v
        .dyn_into::<JsErrorObject>()
        .expect("a JavaScript Error object");
    String::from(err.message())
}

fn trainer() -> Trainer {
    let mut t = Trainer::new(PLAN).map_err(message).unwrap();
    t.js_load_parameters(&f32s(INIT)).map_err(message).unwrap();
    t
}

#[wasm_bindgen_test]
fn the_fixed_demo_run_equals_the_host_oracle() {
    let mut t = trainer();
    assert_eq!(t.js_digest(), field("init_digest"));
    let (epochs, batch, rows, d_in) = (
        num("epochs"),
        num("batch"),
        num("train_rows"),
        num("features"),
    );
    let x_all = features(TRAIN_PIXELS);
    let order: Vec<usize> = EPOCH_ORDER
        .chunks_exact(2)
        .map(|c| usize::from(u16::from_le_bytes([c[0], c[1]])))
        .collect();
    let expected = f32s(LOSSES);
    let mut losses = Vec::new();
    let (mut x, mut y) = (vec![0.0f32; batch * d_in], vec![0.0f32; batch]);
    for epoch in 0..epochs {
        let idx = &order[epoch * rows..(epoch + 1) * rows];
        for b in 0..rows / batch {
            for (r, &i) in idx[b * batch..(b + 1) * batch].iter().enumerate() {
                x[r * d_in..(r + 1) * d_in].copy_from_slice(&x_all[i * d_in..(i + 1) * d_in]);
                y[r] = f32::from(TRAIN_LABELS[i]);
            }
            let loss = t.js_train_step(&x, &y).map_err(message).unwrap();
            let step = losses.len();
            assert_eq!(
                loss.to_bits(),
                expected[step].to_bits(),
                "step {step}: loss {loss} vs the oracle's {}",
                expected[step]
            );
            losses.push(loss);
        }
    }
    assert_eq!(losses.len(), num("steps"));
    assert_eq!(digest_f32_hex(&losses), field("loss_trace_digest"));
    assert_eq!(t.js_digest(), field("digest"));

    // Test accuracy through `forward`, the last batch padded with zeros.
    let test_x = features(TEST_PIXELS);
    let mut correct = 0;
    for (start, labels) in (0..).step_by(batch).zip(TEST_LABELS.chunks(batch)) {
        let mut xb = vec![0.0f32; batch * d_in];
        let n = labels.len();
        xb[..n * d_in].copy_from_slice(&test_x[start * d_in..(start + n) * d_in]);
        let logits = t.js_forward(&xb).map_err(message).unwrap();
        let classes = logits.len() / batch;
        for (r, &label) in labels.iter().enumerate() {
            let row = &logits[r * classes..(r + 1) * classes];
            let best = (0..classes).fold(0, |b, i| if row[i] > row[b] { i } else { b });
            correct += usize::from(best == usize::from(label));
        }
    }
    assert_eq!(correct, num("test_correct"));
}

#[wasm_bindgen_test]
fn bad_plan_bytes_throw_an_error_with_the_runtime_message() {
    let mut flipped = PLAN.to_vec();
    flipped[PLAN.len() / 2] ^= 0xff;
    for bad in [&[][..], &PLAN[..PLAN.len() - 3], &flipped, b"tapeplan? no"] {
        let msg = message(Trainer::new(bad).err().expect("rejected"));
        assert!(msg.starts_with("plan rejected: "), "{msg}");
    }
}

#[wasm_bindgen_test]
fn misuse_throws_errors_and_changes_nothing() {
    let mut t = trainer();
    let before = t.js_digest();
    let msg = message(t.js_load_parameter("w9", &[1.0]).unwrap_err());
    assert_eq!(msg, "parameter \"w9\": no parameter of that name");
    let msg = message(t.js_load_parameters(&[1.0; 3]).unwrap_err());
    assert!(msg.starts_with("parameters: 3 elements given"), "{msg}");
    assert!(t.js_train_step(&[0.0; 3], &[0.0; 32]).is_err());
    assert!(t.js_forward(&[]).is_err());
    let msg = message(t.js_run("backward").unwrap_err());
    assert_eq!(msg, "the plan has no entry named \"backward\"");
    assert_eq!(t.js_digest(), before);
}

#[wasm_bindgen_test]
fn describes_and_round_trips_parameters() {
    let mut t = trainer();
    assert_eq!(t.js_parameter_names(), ["w1", "b1", "w2", "b2"]);
    assert_eq!(
        t.js_parameter_shape("w1").map_err(message).unwrap(),
        [64, 32]
    );
    assert_eq!(
        t.js_input_shape("train_step", "x")
            .map_err(message)
            .unwrap(),
        [32, 64]
    );
    let all = t.js_parameters();
    assert_eq!(all, f32s(INIT));
    let w1 = t.js_parameter("w1").map_err(message).unwrap();
    assert_eq!(w1[..], all[..64 * 32]);
    let saved = t.js_persistent();
    let mut u = Trainer::new(PLAN).map_err(message).unwrap();
    u.js_load_persistent(&saved).map_err(message).unwrap();
    assert_eq!(u.js_digest(), t.js_digest());
    assert!(t.arena_bytes() >= 4 * t.persistent_elems());
}
