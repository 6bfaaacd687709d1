//! The cases (`cargo xtask matrix` writes them, `TAPEPLAN_MATRIX_CASES` names their folder):
//! with the variable set, `tests/matrix.rs` embeds them (`cfg(matrix_cases)`); without, it is
//! empty, so the workspace builds without them.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(matrix_cases)");
    println!("cargo:rerun-if-env-changed=TAPEPLAN_MATRIX_CASES");
    if let Some(dir) = std::env::var_os("TAPEPLAN_MATRIX_CASES") {
        println!("cargo:rustc-cfg=matrix_cases");
        println!("cargo:rerun-if-changed={}", dir.to_string_lossy());
    }
}
