//! `cargo xtask gpu-check`: stages what the NVIDIA device machine needs to run the EP on MLX's
//! CUDA backend, and says how to run it there.
//!
//! The plugin and libmlxc are built here (libmlxc built against the CPU wheel links only symbols
//! that the CUDA wheel's libmlx also exports); the CUDA wheel's libmlx (pinned, verified) is
//! stripped, xz-compressed and split in two parts, because one device call carries at most
//! 64 MiB. Everything lands in `.gpu/` (git-ignored). Two device calls on one warm machine then
//! run `tests/gpu/device_stage.sh` and `tests/gpu/device_run.sh`.

use std::fs;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::mlx_wheel::{self, pins};
use crate::util::{banner, cache_root, cargo, run, workspace_root};

/// Largest part carried by one device call (the limit is 64 MiB with the tree itself).
const PART_BYTES: u64 = 40 * 1024 * 1024;

/// Stages `.gpu/wheel/` for `tests/gpu/device_wheel.sh`: the pinned `mlx-cuda-13` wheel split
/// in two parts and the CUDA wheel of the EP (`cargo xtask package --cuda`).
pub fn stage_wheel() -> Result<()> {
    let root = workspace_root();
    let cache = cache_root()?;
    banner("gpu-check --wheel: the pinned mlx-cuda-13 wheel and the EP's CUDA wheel");
    let mlx = mlx_wheel::cuda_wheel(&cache)?;
    let lib = crate::build::run()?;
    let ours = crate::package::build_wheel(&lib, crate::package::Flavor::Cuda13)?;
    let dir = root.join(".gpu/wheel");
    fs::remove_dir_all(&dir).ok();
    fs::create_dir_all(&dir)?;
    let half = fs::metadata(&mlx)?.len().div_ceil(2);
    split(&mlx, half, &dir.join("mlx-wheel.part-"))?;
    let name = ours.file_name().context("wheel without a file name")?;
    fs::copy(&ours, dir.join(name))?;
    exclude_gpu_folder(&root)?;
    println!(
        "\nRun on the device machine, two calls back to back on one warm machine:\n\
         1. carry [\".gpu/wheel/mlx-wheel.part-aa\"]: mkdir -p /tmp/ortmlx-stage && cp .gpu/wheel/mlx-wheel.part-aa /tmp/ortmlx-stage/\n\
         2. carry [\".gpu/wheel/mlx-wheel.part-ab\", \".gpu/wheel/{}\"]: bash tests/gpu/device_wheel.sh [pytest args]",
        name.to_string_lossy()
    );
    Ok(())
}

/// Lists `.gpu/` in the repository's exclude file, so staged files never reach a commit.
fn exclude_gpu_folder(root: &Path) -> Result<()> {
    let git_path = Command::new("git")
        .args(["rev-parse", "--git-path", "info/exclude"])
        .current_dir(root)
        .output()
        .context("running git")?;
    let exclude = root.join(String::from_utf8_lossy(&git_path.stdout).trim());
    let listed = fs::read_to_string(&exclude).unwrap_or_default();
    if !listed.lines().any(|l| l.trim() == "/.gpu/") {
        fs::write(&exclude, format!("{listed}/.gpu/\n"))?;
    }
    Ok(())
}

