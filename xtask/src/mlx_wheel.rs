//! The pinned MLX wheels of `crates/mlx-sys/build/pins.rs`, downloaded into the cache once and
//! verified by SHA-256: the CUDA 13 wheel's libmlx for `gpu-check`, and the same wheel as the
//! declared dependency of the CUDA package (`cargo xtask package --cuda`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util::run;

#[path = "../../crates/mlx-sys/build/pins.rs"]
#[allow(dead_code)]
pub mod pins;

/// The cache folder of the downloaded wheel and its unpacked copy.
const DIR: &str = "gpu-stage";

/// SHA-256 of a file, through `sha256sum`.
pub fn sha256(path: &Path) -> Result<String> {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .context("running sha256sum")?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string())
}

/// The pinned CUDA wheel (`mlx-cuda-13`), downloaded once into the cache and verified.
pub fn cuda_wheel(cache: &Path) -> Result<PathBuf> {
    let wheel = &pins::CUDA_WHEEL;
    let dir = cache.join(DIR);
    fs::create_dir_all(&dir)?;
    let file = dir.join(wheel.file);
    if !file.is_file() {
        run(Command::new("python3")
            .arg("-m")
            .args(wheel.pip_download_args(&dir)))
        .with_context(|| format!("downloading {} from PyPI", wheel.file))?;
    }
    let got = sha256(&file)?;
    if got != wheel.sha256 {
        fs::remove_file(&file).ok();
        bail!(
            "{} has SHA-256 {got}, expected {}; removed it, run again",
            file.display(),
            wheel.sha256
        );
    }
    Ok(file)
}

/// The pinned CUDA wheel unpacked into the cache (once; keyed by its SHA-256).
pub fn unpacked_cuda_wheel(cache: &Path) -> Result<PathBuf> {
    let wheel = cuda_wheel(cache)?;
    let unpacked = cache
        .join(DIR)
        .join(format!("unpacked-{}", &pins::CUDA_WHEEL.sha256[..16]));
    let marker = unpacked.join(".unpacked");
    if marker.is_file() && unpacked.join("mlx/lib/libmlx.so").is_file() {
        return Ok(unpacked);
    }
    fs::remove_dir_all(&unpacked).ok();
    run(Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&wheel)
        .arg(&unpacked))?;
    fs::write(&marker, format!("{}\n", pins::CUDA_WHEEL.sha256))?;
    Ok(unpacked)
}
