//! `cargo xtask demo`: setup + build, then `tests/python/demo.py` with the newest pinned ORT.

use std::process::Command;

use anyhow::{Context, Result};

use crate::setup::{self, LATEST_ORT, Scope};
use crate::util::{self, banner};
use crate::{build, test::EP_LIBRARY_VAR};

/// Runs the demo.
pub fn run() -> Result<()> {
    let venvs = setup::run(Scope::Only(LATEST_ORT))?;
    let venv = &venvs[0];
    let lib = build::run()?;
    banner(&format!(
        "demo: a small encoder through onnxruntime {LATEST_ORT}, MLX EP vs CPU EP"
    ));
    let root = util::workspace_root();
    util::run(
        Command::new(venv.python())
            .arg(root.join("tests").join("python").join("demo.py"))
            .current_dir(&root)
            .env(EP_LIBRARY_VAR, &lib)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    )
    .context("the demo failed")
}
