//! `cargo xtask setup`: provisioning outside cargo, idempotent.
//!
//! * Debian packages the build needs (checked with `dpkg-query`; installed with apt-get when
//!   we are root, otherwise a clear error naming them).
//! * One Python virtual environment per pinned ONNX Runtime, in the cache directory outside
//!   the repository. A marker file inside each holds the interpreter and the pin list; an
//!   environment whose marker matches is reused as it is, any other is rebuilt.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util::{self, banner};

/// The ONNX Runtime versions the end-to-end suites run against: the newest we support and the
/// oldest PyPI release with plugin execution providers (`register_execution_provider_library`,
/// `get_ep_devices`, `SessionOptions.add_provider_for_devices`).
pub const ORT_VERSIONS: [&str; 2] = [LATEST_ORT, "1.23.0"];

/// The ONNX Runtime the demo uses.
pub const LATEST_ORT: &str = "1.31.1";

/// Pins shared by every environment. numpy 2.3.x works with both ORT wheels (both need
/// numpy >= 1.21.6 and are built against numpy 2); onnx 1.21.0 is the last wheel that ships
/// the backend node tests and stamps models ORT 1.31.1 accepts.
pub const COMMON_PINS: [&str; 3] = ["onnx==1.21.0", "numpy==2.3.5", "pytest==9.2.0"];

/// Pins of the [`LATEST_ORT`] environment: [`COMMON_PINS`] plus scikit-learn and skl2onnx,
/// whose exported models `tests/python/test_ml_sklearn.py` runs (the other environments lack
/// them and skip it). scikit-learn 1.9.1 and skl2onnx 1.20.0 install beside onnx 1.21.0 and
/// numpy 2.3.5 (skl2onnx pins no protobuf).
pub const LATEST_PINS: [&str; 5] = [
    "onnx==1.21.0",
    "numpy==2.3.5",
    "pytest==9.2.0",
    "scikit-learn==1.9.1",
    "skl2onnx==1.20.0",
];

/// The folder-name prefix of the environment holding `pins`. Environments live in a cache
/// that other checkouts share, so one with other pins gets its own folder: a checkout
/// without the extra pins keeps reusing `venv-ort<version>` instead of rebuilding it.
fn venv_prefix(pins: &[&str]) -> &'static str {
    if pins == LATEST_PINS {
        "venv-sklearn-ort"
    } else {
        "venv-ort"
    }
}

/// The newest ONNX Runtime on PyPI, in an environment of its own with the newest onnx: onnx
/// stamps models with an `ai.onnx` opset newer than the planner's newest, which only this
/// ORT loads. `tests/python/test_opset_forward.py` runs there (the opset-forward stage of
/// `cargo xtask test`), and `cargo xtask gen-opset-table` reads onnx's schema history from it.
pub const FORWARD_ORT: &str = "1.32.0";

/// The other pins of the [`FORWARD_ORT`] environment: the newest onnx (it stamps opset 28).
pub const FORWARD_PINS: [&str; 3] = ["onnx==1.23.2", "numpy==2.3.5", "pytest==9.2.0"];

/// The onnxruntime-genai release `tests/python/test_genai.py` runs: 0.18.0 is the first that
/// drives plugin EPs (`register_execution_provider_library`); it needs onnxruntime >= 1.31.0,
/// so its environment holds [`GENAI_ORT`].
pub const GENAI_VERSION: &str = "0.18.0";

/// The ONNX Runtime of the genai environment.
pub const GENAI_ORT: &str = LATEST_ORT;

/// The other pins of the genai environment: onnxruntime-genai and [`COMMON_PINS`] (the test
/// builds its model with onnx and runs under the suite's conftest).
pub const GENAI_PINS: [&str; 4] = [
    "onnxruntime-genai==0.18.0",
    "onnx==1.21.0",
    "numpy==2.3.5",
    "pytest==9.2.0",
];

/// The folder-name prefix of the genai environment (`venv-genai-<genai>-ort<ort>`).
const GENAI_PREFIX: &str = "venv-genai-0.18.0-ort";

/// Debian packages the build needs: cmake (mlx-c), libclang (bindgen) and an optimized BLAS
/// for MLX's CPU backend.
const DEBIAN_PACKAGES: [&str; 3] = ["cmake", "libclang-dev", "libopenblas0-pthread"];

/// onnxruntime 1.31.1 requires Python >= 3.11.
const MIN_PYTHON: (u32, u32) = (3, 11);

