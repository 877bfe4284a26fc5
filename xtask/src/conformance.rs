//! `cargo xtask conformance`: ONNX's backend node suite (the cases the pinned `onnx` wheel
//! ships) through the newest pinned ONNX Runtime with the MLX EP, each case in an isolated
//! worker process. The driver is `tests/conformance/run.py`; this command provisions the
//! Python environment, builds the EP and runs it. It writes `<target>/conformance/report.json`
//! and a markdown table, and with `--check` compares every case with
//! `tests/conformance/manifest.tsv`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail};

use crate::build;
use crate::setup::{self, LATEST_ORT, Scope, Venv};
use crate::util::{self, banner};

/// Options of `cargo xtask conformance`.
#[derive(Debug, Default)]
pub struct Options {
    filter: Option<String>,
    no_fallback: bool,
    check: bool,
    update_manifest: bool,
    float64: bool,
    jobs: Option<String>,
    timeout: Option<String>,
    verbose: bool,
}

impl Options {
    /// Parses `[--filter <substring>] [--no-fallback] [--check] [--update-manifest]
    /// [--float64] [--jobs <n>] [--timeout <seconds>] [--verbose]`.
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut options = Options::default();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| match args.next() {
                Some(v) => Ok(v.clone()),
                None => bail!("{name} needs a value"),
            };
            match arg.as_str() {
                "--filter" => options.filter = Some(value("--filter")?),
                "--jobs" => options.jobs = Some(value("--jobs")?),
                "--timeout" => options.timeout = Some(value("--timeout")?),
                "--no-fallback" => options.no_fallback = true,
                "--check" => options.check = true,
                "--update-manifest" => options.update_manifest = true,
                "--float64" => options.float64 = true,
                "--verbose" => options.verbose = true,
                other => bail!("unknown option `{other}`; see `cargo xtask help`"),
            }
        }
        if options.check && options.update_manifest {
            bail!("--check and --update-manifest exclude each other");
        }
        if options.float64 && (options.check || options.update_manifest) {
            bail!(
                "--float64 is a sweep of its own: it can't be combined with --check or --update-manifest"
            );
        }
        if options.no_fallback && (options.check || options.update_manifest) {
            bail!(
                "the manifest records runs with CPU fallback: --no-fallback can't be combined with --check or --update-manifest"
            );
        }
        Ok(options)
    }
}

/// The driver script.
fn driver() -> PathBuf {
    util::workspace_root()
        .join("tests")
        .join("conformance")
        .join("run.py")
}

/// Where the report goes: `<target>/conformance`.
pub fn report_dir() -> PathBuf {
    util::target_dir().join("conformance")
}

/// Runs the command.
pub fn run(options: Options) -> Result<()> {
    let venv = latest_venv()?;
    let lib = build::run()?;
    banner(&format!(
        "conformance: ONNX backend node suite through onnxruntime {LATEST_ORT} with the MLX EP"
    ));
    let mut cmd = command(&venv, &lib);
    if let Some(filter) = &options.filter {
        cmd.args(["--filter", filter]);
    }
    if let Some(jobs) = &options.jobs {
        cmd.args(["--jobs", jobs]);
    }
    if let Some(timeout) = &options.timeout {
        cmd.args(["--timeout", timeout]);
    }
    for (on, flag) in [
        (options.no_fallback, "--no-fallback"),
        (options.check, "--check"),
        (options.update_manifest, "--update-manifest"),
        (options.float64, "--float64"),
        (options.verbose, "--verbose-failures"),
    ] {
        if on {
            cmd.arg(flag);
        }
    }
    if util::status(&mut cmd)? {
        Ok(())
    } else if options.check {
        bail!("the conformance results differ from tests/conformance/manifest.tsv")
    } else {
        bail!("the conformance run failed")
    }
}

/// The `cargo xtask test` stage: the whole suite, checked against the manifest. Tells whether
/// it passed.
pub fn check_stage(venv: &Venv, lib: &Path) -> Result<bool> {
    let mut cmd = command(venv, lib);
    cmd.arg("--check");
    util::status(&mut cmd)
}

fn command(venv: &Venv, lib: &Path) -> Command {
    let mut cmd = Command::new(venv.python());
    cmd.arg(driver())
        .arg("--library")
        .arg(lib)
        .arg("--out")
        .arg(report_dir())
        .current_dir(util::workspace_root())
        .env("PYTHONDONTWRITEBYTECODE", "1");
    cmd
}

fn latest_venv() -> Result<Venv> {
    let venvs = setup::run(Scope::Only(LATEST_ORT))?;
    match venvs.into_iter().find(|v| v.ort_version == LATEST_ORT) {
        Some(venv) => Ok(venv),
        None => bail!("setup did not provide the onnxruntime {LATEST_ORT} environment"),
    }
}