/// Stages `.gpu/`: the split CUDA libmlx and a bundle with the plugin, libmlxc and the wheel's
/// bundled BLAS.
pub fn run_check() -> Result<()> {
    let root = workspace_root();
    let cache = cache_root()?;
    banner("gpu-check: the pinned CUDA build of MLX");
    let unpacked = mlx_wheel::unpacked_cuda_wheel(&cache)?;
    let compressed = unpacked.join("libmlx.so.xz");
    if !compressed.is_file() {
        let lib = unpacked.join("mlx/lib/libmlx.so");
        run(Command::new("strip").arg("--strip-unneeded").arg(&lib))?;
        println!("compressing libmlx.so (a few minutes, once)");
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "xz -T0 -6 -c '{}' > '{}.tmp'",
                lib.display(),
                compressed.display()
            ))
            .status()?;
        if !status.success() {
            bail!("xz failed");
        }
        fs::rename(compressed.with_extension("xz.tmp"), &compressed)?;
    }

    banner("gpu-check: build the plugin and the overhead and small-model benches (release)");
    run(cargo().args(["build", "--release", "-p", "ortmlx-ep"]))?;
    run(cargo().args([
        "build",
        "--release",
        "-p",
        "ortmlx-runtime",
        "--example",
        "overhead_bench",
        "--example",
        "small_bench",
    ]))?;
    let target = crate::util::target_dir().join("release");

    banner("gpu-check: stage .gpu/");
    let gpu = root.join(".gpu");
    fs::remove_dir_all(&gpu).ok();
    fs::create_dir_all(&gpu)?;
    split(&compressed, PART_BYTES, &gpu.join("libmlx.so.xz.part-"))?;
    let bundle = gpu.join("bundle");
    let lib = bundle.join("ortmlx_gpu/lib");
    fs::create_dir_all(&lib)?;
    copy_stripped(
        &target.join("libonnxruntime_mlx_ep.so"),
        &lib.join("libonnxruntime_mlx_ep.so"),
    )?;
    // `bench overhead --device gpu` and `bench small --device gpu` run these binaries there
    // (tests/gpu/device_run.sh perf and small).
    let bin = bundle.join("ortmlx_gpu/bin");
    fs::create_dir_all(&bin)?;
    for example in ["overhead_bench", "small_bench"] {
        copy_stripped(&target.join("examples").join(example), &bin.join(example))?;
    }
    let mlxc = cache.join(format!(
        "mlx-{}-mlxc-{}-cpu/mlxc/lib/libmlxc.so",
        pins::MLX_VERSION,
        pins::MLX_C_VERSION
    ));
    fs::copy(&mlxc, lib.join("libmlxc.so"))
        .with_context(|| format!("copying {}", mlxc.display()))?;
    run(Command::new("cp")
        .arg("-r")
        .arg(unpacked.join("mlx_cuda_13.libs"))
        .arg(&bundle))?;
    // MLX compiles kernels with NVRTC at run time; it looks for CCCL (and CUTLASS/CuTe) in
    // `<libmlx folder>/../include`, where the wheel keeps them.
    let include = bundle.join("ortmlx_gpu/include");
    fs::create_dir_all(&include)?;
    for dir in ["cccl", "cute", "cutlass"] {
        run(Command::new("cp")
            .arg("-r")
            .arg(unpacked.join("mlx/include").join(dir))
            .arg(&include))?;
    }
    // mlx-c's headers, for the exit-abort reproducer (tests/gpu/mlx_exit_abort.c).
    run(Command::new("cp")
        .arg("-r")
        .arg(
            mlxc.parent()
                .and_then(Path::parent)
                .map(|p| p.join("include"))
                .unwrap_or_default()
                .join("mlx"),
        )
        .arg(&include))?;
    run(Command::new("tar")
        .arg("-cJf")
        .arg(gpu.join("bundle.tar.xz"))
        .arg("-C")
        .arg(&bundle)
        .arg("."))?;
    fs::remove_dir_all(&bundle)?;
    exclude_gpu_folder(&root)?;
    for entry in fs::read_dir(&gpu)? {
        let entry = entry?;
        println!(
            "{:>12}  {}",
            entry.metadata()?.len(),
            entry.path().display()
        );
    }
    println!(
        "\nRun on the device machine, two calls back to back on one warm machine:\n\
         1. carry [\".gpu/libmlx.so.xz.part-aa\"]: bash tests/gpu/device_stage.sh\n\
         2. carry [\".gpu/libmlx.so.xz.part-ab\", \".gpu/bundle.tar.xz\"]: bash tests/gpu/device_run.sh core\n\
         3. (same machine) bash tests/gpu/device_run.sh reliability, bash tests/gpu/device_run.sh bench,\n\
            bash tests/gpu/device_run.sh perf (overhead bench and GQA decoders on the GPU),\n\
            bash tests/gpu/device_run.sh small (bench small --device gpu: small models, EP vs plan vs ORT's CPU EP)\n\
         Results (pytest logs, EP log, gpu_bench.json) come back under $OUT; docs/benchmarks.md holds the table."
    );
    Ok(())
}

/// Copies a binary and strips its debug information.
fn copy_stripped(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    run(Command::new("strip").arg("--strip-debug").arg(to))
}

/// Splits `file` into parts of `bytes` bytes named `prefix` + `aa`, `ab`, ...
fn split(file: &Path, bytes: u64, prefix: &Path) -> Result<()> {
    let status = Command::new("split")
        .args(["-b", &bytes.to_string()])
        .arg(file)
        .arg(prefix)
        .status()?;
    if !status.success() {
        bail!("split failed");
    }
    Ok(())
}
