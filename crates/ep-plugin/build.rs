//! Puts the MLX libraries on the cdylib's run path, so ORT can load it as built: the
//! library's own folder first (for a bundle that ships libmlxc/libmlx next to it), then the
//! folders `mlx-sys` provisioned them in (`DEP_MLXC_LIB_DIR`, `DEP_MLXC_MLX_LIB_DIR`).

fn main() {
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