/// The marker file inside each environment.
const MARKER: &str = ".ortmlx-pins";

/// Which environments to provision.
#[derive(Clone, Copy, Debug)]
pub enum Scope {
    /// Every pinned ONNX Runtime.
    All,
    /// Only the one with this ONNX Runtime version.
    Only(&'static str),
    /// No Python environment: only what building the crates needs.
    SystemOnly,
}

/// A provisioned Python environment.
#[derive(Clone, Debug)]
pub struct Venv {
    /// The ONNX Runtime version installed in it.
    pub ort_version: &'static str,
    /// The other pins installed in it ([`COMMON_PINS`], [`LATEST_PINS`], [`FORWARD_PINS`] or [`GENAI_PINS`]).
    pub pins: &'static [&'static str],
    /// Its folder.
    pub dir: PathBuf,
}

impl Venv {
    /// Its Python interpreter.
    pub fn python(&self) -> PathBuf {
        venv_python(&self.dir)
    }
}

/// Provisions everything and returns the environments in `scope` (with [`Scope::All`], also
/// the opset-forward and genai environments, which are not returned: see [`forward_venv`] and
/// [`genai_venv`]).
pub fn run(scope: Scope) -> Result<Vec<Venv>> {
    let python = system()?;
    let mut venvs = Vec::new();
    let versions: Vec<&'static str> = match scope {
        Scope::All => ORT_VERSIONS.to_vec(),
        Scope::Only(v) => vec![v],
        Scope::SystemOnly => Vec::new(),
    };
    for ort_version in versions {
        let pins: &'static [&'static str] = if ort_version == LATEST_ORT {
            &LATEST_PINS
        } else {
            &COMMON_PINS
        };
        venvs.push(provision(&python, ort_version, pins, venv_prefix(pins))?);
    }
    let forward = match scope {
        Scope::All => Some(provision(
            &python,
            FORWARD_ORT,
            &FORWARD_PINS,
            "venv-forward-ort",
        )?),
        _ => None,
    };
    // A platform without the genai wheel keeps the other environments: the genai stage of
    // `cargo xtask test` then fails with this error (`--no-genai` skips it).
    let genai = match scope {
        Scope::All => match provision_genai(&python) {
            Ok(venv) => Some(venv),
            Err(err) => {
                eprintln!("warning: {err:#}");
                None
            }
        },
        _ => None,
    };

    banner("setup: done");
    for venv in venvs.iter().chain(&forward).chain(&genai) {
        println!(
            "onnxruntime {:<7} {}",
            venv.ort_version,
            venv.python().display()
        );
    }
    Ok(venvs)
}

/// The opset-forward environment ([`FORWARD_ORT`] with [`FORWARD_PINS`]), provisioned when
/// missing or stale.
pub fn forward_venv() -> Result<Venv> {
    let python = system()?;
    provision(&python, FORWARD_ORT, &FORWARD_PINS, "venv-forward-ort")
}

/// The genai environment ([`GENAI_ORT`] with [`GENAI_PINS`]), provisioned when missing or
/// stale.
pub fn genai_venv() -> Result<Venv> {
    let python = system()?;
    provision_genai(&python)
}

fn provision_genai(python: &Python) -> Result<Venv> {
    provision(python, GENAI_ORT, &GENAI_PINS, GENAI_PREFIX).with_context(|| {
        format!(
            "onnxruntime-genai {GENAI_VERSION} (with onnxruntime {GENAI_ORT}) did not install: PyPI may have no wheel of it for this Python and platform (`pip index versions onnxruntime-genai` lists what it has). tests/python/test_genai.py needs it; `cargo xtask test --no-genai` skips that stage"
        )
    })
}

/// One environment in the cache folder, named `<prefix><ort_version>`.
fn provision(
    python: &Python,
    ort_version: &'static str,
    pins: &'static [&'static str],
    prefix: &str,
) -> Result<Venv> {
    banner(&format!(
        "setup: Python environment for onnxruntime {ort_version}"
    ));
    let venv = Venv {
        ort_version,
        pins,
        dir: util::cache_root()?.join(format!("{prefix}{ort_version}")),
    };
    ensure_venv(python, &venv)?;
    Ok(venv)
}

