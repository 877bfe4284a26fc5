//! Puts the MLX libraries on the cdylib's run path, so ORT can load it as built: the
//! library's own folder first (for a bundle that ships libmlxc/libmlx next to it), then the
//! folders `mlx-sys` provisioned them in (`DEP_MLXC_LIB_DIR`, `DEP_MLXC_MLX_LIB_DIR`).
//!
//! Also fingerprints the source of the serialized plan's types (`PLAN_TYPES_FINGERPRINT`):
//! an EPContext cache written by a build with other plan types is refused, not misread.

use std::path::{Path, PathBuf};

/// The files whose types a serialized `plan::Plan` holds.
fn plan_sources(manifest: &Path) -> Vec<PathBuf> {
    let crates = manifest.join("..");
    let mut files = vec![
        crates.join("plan/src/plan.rs"),
        crates.join("plan/src/host.rs"),
        crates.join("plan/src/step.rs"),
        crates.join("onnx-ir/src/dtype.rs"),
        crates.join("onnx-ir/src/graph.rs"),
        crates.join("onnx-ir/src/tensor.rs"),
    ];
    if let Ok(dir) = std::fs::read_dir(crates.join("plan/src/step")) {
        let mut more: Vec<PathBuf> = dir.filter_map(|e| Some(e.ok()?.path())).collect();
        more.sort();
        files.extend(more);
    }
    files
}

/// 64-bit FNV-1a over the files' names and bytes (missing files hash as empty).
fn fingerprint(files: &[PathBuf]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    for f in files {
        eat(f
            .file_name()
            .map(|n| n.as_encoded_bytes())
            .unwrap_or_default());
        eat(&std::fs::read(f).unwrap_or_default());
    }
    h
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let files = plan_sources(&manifest);
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    println!(
        "cargo:rerun-if-changed={}",
        manifest.join("../plan/src/step").display()
    );
    println!(
        "cargo:rustc-env=PLAN_TYPES_FINGERPRINT={:016x}",
        fingerprint(&files)
    );
    println!("cargo:rerun-if-env-changed=DEP_MLXC_LIB_DIR");
    println!("cargo:rerun-if-env-changed=DEP_MLXC_MLX_LIB_DIR");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let origin = match target_os.as_str() {
        "macos" | "ios" => "@loader_path",
        "windows" => return,
        _ => "$ORIGIN",
    };
    println!("cargo:rustc-link-arg-cdylib=-Wl,-rpath,{origin}");
    for var in ["DEP_MLXC_LIB_DIR", "DEP_MLXC_MLX_LIB_DIR"] {
        if let Ok(dir) = std::env::var(var)
            && !dir.is_empty()
        {
            println!("cargo:rustc-link-arg-cdylib=-Wl,-rpath,{dir}");
        }
    }
}
