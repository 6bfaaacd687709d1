//! The ONNX conformance step's second runtime build: every data set of every node test that
//! passed on the scalar catalog runs again, from the same plan bytes, parameters and inputs,
//! through the runtime built with `--features simd,alloc` (the `run_plans` example of
//! `tapeplan-runtime`, in one process for all tests), and each output must equal the oracle's
//! bit for bit.

use std::fs;
use std::path::Path;

use anyhow::{bail, Context, Result};
use tapeplan_planner::exec::forward::{output_binding, ForwardOutputs, ENTRY};
use tapeplan_planner::model::onnx::Translation;

use crate::Ctx;

/// One forward run to repeat on the SIMD catalog: what the runtime needs and what the oracle
/// answered.
pub struct Job {
    /// The node test's directory name.
    pub test: String,
    /// The serialized plan.
    plan: Vec<u8>,
    /// Parameters and inputs by binding name.
    parameters: Vec<(String, Vec<f32>)>,
    inputs: Vec<(String, Vec<f32>)>,
    /// The oracle's outputs, in the plan's output order.
    oracle: Vec<Vec<f32>>,
}

impl Job {
    /// The job for one data set of a test: the translation `t`, the inputs it was given (by
    /// ONNX name) and what both readings answered.
    pub fn new(
        test: &str,
        t: &Translation,
        inputs: &std::collections::BTreeMap<String, Vec<f32>>,
        out: &ForwardOutputs,
    ) -> Job {
        Job {
            test: test.to_owned(),
            plan: out.plan.clone(),
            parameters: t
                .parameters
                .iter()
                .map(|p| (p.tape_name.clone(), p.value.clone()))
                .collect(),
            inputs: t
                .inputs
                .iter()
                .filter_map(|i| Some((i.tape_name.clone(), inputs.get(&i.onnx_name)?.clone())))
                .collect(),
            oracle: out.oracle.clone(),
        }
    }
}

fn put_u32(b: &mut Vec<u8>, v: usize) -> Result<()> {
    b.extend_from_slice(&u32::try_from(v).context("a length past u32")?.to_le_bytes());
    Ok(())
}

fn put_name(b: &mut Vec<u8>, s: &str) -> Result<()> {
    put_u32(b, s.len())?;
    b.extend_from_slice(s.as_bytes());
    Ok(())
}

fn put_named(b: &mut Vec<u8>, values: &[(String, Vec<f32>)]) -> Result<()> {
    put_u32(b, values.len())?;
    for (name, v) in values {
        put_name(b, name)?;
        put_u32(b, v.len())?;
        for x in v {
            b.extend_from_slice(&x.to_le_bytes());
        }
    }
    Ok(())
}

/// The jobs in `run_plans`'s input format (see `runtime-nostd/examples/run_plans.rs`).
fn encode(jobs: &[Job]) -> Result<Vec<u8>> {
    let mut b = Vec::new();
    for j in jobs {
        put_u32(&mut b, j.plan.len())?;
        b.extend_from_slice(&j.plan);
        put_name(&mut b, ENTRY)?;
        put_named(&mut b, &j.parameters)?;
        put_named(&mut b, &j.inputs)?;
        put_u32(&mut b, j.oracle.len())?;
        for k in 0..j.oracle.len() {
            put_name(&mut b, &output_binding(k))?;
        }
    }
    Ok(b)
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self
            .b
            .get(self.at..self.at + n)
            .context("run_plans' output ends early")?;
        self.at += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<usize> {
        let b: [u8; 4] = self.bytes(4)?.try_into()?;
        Ok(u32::from_le_bytes(b) as usize)
    }
}

/// What the SIMD build answered for each job: `Ok(())` when every output equals the oracle's
/// bit for bit, else why not.
pub struct Checked {
    /// The catalog the second build carries (`simd-sse2`, …).
    pub catalog: String,
    /// Per job, in order.
    pub results: Vec<Result<(), String>>,
}

/// Builds `run_plans` with `--features simd,alloc`, runs every job through it, and compares.
///
/// # Errors
/// When the build or the run fails, or its output is malformed (not when an output differs:
/// that is a job's result).
pub fn check(ctx: &Ctx, jobs: &[Job], dir: &Path) -> Result<Checked> {
    fs::create_dir_all(dir)?;
    let (jobs_path, out_path) = (dir.join("jobs.bin"), dir.join("outputs.bin"));
    fs::write(&jobs_path, encode(jobs)?)?;
    let mut cmd = ctx.cargo([
        "run",
        "--release",
        "--quiet",
        "-p",
        "tapeplan-runtime",
        "--features",
        "simd,alloc",
        "--example",
        "run_plans",
        "--",
    ]);
    cmd.arg(&jobs_path).arg(&out_path);
    let catalog_line = {
        let o = cmd
            .output()
            .context("could not start cargo run --example run_plans")?;
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        if !o.status.success() {
            bail!("run_plans --features simd failed ({}): {err}", o.status);
        }
        err
    };
    let catalog = catalog_line
        .lines()
        .find_map(|l| l.strip_prefix("run_plans (")?.split(')').next())
        .unwrap_or("simd")
        .to_owned();
    let bytes = fs::read(&out_path)?;
    let mut c = Cursor { b: &bytes, at: 0 };
    let mut results = Vec::with_capacity(jobs.len());
    for j in jobs {
        if c.u32()? != 0 {
            let n = c.u32()?;
            let why = String::from_utf8_lossy(c.bytes(n)?).into_owned();
            results.push(Err(format!("the simd runtime failed: {why}")));
            continue;
        }
        let mut verdict = Ok(());
        for (k, want) in j.oracle.iter().enumerate() {
            let n = c.u32()?;
            let got: Vec<f32> = c
                .bytes(4 * n)?
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            if verdict.is_ok() {
                if let Some(i) = (0..want.len().max(got.len()))
                    .find(|&i| want.get(i).map(|v| v.to_bits()) != got.get(i).map(|v| v.to_bits()))
                {
                    verdict = Err(format!(
                        "output {k}: oracle and simd runtime ({catalog}) differ at element {i}: {:?} vs {:?}",
                        want.get(i),
                        got.get(i)
                    ));
                }
            }
        }
        results.push(verdict);
    }
    Ok(Checked { catalog, results })
}
