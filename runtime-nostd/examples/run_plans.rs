//! Runs serialized plans through this build's runtime and catalog and writes their outputs: the
//! second runtime build of `cargo xtask onnx-conformance`, which builds it with `--features
//! simd` to check every passing node test on the SIMD catalog against the oracle, bit for bit.
//!
//! ```sh
//! cargo run --release -p tapeplan-runtime --features simd --example run_plans -- JOBS OUT
//! ```
//!
//! `JOBS` holds one job after another; every integer is a little-endian `u32`, every value a
//! little-endian `f32`, every name its length then its UTF-8 bytes:
//!
//! ```text
//! job      := plan_len plan_bytes entry_name params inputs outputs
//! params   := count (name n value*n)*     (parameters absent from the plan are skipped)
//! inputs   := count (name n value*n)*     (inputs absent from the entry are skipped)
//! outputs  := count name*
//! ```
//!
//! `OUT` gets, per job, a status (`0` ran, `1` failed) and then either each output as `n
//! value*n`, or the error's message as a name.

use std::fs;

use tapeplan_runtime::{Plan, Session};

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> &'a [u8] {
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        s
    }
    fn u32(&mut self) -> usize {
        u32::from_le_bytes(self.bytes(4).try_into().unwrap()) as usize
    }
    fn name(&mut self) -> String {
        let n = self.u32();
        String::from_utf8(self.bytes(n).to_vec()).unwrap()
    }
    fn values(&mut self) -> Vec<f32> {
        let n = self.u32();
        self.bytes(4 * n)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }
    fn named_values(&mut self) -> Vec<(String, Vec<f32>)> {
        (0..self.u32())
            .map(|_| (self.name(), self.values()))
            .collect()
    }
}

fn put_u32(out: &mut Vec<u8>, v: usize) {
    out.extend_from_slice(&u32::try_from(v).unwrap().to_le_bytes());
}

/// Runs one job: the outputs, or the error's text.
fn run(
    plan: &[u8],
    entry: &str,
    params: &[(String, Vec<f32>)],
    inputs: &[(String, Vec<f32>)],
    outputs: &[String],
) -> Result<Vec<Vec<f32>>, String> {
    let s = |e: &dyn std::fmt::Display| e.to_string();
    let parsed = Plan::parse_alloc(plan).map_err(|e| s(&e))?;
    let entry = parsed
        .entry(entry)
        .ok_or_else(|| format!("no entry {entry:?}"))?;
    let mut arena = vec![0.0f32; parsed.arena_elems()];
    let mut session = Session::bind(&parsed, &mut arena).map_err(|e| s(&e))?;
    for (name, v) in params {
        if parsed.parameter(name).is_some() {
            session.load_parameter(name, v).map_err(|e| s(&e))?;
        }
    }
    for (name, v) in inputs {
        if parsed.input(entry, name).is_some() {
            session.set_input(entry, name, v).map_err(|e| s(&e))?;
        }
    }
    session.run(entry).map_err(|e| s(&e))?;
    outputs
        .iter()
        .map(|o| {
            session
                .output(entry, o)
                .map(<[f32]>::to_vec)
                .map_err(|e| s(&e))
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, jobs, out_path] = args.as_slice() else {
        panic!("usage: run_plans JOBS OUT");
    };
    let bytes = fs::read(jobs).unwrap();
    let mut r = Reader { b: &bytes, at: 0 };
    let mut out = Vec::new();
    while r.at < bytes.len() {
        let n = r.u32();
        let plan = r.bytes(n).to_vec();
        let entry = r.name();
        let params = r.named_values();
        let inputs = r.named_values();
        let outputs: Vec<String> = (0..r.u32()).map(|_| r.name()).collect();
        match run(&plan, &entry, &params, &inputs, &outputs) {
            Ok(values) => {
                put_u32(&mut out, 0);
                for v in values {
                    put_u32(&mut out, v.len());
                    for x in v {
                        out.extend_from_slice(&x.to_le_bytes());
                    }
                }
            }
            Err(e) => {
                put_u32(&mut out, 1);
                put_u32(&mut out, e.len());
                out.extend_from_slice(e.as_bytes());
            }
        }
    }
    fs::write(out_path, out).unwrap();
    eprintln!(
        "run_plans ({}): {} bytes of jobs",
        tapeplan_runtime::catalog::CATALOG,
        bytes.len()
    );
}
