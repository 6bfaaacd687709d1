//! `docs-check`: the command outputs the docs quote are run and compared, so they cannot go
//! stale (issue 17).
//!
//! A checked block is a fenced ```` ```text ```` block right after a line
//! `<!-- docs-check -->` in one of [`DOCS`]. In it, a line `$ COMMAND` is a command and the
//! lines after it, up to the next `$ ` line, are what it prints on standard output, exactly; a
//! command followed directly by another (nothing quoted) must only succeed. The commands of a
//! block run in order in a fresh directory under `target/docs-check/`, with `tapeplan` the
//! release binary of this checkout and `python3` the venv `cargo xtask setup` makes (numpy,
//! safetensors); an argument naming a file of the repository (`scripts/check_export.py`) is
//! given its path. Arguments are split on spaces: no quotes.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{anyhow, bail, ensure, Context, Result};

use crate::{run, show, Ctx, PY_VENV};

/// The Markdown files that may hold checked blocks.
const DOCS: &[&str] = &[
    "README.md",
    "docs/adding-an-op.md",
    "docs/benchmarks.md",
    "docs/checkpoints.md",
    "docs/fuzzing.md",
    "docs/getting-started/plan-on-the-host.md",
    "docs/getting-started/verify-a-device.md",
    "docs/math-profiles.md",
    "docs/onnx.md",
    "docs/onnx-cnn-walkthrough.md",
    "docs/plan-format.md",
    "docs/threat-model.md",
    "wasm/README.md",
    "firmware-demo/README.md",
];

/// The marker line before a checked block.
const MARKER: &str = "<!-- docs-check -->";

/// One command of a checked block and the output the doc quotes for it.
#[derive(Debug, PartialEq)]
struct Quoted {
    /// 1-based line of the `$ ` line in the doc.
    line: usize,
    /// The command, without `$ `.
    command: String,
    /// The quoted standard output, one entry a line; `None` when nothing is quoted.
    output: Option<Vec<String>>,
}

/// A checked block: where it is and its commands.
#[derive(Debug)]
struct Block {
    file: String,
    line: usize,
    commands: Vec<Quoted>,
}

/// The checked blocks of `text` (the contents of `file`).
fn blocks(file: &str, text: &str) -> Result<Vec<Block>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != MARKER {
            i += 1;
            continue;
        }
        let fence = i + 1;
        ensure!(
            lines.get(fence).is_some_and(|l| l.trim() == "```text"),
            "{file}:{}: `{MARKER}` must be followed by a ```text block",
            fence + 1
        );
        let mut commands: Vec<Quoted> = Vec::new();
        let mut j = fence + 1;
        loop {
            let Some(line) = lines.get(j) else {
                bail!("{file}:{}: the checked block is not closed", fence + 1);
            };
            if line.trim() == "```" {
                break;
            }
            if let Some(command) = line.strip_prefix("$ ") {
                commands.push(Quoted {
                    line: j + 1,
                    command: command.trim().to_string(),
                    output: None,
                });
            } else {
                let last = commands.last_mut().ok_or_else(|| {
                    anyhow!(
                        "{file}:{}: a checked block starts with a `$ ` command",
                        j + 1
                    )
                })?;
                last.output
                    .get_or_insert_with(Vec::new)
                    .push(line.trim_end().to_string());
            }
            j += 1;
        }
        ensure!(
            !commands.is_empty(),
            "{file}:{}: the checked block has no command",
            fence + 1
        );
        out.push(Block {
            file: file.to_string(),
            line: fence + 1,
            commands,
        });
        i = j + 1;
    }
    Ok(out)
}

/// The first difference between the quoted lines and the printed ones, if any: (0-based line,
/// quoted, printed).
fn first_difference(quoted: &[String], printed: &str) -> Option<(usize, String, String)> {
    let printed: Vec<&str> = printed.lines().map(str::trim_end).collect();
    let n = quoted.len().max(printed.len());
    (0..n).find_map(|k| {
        let q = quoted.get(k).map_or("(nothing)", String::as_str);
        let p = printed.get(k).copied().unwrap_or("(nothing)");
        (q != p).then(|| (k, q.to_string(), p.to_string()))
    })
}

