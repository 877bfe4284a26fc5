//! Pinned versions and checksums of everything the build provisions.

/// MLX release; mlx-c 0.7.0 does not compile against later 0.32.x releases.
pub const MLX_VERSION: &str = "0.32.2";
/// mlx-c release.
pub const MLX_C_VERSION: &str = "0.7.0";

/// The registry crate that vendors mlx-c's source (no other registry ships it).
pub const MLX_C_CARRIER_CRATE: &str = "mlx-sys";
/// Version of that crate which vendors mlx-c 0.7.0.
pub const MLX_C_CARRIER_VERSION: &str = "0.7.0";
/// SHA-256 of `mlx-sys-0.7.0.crate`.
pub const MLX_C_CARRIER_SHA256: &str =
    "da965f83ce211b80f9b681d9bbd6fa625fe6bb2e659ba7bc55dd95eea8d3b028";

/// One MLX wheel used as a C++ SDK (headers, libmlx, CMake config).
pub struct Wheel {
    /// Short name of the backend, part of the cache key.
    pub backend: &'static str,
    /// PyPI distribution name.
    pub distribution: &'static str,
    /// File name pip saves.
    pub file: &'static str,
    /// SHA-256 of the wheel file.
    pub sha256: &'static str,
    /// Extra `pip download` arguments selecting the platform.
    pub pip_platform: &'static [&'static str],
}

impl Wheel {
    /// `pip` requirement naming exactly this wheel's release.
    pub fn requirement(&self) -> String {
        format!("{}=={MLX_VERSION}", self.distribution)
    }

    /// Arguments of `python -m <these>` that download this wheel alone into `dest`.
    pub fn pip_download_args(&self, dest: &std::path::Path) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = [
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--dest",
        ]
        .into_iter()
        .map(Into::into)
        .collect();
        args.push(dest.into());
        args.extend(self.pip_platform.iter().map(Into::into));
        args.push(self.requirement().into());
        args
    }
}

/// Linux CPU wheel (links a reference BLAS, replaced by OpenBLAS at provisioning).
pub const CPU_WHEEL: Wheel = Wheel {
    backend: "cpu",
    distribution: "mlx-cpu",
    file: "mlx_cpu-0.32.2-py3-none-manylinux_2_35_x86_64.whl",
    sha256: "fc5d31b90fc4f457b2f9614ed45651a567d22a6a11a03d114a90a4e10bdd8878",
    pip_platform: &["--platform", "manylinux_2_35_x86_64"],
};

/// Linux CUDA 13 wheel (needs the pip CUDA 13 runtime libraries at run time).
pub const CUDA_WHEEL: Wheel = Wheel {
    backend: "cuda13",
    distribution: "mlx-cuda-13",
    file: "mlx_cuda_13-0.32.2-py3-none-manylinux_2_35_x86_64.whl",
    sha256: "335094ccd1c0c6dc3e09c8caba207c8180602bacc0c38ba20c1d81e9456ab394",
    pip_platform: &["--platform", "manylinux_2_35_x86_64"],
};

/// macOS Metal wheel (Accelerate BLAS built in).
pub const METAL_WHEEL: Wheel = Wheel {
    backend: "metal",
    distribution: "mlx-metal",
    file: "mlx_metal-0.32.2-py3-none-macosx_14_0_arm64.whl",
    sha256: "3825fff379dbc107dd3413e564a06caeaa24819910ec49c0439e454c06a1b9b8",
    pip_platform: &["--platform", "macosx_14_0_arm64"],
};
