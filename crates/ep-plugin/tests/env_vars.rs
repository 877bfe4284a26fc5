//! `ENV_VARS` is the project's one list of environment variables: every `ORTMLX_` variable a
//! source file names is in it, every entry is named by some source file, and the variables
//! the crates export as constants are listed.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use onnxruntime_mlx_ep::env_vars::{ENV_VARS, EnvScope};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Source files (`.rs`, `.py`) under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs" || e == "py") {
            out.push(path);
        }
    }
}

/// The `ORTMLX_*` names in `text` (a bare prefix, or one ending in `_` as in
/// `ORTMLX_DISABLE_COMPILE_{DECODE,...}`, is not a name).
fn names_in(text: &str, out: &mut BTreeSet<String>) {
    let mut rest = text;
    while let Some(i) = rest.find("ORTMLX_") {
        let tail = &rest[i..];
        let len = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..len];
        if name.len() > "ORTMLX_".len() && !name.ends_with('_') {
            out.insert(name.to_string());
        }
        rest = &tail[len.max(1)..];
    }
}

#[test]
fn every_variable_the_sources_name_is_listed_and_every_listed_one_is_read() {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in ["crates", "xtask/src", "tests", "packaging"] {
        sources(&root.join(dir), &mut files);
    }
    let own = Path::new("crates/ep-plugin/src/env_vars.rs");
    let this = Path::new("crates/ep-plugin/tests/env_vars.rs");
    let mut named = BTreeSet::new();
    for f in &files {
        if f.ends_with(own) || f.ends_with(this) {
            continue;
        }
        names_in(&fs::read_to_string(f).unwrap_or_default(), &mut named);
    }
    assert!(
        named.contains("ORTMLX_LOG"),
        "the scan found nothing: {named:?}"
    );
    let listed: BTreeSet<String> = ENV_VARS.iter().map(|v| v.name.to_string()).collect();
    let missing: Vec<&String> = named.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "read in the sources but not in ENV_VARS (crates/ep-plugin/src/env_vars.rs): {missing:?}"
    );
    let unread: Vec<&String> = listed
        .iter()
        .filter(|n| n.starts_with("ORTMLX_") && !named.contains(*n))
        .collect();
    assert!(
        unread.is_empty(),
        "listed in ENV_VARS but read nowhere: {unread:?}"
    );
}

#[test]
fn entries_are_unique_and_documented() {
    let mut seen = BTreeSet::new();
    for v in ENV_VARS {
        assert!(seen.insert(v.name), "{} is listed twice", v.name);
        assert!(!v.meaning.is_empty() && !v.read_by.is_empty(), "{}", v.name);
        assert!(!v.meaning.contains('\n'), "{}: one line", v.name);
    }
    // Grouped by scope, in the documentation's order.
    let order = |s: EnvScope| match s {
        EnvScope::Library => 0,
        EnvScope::Build => 1,
        EnvScope::Tools => 2,
    };
    assert!(
        ENV_VARS
            .windows(2)
            .all(|w| order(w[0].scope) <= order(w[1].scope))
    );
    let named = |n: &str| ENV_VARS.iter().any(|v| v.name == n);
    assert!(named(runtime::MAX_TENSOR_BYTES_VAR));
    assert!(named(onnxruntime_mlx_ep::trace::TRACE_VAR));
    assert!(named("MLX_ENABLE_TF32"));
}