/// `docs-check`: see the module docs.
pub fn step_docs_check(ctx: &Ctx) -> Result<()> {
    let mut all = Vec::new();
    for file in DOCS {
        let path = ctx.root.join(file);
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        all.extend(blocks(file, &text)?);
    }
    ensure!(!all.is_empty(), "no `{MARKER}` block in {DOCS:?}");
    run(ctx.cargo(["build", "--release", "-q", "-p", "tapeplan-planner"]))?;
    let tapeplan = crate::target_dir(ctx)?.join("release").join("tapeplan");
    let python = ctx.root.join(PY_VENV).join("bin").join("python");
    let mut checked = 0;
    for block in &all {
        let dir = ctx.root.join("target/docs-check").join(format!(
            "{}-{}",
            block.file.replace('/', "_"),
            block.line
        ));
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("clearing {}", dir.display()))?;
        }
        fs::create_dir_all(&dir)?;
        for quoted in &block.commands {
            let at = format!("{}:{}", block.file, quoted.line);
            ensure!(
                !quoted
                    .command
                    .contains(['"', '\'', '|', '>', '<', '&', ';']),
                "{at}: a checked command is split on spaces only: no quotes, pipes or redirections"
            );
            let mut words = quoted.command.split_whitespace();
            let program = words.next().ok_or_else(|| anyhow!("{at}: empty command"))?;
            let program: PathBuf = match program {
                "tapeplan" => tapeplan.clone(),
                "python3" => {
                    ensure!(
                        python.is_file(),
                        "{at} runs python3 with numpy and safetensors: run `cargo xtask setup` \
                         (it makes {PY_VENV})"
                    );
                    python.clone()
                }
                other => bail!("{at}: checked commands run `tapeplan` or `python3`, not `{other}`"),
            };
            let mut cmd = Command::new(program);
            for word in words {
                let in_repo = ctx.root.join(word);
                if word.contains('/') && in_repo.is_file() {
                    cmd.arg(in_repo);
                } else {
                    cmd.arg(word);
                }
            }
            cmd.current_dir(&dir);
            let out = cmd
                .output()
                .with_context(|| format!("{at}: could not start `{}`", show(&cmd)))?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() {
                bail!(
                    "{at}: `{}` failed ({}):\n{stdout}{}",
                    quoted.command,
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            if let Some(quoted_lines) = &quoted.output {
                if let Some((k, doc, now)) = first_difference(quoted_lines, &stdout) {
                    bail!(
                        "{}:{}: the doc quotes `{doc}` but `{}` prints `{now}`; its whole \
                         output:\n{stdout}",
                        block.file,
                        quoted.line + 1 + k,
                        quoted.command
                    );
                }
                checked += quoted_lines.len();
            }
        }
        eprintln!(
            "docs-check: {}:{}: {} commands ran, their quoted output matches",
            block.file,
            block.line,
            block.commands.len()
        );
    }
    eprintln!(
        "docs-check: {} block(s), {checked} quoted output lines, all current",
        all.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_checked_blocks_and_their_quoted_output() {
        let text = "intro\n```text\n$ not checked\n```\n<!-- docs-check -->\n```text\n\
                    $ tapeplan plan -o a.plan\n$ tapeplan describe a.plan\nline one\n\
                    line two  \n```\nafter\n";
        let found = blocks("x.md", text).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].line, 6);
        assert_eq!(
            found[0].commands,
            [
                Quoted {
                    line: 7,
                    command: "tapeplan plan -o a.plan".into(),
                    output: None
                },
                Quoted {
                    line: 8,
                    command: "tapeplan describe a.plan".into(),
                    output: Some(vec!["line one".into(), "line two".into()])
                }
            ]
        );
        assert!(blocks("x.md", "<!-- docs-check -->\nno fence\n").is_err());
        assert!(blocks("x.md", "<!-- docs-check -->\n```text\n$ a\n").is_err());
        assert!(blocks("x.md", "<!-- docs-check -->\n```text\noutput first\n```\n").is_err());
    }

    #[test]
    fn first_difference_names_the_line() {
        let quoted = vec!["a".to_string(), "b".to_string()];
        assert_eq!(first_difference(&quoted, "a\nb\n"), None);
        assert_eq!(first_difference(&quoted, "a  \nb"), None);
        assert_eq!(
            first_difference(&quoted, "a\nc\n"),
            Some((1, "b".into(), "c".into()))
        );
        assert_eq!(
            first_difference(&quoted, "a\nb\nmore\n"),
            Some((2, "(nothing)".into(), "more".into()))
        );
        assert_eq!(
            first_difference(&quoted, "a\n"),
            Some((1, "b".into(), "(nothing)".into()))
        );
    }
}
