//! The runtime's one `unsafe` stays fenced: `lib.rs` denies `unsafe_code` (not `forbid`, so that
//! `catalog::lanes::splat_each` may allow it), and this test fails when any other source file
//! or function allows it, or when a second `unsafe` block appears.

use std::path::Path;

/// Every `.rs` file under `dir`, recursively, with its text.
fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read src")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("read source");
            out.push((path.display().to_string(), text));
        }
    }
}

#[test]
fn one_fenced_unsafe_in_the_runtime() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(files.len() > 10, "found only {} source files", files.len());
    let count = |needle: &str| -> Vec<String> {
        files
            .iter()
            .flat_map(|(path, text)| {
                text.lines()
                    .enumerate()
                    .filter(|(_, l)| !l.trim_start().starts_with("//"))
                    .filter(|(_, l)| l.contains(needle))
                    .map(move |(i, _)| format!("{path}:{}", i + 1))
            })
            .collect()
    };
    let allows = count("allow(unsafe_code)");
    assert_eq!(allows.len(), 1, "allow(unsafe_code) at {allows:?}");
    assert!(allows[0].contains("catalog/lanes.rs"), "{allows:?}");
    let blocks = count("unsafe {");
    assert_eq!(blocks.len(), 1, "unsafe blocks at {blocks:?}");
    assert!(blocks[0].contains("catalog/lanes.rs"), "{blocks:?}");
    assert_eq!(count("unsafe fn").len(), 0, "{:?}", count("unsafe fn"));
    assert_eq!(count("unsafe impl").len(), 0, "{:?}", count("unsafe impl"));
    let lib = files
        .iter()
        .find(|(p, _)| p.ends_with("src/lib.rs"))
        .expect("lib.rs");
    assert!(
        lib.1.contains("#![deny(unsafe_code)]"),
        "lib.rs must deny unsafe_code"
    );
    // The crate's own lint table (it cannot inherit the workspace's and change one lint) keeps
    // every other lint of `[workspace.lints]`, at the same level.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("read Cargo.toml");
    let workspace =
        std::fs::read_to_string(dir.join("../Cargo.toml")).expect("read the workspace Cargo.toml");
    assert!(manifest.contains("unsafe_code = \"deny\""));
    let mut in_lints = false;
    let mut checked = 0;
    for line in workspace.lines().map(str::trim) {
        if line.starts_with('[') {
            in_lints = line.starts_with("[workspace.lints");
            continue;
        }
        if !in_lints || line.is_empty() || line.starts_with('#') || line.starts_with("unsafe_code")
        {
            continue;
        }
        assert!(
            manifest.contains(line),
            "runtime-nostd/Cargo.toml lacks the workspace lint `{line}`"
        );
        checked += 1;
    }
    assert!(checked >= 2, "read {checked} workspace lints");
}
