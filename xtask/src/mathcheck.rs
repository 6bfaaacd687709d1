//! `cargo xtask mathcheck`: the catalog's transcendental kernels against `libm` on all 2^32
//! `f32` inputs (the runtime's `mathcheck` example, in release), built for this CPU (the AVX-512
//! or AVX2 catalog where present) and, with `--baseline`, for x86_64's baseline (SSE2) too.

use anyhow::{bail, Result};

use crate::{run, Ctx};

/// Runs the exhaustive check; `args`: `--stride N` (every Nth bit pattern), `--only NAME` (one
/// function), `--baseline` (also the SSE2 catalog).
pub(crate) fn verb_mathcheck(ctx: &Ctx, args: &[String]) -> Result<()> {
    let mut pass: Vec<String> = Vec::new();
    let mut baseline = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--baseline" => baseline = true,
            "--stride" | "--only" => match it.next() {
                Some(v) => pass.extend([a.clone(), v.clone()]),
                None => bail!("mathcheck: {a} needs a value"),
            },
            other => bail!("mathcheck: unknown argument `{other}`"),
        }
    }
    // The native build in a directory of its own, beside the workspace's target directory.
    let native = crate::target_dir(ctx)?.join("simd-native");
    let builds: &[Option<&std::path::Path>] = if baseline {
        &[Some(&native), None]
    } else {
        &[Some(&native)]
    };
    for dir in builds {
        let mut cmd = ctx.cargo([
            "run",
            "--release",
            "-p",
            "tapeplan-runtime",
            "--features",
            "simd",
            "--example",
            "mathcheck",
            "--",
        ]);
        cmd.args(&pass);
        if let Some(dir) = dir {
            cmd.env("RUSTFLAGS", "-C target-cpu=native")
                .env("CARGO_TARGET_DIR", dir);
        }
        run(cmd)?;
    }
    Ok(())
}
