//! `cargo xtask build`: the EP library, release profile.

use std::env::consts::{DLL_PREFIX, DLL_SUFFIX};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::util::{self, banner};

/// The package that builds the EP cdylib.
const EP_PACKAGE: &str = "ortmlx-ep";

/// The cdylib's stem (`[lib] name` of the package).
const EP_LIB: &str = "onnxruntime_mlx_ep";

/// Builds the EP library and returns its path.
pub fn run() -> Result<PathBuf> {
    banner(&format!("build: cargo build --release -p {EP_PACKAGE}"));
    util::run(util::cargo().args(["build", "--release", "-p", EP_PACKAGE]))
        .with_context(|| format!("building {EP_PACKAGE}"))?;
    let lib = library_path();
    if !lib.is_file() {
        bail!("the build succeeded but {} does not exist", lib.display());
    }
    println!("built {}", lib.display());
    Ok(lib)
}

/// Where the release build puts the EP library (`target/release/libonnxruntime_mlx_ep.so`).
pub fn library_path() -> PathBuf {
    util::target_dir()
        .join("release")
        .join(format!("{DLL_PREFIX}{EP_LIB}{DLL_SUFFIX}"))
}