/// The interpreter and the Debian packages; creates the cache folder.
fn system() -> Result<Python> {
    banner("setup: Python interpreter");
    let python = Python::find()?;

    banner("setup: Debian packages");
    let python_packages = python.debian_packages_needed();
    let mut packages: Vec<&str> = DEBIAN_PACKAGES.to_vec();
    packages.extend(&python_packages);
    ensure_debian_packages(&packages)?;
    // an interpreter (or its venv module) that the packages step just installed
    let python = if python_packages.is_empty() {
        python
    } else {
        Python::find()?
    };
    python.check()?;

    let cache = util::cache_root()?;
    fs::create_dir_all(&cache)
        .with_context(|| format!("creating the cache folder {}", cache.display()))?;
    Ok(python)
}

fn venv_python(dir: &Path) -> PathBuf {
    if cfg!(windows) {
        dir.join("Scripts").join("python.exe")
    } else {
        dir.join("bin").join("python")
    }
}

/// The interpreter the environments are made from: `$ORTMLX_PYTHON` or `python3`.
struct Python {
    program: String,
    /// `Some((version, real path))` when it runs at all.
    identity: Option<(String, String)>,
    has_venv: bool,
}

impl Python {
    fn find() -> Result<Self> {
        let program = util::non_empty_var("ORTMLX_PYTHON").unwrap_or_else(|| "python3".to_string());
        let identity = util::output(
            &program,
            &["-c", "import os, sys; print('%d.%d.%d' % sys.version_info[:3]); print(os.path.realpath(sys.executable))"],
        )
        .and_then(|out| {
            let mut lines = out.lines();
            Some((lines.next()?.to_string(), lines.next()?.to_string()))
        });
        let has_venv = identity.is_some()
            && util::output(&program, &["-c", "import venv, ensurepip"]).is_some();
        match &identity {
            Some((version, path)) => println!(
                "{program}: Python {version} at {path} (venv module: {})",
                if has_venv { "yes" } else { "no" }
            ),
            None => println!("{program}: not found"),
        }
        Ok(Self {
            program,
            identity,
            has_venv,
        })
    }

    /// Debian packages that would give us a working interpreter with `venv`, when it is the
    /// system one (`/usr/bin`) or missing.
    fn debian_packages_needed(&self) -> Vec<&'static str> {
        match &self.identity {
            None if self.program == "python3" => vec!["python3", "python3-venv"],
            Some((_, path)) if !self.has_venv && path.starts_with("/usr/bin/") => {
                vec!["python3-venv"]
            }
            _ => vec![],
        }
    }

    /// Checks that it runs, is new enough and has `venv`.
    fn check(&self) -> Result<()> {
        let Some((version, path)) = &self.identity else {
            bail!(
                "no Python interpreter: `{}` does not run. Install Python >= {}.{} (Debian: python3 python3-venv) or point ORTMLX_PYTHON at one",
                self.program,
                MIN_PYTHON.0,
                MIN_PYTHON.1
            );
        };
        let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if (major, minor) < MIN_PYTHON {
            bail!(
                "{path} is Python {version}; onnxruntime {LATEST_ORT} needs Python >= {}.{}. Point ORTMLX_PYTHON at a newer interpreter",
                MIN_PYTHON.0,
                MIN_PYTHON.1
            );
        }
        if !self.has_venv {
            bail!("{path} lacks the venv/ensurepip modules (Debian: apt-get install python3-venv)");
        }
        Ok(())
    }

    /// Written into each environment's marker: a different interpreter means a new environment.
    fn marker_line(&self) -> String {
        match &self.identity {
            Some((version, path)) => format!("python {version} {path}"),
            None => "python unknown".to_string(),
        }
    }
}

