//! `cargo xtask docs`: `docs/operators.md` from the op registry (the `operators_doc` example
//! of `ortmlx-plan`), and the documentation checks `cargo xtask test` runs: the page is
//! current, and `cargo doc --workspace --no-deps` has no warnings.

use std::fs;
use std::path::PathBuf;
use std::process::Stdio;

use anyhow::{Context, Result, bail};

use crate::util::{self, banner};

/// The generated operator reference, relative to the workspace root.
const OPERATORS_MD: &str = "docs/operators.md";

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
    Ok(())
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
