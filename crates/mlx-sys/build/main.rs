//! Provisions MLX and mlx-c, builds mlx-c with CMake and generates raw bindings.
//!
//! The MLX C++ SDK comes from the official wheel (pinned, SHA-256 verified); mlx-c's
//! source from the registry crate that vendors it (pinned, verified). Both, and the built
//! libmlxc, live in a cache outside the build tree keyed by the pins, so a second clone
//! builds in seconds. `ORTMLX_MLX_DIR` points at a user's own MLX install instead.

mod pins;
mod provision;

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

use provision::{Cache, fail};

fn main() {
    for var in [
        "ORTMLX_MLX_DIR",
        "ORTMLX_CACHE_DIR",
        "ORTMLX_ALLOW_REFERENCE_BLAS",
        "XDG_CACHE_HOME",
        "LIBCLANG_PATH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build");

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let wheel = if env::var_os("CARGO_FEATURE_CUDA").is_some() {
        &pins::CUDA_WHEEL
    } else if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        &pins::METAL_WHEEL
    } else {
        &pins::CPU_WHEEL
    };

    let cache = Cache::open(wheel);
    let _lock = cache.lock();
    let mlx_cmake_dir = match env::var_os("ORTMLX_MLX_DIR") {
        Some(dir) => user_mlx_cmake_dir(Path::new(&dir)),
        None => cache.mlx_sdk(wheel),
    };
    let mlxc = cache.mlx_c(&mlx_cmake_dir);

    generate_bindings(&mlxc.include_dir, &out_dir);
    expose_libraries(&mlxc, &out_dir);
}

/// The CMake config folder inside a user-provided MLX installation.
fn user_mlx_cmake_dir(dir: &Path) -> PathBuf {
    for candidate in [
        dir.join("share/cmake/MLX"),
        dir.join("mlx/share/cmake/MLX"),
        dir.to_path_buf(),
    ] {
        if candidate.join("MLXConfig.cmake").is_file() {
            return candidate;
        }
    }
    fail(&format!(
        "ORTMLX_MLX_DIR={} holds no MLXConfig.cmake (looked in share/cmake/MLX and mlx/share/cmake/MLX)",
        dir.display()
    ))
}

/// Runs bindgen over mlx-c's umbrella header.
fn generate_bindings(include_dir: &Path, out_dir: &Path) {
    let header = include_dir.join("mlx/c/mlx.h");
    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_arg(format!("-I{}", include_dir.display()))
        .allowlist_function("_?mlx_.*")
        .allowlist_type("mlx_.*")
        .allowlist_var("MLX_.*")
        .derive_default(true)
        .prepend_enum_name(false)
        .layout_tests(true)
        .generate()
        .unwrap_or_else(|e| {
            fail(&format!(
                "bindgen failed on {} ({e}). bindgen needs libclang: install Debian's \
                 `libclang-dev` or set LIBCLANG_PATH",
                header.display()
            ))
        });
    bindings
        .write_to_file(out_dir.join("bindings.rs"))
        .unwrap_or_else(|e| fail(&format!("writing bindings.rs: {e}")));
}

/// Links libmlxc and makes it (and libmlx) findable by `cargo test`/`cargo run`.
///
/// Cargo adds link-search folders that lie inside the target dir to the loader path of
/// the programs it runs, so the cached libraries are linked into `OUT_DIR/lib`.
fn expose_libraries(mlxc: &provision::MlxC, out_dir: &Path) {
    let lib_dir = out_dir.join("lib");
    let _ = fs::remove_dir_all(&lib_dir);
    fs::create_dir_all(&lib_dir)
        .unwrap_or_else(|e| fail(&format!("creating {}: {e}", lib_dir.display())));
    for entry in fs::read_dir(&mlxc.lib_dir).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let name_str = name.to_string_lossy();
        if name_str.starts_with("libmlxc") {
            link_or_copy(&entry.path(), &lib_dir.join(&name));
        }
    }
    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=dylib=mlxc");
    // For dependents' build scripts (DEP_MLXC_LIB_DIR, DEP_MLXC_MLX_LIB_DIR): the folders to
    // put on an rpath or to bundle next to a shared library.
    println!("cargo:lib_dir={}", mlxc.lib_dir.display());
    println!("cargo:mlx_lib_dir={}", mlxc.mlx_lib_dir.display());
}

fn link_or_copy(from: &Path, to: &Path) {
    #[cfg(unix)]
    let linked = std::os::unix::fs::symlink(from, to).is_ok();
    #[cfg(not(unix))]
    let linked = false;
    if !linked {
        fs::copy(from, to).unwrap_or_else(|e| fail(&format!("copying {}: {e}", from.display())));
    }
}
