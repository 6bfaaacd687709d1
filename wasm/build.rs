//! The module's op set (docs/selective-build.md, "The wasm module's size").
//!
//! `TAPEPLAN_WASM_OPS` names the opcodes a selective module dispatches (their `Opcode` variant
//! names, comma-separated, as `OpSet::variants` writes them; `cargo xtask npm-pack --plan PLAN`
//! sets it from the plan's `Plan::op_set`). The generated `WasmOps` is then
//! `op_set!(pub struct WasmOps = [...])`, and only those opcodes' kernels, shape rules and
//! attribute decoders are linked; a plan using another one is refused at load. Unset or empty:
//! `WasmOps` is the build's whole vocabulary (`BuildOps`), as before.

use std::{env, fs, path::PathBuf};

fn main() {
    println!("cargo::rerun-if-env-changed=TAPEPLAN_WASM_OPS");
    println!("cargo::rerun-if-changed=build.rs");
    let ops = env::var("TAPEPLAN_WASM_OPS").unwrap_or_default();
    let names: Vec<&str> = ops
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    let text = if names.is_empty() {
        "/// The opcodes this module dispatches: the build's whole vocabulary.\n\
         pub type WasmOps = tapeplan_runtime::BuildOps;\n"
            .to_string()
    } else {
        for n in &names {
            assert!(
                n.chars().all(|c| c.is_ascii_alphanumeric()),
                "TAPEPLAN_WASM_OPS: {n:?} is not an opcode's variant name (e.g. MatMul)"
            );
        }
        format!(
            "tapeplan_runtime::op_set!(\n    /// The opcodes this module dispatches (a selective \
             build, `TAPEPLAN_WASM_OPS`).\n    pub struct WasmOps = [{}]\n);\n",
            names.join(", ")
        )
    };
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("ops.rs");
    if fs::read_to_string(&out).ok().as_deref() != Some(text.as_str()) {
        fs::write(&out, text).expect("writing OUT_DIR/ops.rs");
    }
}
