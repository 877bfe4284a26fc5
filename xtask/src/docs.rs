//! `cargo xtask docs`: `docs/operators.md` from the op registry (the `operators_doc` example
//! of `ortmlx-plan`) and the environment-variable table of `docs/usage.md` from `ENV_VARS`
//! (`crates/ep-plugin/src/env_vars.rs`, compiled in here), and the documentation checks
//! `cargo xtask test` runs: both are current, and `cargo doc --workspace --no-deps` has no
//! warnings.

use std::fs;
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, Result, bail};

use crate::util::{self, banner};

/// The generated operator reference, relative to the workspace root.
const OPERATORS_MD: &str = "docs/operators.md";

/// The page holding the generated environment table, relative to the workspace root.
const USAGE_MD: &str = "docs/usage.md";

/// The table goes between the line starting with this marker and the one starting with
/// [`ENV_END`].
const ENV_BEGIN: &str = "<!-- env-vars:begin";
/// See [`ENV_BEGIN`].
const ENV_END: &str = "<!-- env-vars:end -->";

/// The project's environment variables: the same source the EP library compiles.
#[allow(dead_code)]
mod env_vars {
    include!("../../crates/ep-plugin/src/env_vars.rs");
}

/// The Markdown table of [`env_vars::ENV_VARS`].
fn env_table() -> String {
    let mut out = String::from("| variable | scope | read by | effect |\n|---|---|---|---|\n");
    for v in env_vars::ENV_VARS {
        let cell = |s: &str| s.replace('|', "\\|");
        out.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            v.name,
            v.scope.label(),
            cell(v.read_by),
            cell(v.meaning)
        ));
    }
    out
}

/// `page` with the text between its environment markers replaced by the table.
fn with_env_table(page: &str) -> Result<String> {
    let Some(begin) = page.find(ENV_BEGIN) else {
        bail!("{USAGE_MD} has no `{ENV_BEGIN}` marker");
    };
    // The begin marker's comment may run over several lines: the table starts after it.
    let Some(close) = page[begin..].find("-->") else {
        bail!("{USAGE_MD}: the `{ENV_BEGIN}` comment is not closed");
    };
    let body_start = begin + close + "-->".len();
    let Some(end) = page[body_start..].find(ENV_END) else {
        bail!("{USAGE_MD} has no `{ENV_END}` marker after `{ENV_BEGIN}`");
    };
    let end = body_start + end;
    Ok(format!(
        "{}\n\n{}\n{}",
        &page[..body_start],
        env_table(),
        &page[end..]
    ))
}

fn usage_path() -> PathBuf {
    util::workspace_root().join(USAGE_MD)
}

fn operators_path() -> PathBuf {
    util::workspace_root().join(OPERATORS_MD)
}

/// Runs the generator and returns the page.
fn generate() -> Result<String> {
    let mut cmd = util::cargo();
    cmd.args([
        "run",
        "--quiet",
        "--package",
        "ortmlx-plan",
        "--example",
        "operators_doc",
    ]);
    println!("$ {}", util::show(&cmd));
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("running the operators_doc example")?;
    if !out.status.success() {
        bail!("the operators_doc example failed");
    }
    String::from_utf8(out.stdout).context("the generated page is not UTF-8")
}

/// `cargo xtask docs`: (re)writes `docs/operators.md`.
pub fn run() -> Result<()> {
    banner(&format!("docs: generate {OPERATORS_MD} from the registry"));
    let page = generate()?;
    let path = operators_path();
    fs::create_dir_all(path.parent().expect("docs/ has a parent"))?;
    fs::write(&path, &page).with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {} ({} lines)", path.display(), page.lines().count());

    banner(&format!(
        "docs: the environment table of {USAGE_MD} from ENV_VARS"
    ));
    let path = usage_path();
    let page = fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let fresh = with_env_table(&page)?;
    if fresh != page {
        fs::write(&path, &fresh).with_context(|| format!("writing {}", path.display()))?;
    }
    println!(
        "{} ({} variables)",
        path.display(),
        env_vars::ENV_VARS.len()
    );
    Ok(())
}

/// Whether the environment table of `docs/usage.md` matches `ENV_VARS`.
pub fn check_env_table() -> Result<bool> {
    banner(&format!(
        "test: the environment table of {USAGE_MD} is current"
    ));
    let page = fs::read_to_string(usage_path()).unwrap_or_default();
    let current = with_env_table(&page).is_ok_and(|fresh| fresh == page);
    if current {
        println!("{USAGE_MD}: the environment table is current");
    } else {
        println!("{USAGE_MD}: the environment table is stale (run `cargo xtask docs`)");
    }
    Ok(current)
}

/// Whether `docs/operators.md` matches what the registry generates now; prints the first
/// differences when it does not.
pub fn check_operators() -> Result<bool> {
    banner(&format!("test: {OPERATORS_MD} is current"));
    let fresh = generate()?;
    let path = operators_path();
    let committed = fs::read_to_string(&path).unwrap_or_default();
    if committed == fresh {
        println!("{OPERATORS_MD} is current");
        return Ok(true);
    }
    let tmp = util::target_dir().join("operators.md.new");
    fs::create_dir_all(util::target_dir())?;
    fs::write(&tmp, &fresh)?;
    println!(
        "{OPERATORS_MD} is stale: the registry now generates {} (run `cargo xtask docs`). First differences:",
        tmp.display()
    );
    let old: Vec<&str> = committed.lines().collect();
    let new: Vec<&str> = fresh.lines().collect();
    let mut shown = 0;
    for i in 0..old.len().max(new.len()) {
        let (a, b) = (old.get(i), new.get(i));
        if a != b {
            println!("  line {}:", i + 1);
            println!("  - {}", a.unwrap_or(&"(none)"));
            println!("  + {}", b.unwrap_or(&"(none)"));
            shown += 1;
            if shown == 10 {
                break;
            }
        }
    }
    Ok(false)
}

/// `cargo doc --workspace --no-deps` with warnings as errors.
pub fn rustdoc() -> Result<bool> {
    banner("test: cargo doc --workspace --no-deps (RUSTDOCFLAGS=-D warnings)");
    util::status(
        util::cargo()
            .args(["doc", "--workspace", "--no-deps"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_env_table_goes_between_the_markers() {
        let page = "intro\n<!-- env-vars:begin. note\n     more -->\nSTALE ROW\n<!-- env-vars:end -->\nafter\n";
        let fresh = with_env_table(page).unwrap();
        assert!(
            fresh.starts_with("intro\n<!-- env-vars:begin. note\n     more -->\n\n| variable |")
        );
        assert!(fresh.ends_with("|\n\n<!-- env-vars:end -->\nafter\n"));
        assert!(!fresh.contains("STALE ROW"));
        assert_eq!(with_env_table(&fresh).unwrap(), fresh);
        assert!(fresh.contains("| `ORTMLX_LOG` | EP library | ortmlx-ep | `error\\|warn"));
        assert!(with_env_table("no markers").is_err());
    }
}