/// Installs the Debian packages that are missing (as root), or says exactly what to install.
fn ensure_debian_packages(packages: &[&str]) -> Result<()> {
    if util::output("dpkg-query", &["--version"]).is_none() {
        println!(
            "no dpkg on this system: not checking Debian packages. Make sure cmake, libclang and an optimized BLAS are installed"
        );
        return Ok(());
    }
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !debian_package_installed(p))
        .collect();
    for package in packages {
        println!(
            "{package:<22} {}",
            if missing.contains(package) {
                "missing"
            } else {
                "installed"
            }
        );
    }
    if missing.is_empty() {
        return Ok(());
    }
    if !util::is_root() {
        bail!(
            "missing Debian packages: {list}. Install them with `sudo apt-get install -y {list}`, or run `cargo xtask setup` as root",
            list = missing.join(" ")
        );
    }
    util::run(
        Command::new("apt-get")
            .arg("update")
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
    .context("apt-get update failed")?;
    util::run(
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
    .with_context(|| format!("installing {}", missing.join(" ")))?;
    let still: Vec<&str> = missing
        .iter()
        .copied()
        .filter(|p| !debian_package_installed(p))
        .collect();
    if !still.is_empty() {
        bail!(
            "apt-get reported success but these packages are still not installed: {}",
            still.join(" ")
        );
    }
    Ok(())
}

fn debian_package_installed(package: &str) -> bool {
    util::output("dpkg-query", &["-W", "-f=${Status}", package])
        .is_some_and(|status| status == "install ok installed")
}

/// What `python` checks inside a freshly installed environment.
const VERIFY_SCRIPT: &str = r#"
import sys
import onnxruntime as ort
want = sys.argv[1]
if ort.__version__ != want:
    sys.exit("expected onnxruntime %s, found %s" % (want, ort.__version__))
missing = [n for n in ("register_execution_provider_library", "get_ep_devices") if not hasattr(ort, n)]
if not hasattr(ort.SessionOptions, "add_provider_for_devices"):
    missing.append("SessionOptions.add_provider_for_devices")
if missing:
    sys.exit("onnxruntime %s lacks the plugin EP API: %s" % (want, ", ".join(missing)))
from importlib.metadata import version
for pin in sys.argv[2:]:
    name, _, pinned = pin.partition("==")
    if version(name) != pinned:
        sys.exit("expected %s %s, found %s" % (name, pinned, version(name)))
    if name == "onnxruntime-genai":
        import onnxruntime_genai
        if not hasattr(onnxruntime_genai, "register_execution_provider_library"):
            sys.exit("onnxruntime-genai %s cannot register plugin EPs" % pinned)
import numpy, onnx, pytest
print("onnxruntime %s, onnx %s, numpy %s, pytest %s" % (ort.__version__, onnx.__version__, numpy.__version__, pytest.__version__))
"#;

fn ensure_venv(python: &Python, venv: &Venv) -> Result<()> {
    let mut pins = vec![format!("onnxruntime=={}", venv.ort_version)];
    pins.extend(venv.pins.iter().map(|p| p.to_string()));
    let marker_text = format!("{}\n{}\n", python.marker_line(), pins.join("\n"));
    let marker = venv.dir.join(MARKER);

    if venv.python().exists() && fs::read_to_string(&marker).is_ok_and(|text| text == marker_text) {
        println!("reusing {} ({})", venv.dir.display(), pins.join(" "));
        return Ok(());
    }
    if venv.dir.exists() {
        println!(
            "{} is stale or incomplete: rebuilding it",
            venv.dir.display()
        );
        fs::remove_dir_all(&venv.dir)
            .with_context(|| format!("removing {}", venv.dir.display()))?;
    }
    util::run(
        Command::new(&python.program)
            .args(["-m", "venv"])
            .arg(&venv.dir),
    )
    .with_context(|| format!("creating the virtual environment {}", venv.dir.display()))?;
    util::run(util::pip(venv.python(), "install").args(&pins))
        .with_context(|| format!("installing {} into {}", pins.join(" "), venv.dir.display()))?;
    util::run(
        Command::new(venv.python())
            .args(["-c", VERIFY_SCRIPT, venv.ort_version])
            .args(venv.pins),
    )
    .with_context(|| format!("checking the environment {}", venv.dir.display()))?;
    fs::write(&marker, marker_text).with_context(|| format!("writing {}", marker.display()))?;
    println!("ready: {}", venv.dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_pins_extend_the_common_ones_in_a_folder_of_their_own() {
        assert_eq!(LATEST_PINS[..COMMON_PINS.len()], COMMON_PINS[..]);
        assert_eq!(venv_prefix(&COMMON_PINS), "venv-ort");
        assert_eq!(venv_prefix(&LATEST_PINS), "venv-sklearn-ort");
    }

    #[test]
    fn the_genai_environment_is_keyed_by_both_pinned_versions() {
        assert_eq!(GENAI_PINS[0], format!("onnxruntime-genai=={GENAI_VERSION}"));
        assert_eq!(GENAI_PINS[1..], COMMON_PINS[..]);
        assert_eq!(GENAI_PREFIX, format!("venv-genai-{GENAI_VERSION}-ort"));
    }
}
