//! The ONNX Runtime matrix of the CPU wheel (a stage of `cargo xtask test`).
//!
//! For each ONNX Runtime of [`MATRIX_ORT`] (the wheel's floor, the newest 1.24 and 1.25, the
//! newest release): a virtual environment in the cache holding that onnxruntime, numpy and onnx
//! (installed with `--no-index` from the wheelhouse `cargo xtask package` keeps, and reused while
//! its marker matches the interpreter and the pins), the freshly built wheel installed into it,
//! then, in a scrubbed environment:
//!
//! * `packaging/check_wheel.py`: registration, a model on MLX with placement asserted, the
//!   libraries loaded from the wheel;
//! * `packaging/check_snippets.py README.md docs/usage.md`: the README's first Python snippet
//!   verbatim (only the model path substituted) with every node asserted on MLX, then every
//!   Python snippet of both documents in order;
//! * `packaging/check_snippets.py --cpp-recipe docs/usage.md`: the C/C++ recipe (the ```` ```sh ````
//!   block marked `<!-- cpp-recipe: ... -->`) run verbatim in a fresh folder with that
//!   environment first on `PATH`: it fetches the C API header, compiles
//!   `docs/examples/cpp/mlx_ep_example.cpp` against the onnxruntime wheel's library and runs a
//!   model with the wheel's EP library, every node on MLX. The pinned `.deb` it fetches is
//!   provisioned once into the cache ([`crate::ort_headers`]) and handed to it, so later runs
//!   are offline.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::package;
use crate::util::{self, banner};

/// The ONNX Runtime versions of the matrix, exact pins: the wheel's floor (1.23.0 cannot mix a
/// plugin EP with the CPU EP in one graph), the newest 1.24 and 1.25 (by-name selection of a
/// plugin EP works from 1.25 on) and the newest release (`pip index versions onnxruntime`).
pub const MATRIX_ORT: [&str; 4] = ["1.23.1", "1.24.4", "1.25.1", "1.32.0"];

const MARKER: &str = ".ortmlx-pins";

/// One result of the matrix: a stage name and whether it passed.
pub struct Outcome {
    /// What ran, for the summary.
    pub name: String,
    /// Whether it passed.
    pub passed: bool,
}

/// The interpreter's version and real path, so a new interpreter means new environments.
fn interpreter_identity(python: &str) -> String {
    util::output(
        python,
        &[
            "-c",
            "import os, sys; print(sys.version.split()[0], os.path.realpath(sys.executable))",
        ],
    )
    .unwrap_or_else(|| "unknown".to_string())
}

/// The cached environment for `onnxruntime=={ort_version}` (created when missing or stale).
fn ensure_env(ort_version: &str) -> Result<(PathBuf, PathBuf)> {
    let python = package::python_program();
    let (wheelhouse, pins) = package::ensure_wheelhouse_for(Path::new(&python), ort_version)?;
    let dir = util::cache_root()?.join(format!("venv-matrix-ort{ort_version}"));
    let env_python = dir.join("bin").join("python");
    let marker = dir.join(MARKER);
    let marker_text = format!("{}\n{}\n", interpreter_identity(&python), pins.join("\n"));
    if env_python.is_file() && fs::read_to_string(&marker).is_ok_and(|t| t == marker_text) {
        return Ok((env_python, wheelhouse));
    }
    banner(&format!(
        "matrix: environment for onnxruntime {ort_version} (once)"
    ));
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    util::run(Command::new(&python).args(["-m", "venv"]).arg(&dir))?;
    crate::package::pip_install_offline(&env_python, &wheelhouse, &pins)
        .with_context(|| format!("installing {} with --no-index", pins.join(" ")))?;
    fs::write(&marker, marker_text)?;
    Ok((env_python, wheelhouse))
}

/// Replaces whatever build of the package the environment holds with `wheel`, resolving its
/// dependencies against what is installed (no index: `Requires-Dist` must be satisfied).
fn install_wheel(python: &Path, wheelhouse: &Path, wheel: &Path) -> Result<()> {
    util::run(util::pip(python, "uninstall").args([
        "--yes",
        "--quiet",
        "onnxruntime-mlx-ep",
        "onnxruntime-mlx-ep-cuda13",
    ]))?;
    util::run(
        crate::package::pip_install_offline_command(python, wheelhouse)
            .arg("--quiet")
            .arg(wheel),
    )
    .context("installing the wheel with --no-index")
}

/// Runs the matrix for the CPU `wheel`; one outcome per ONNX Runtime.
pub fn run(wheel: &Path) -> Vec<Outcome> {
    let root = util::workspace_root();
    let check = root.join("packaging").join("check_wheel.py");
    let snippets = root.join("packaging").join("check_snippets.py");
    let readme = root.join("README.md");
    let usage = root.join("docs").join("usage.md");
    let mut outcomes = Vec::new();
    for ort_version in MATRIX_ORT {
        banner(&format!(
            "matrix: the wheel with onnxruntime {ort_version}: check_wheel.py, README/usage snippets"
        ));
        let result = (|| -> Result<(bool, PathBuf, PathBuf)> {
            let (python, wheelhouse) = ensure_env(ort_version)?;
            install_wheel(&python, &wheelhouse, wheel)?;
            let home = util::target_dir()
                .join("wheels")
                .join(format!("matrix-ort{ort_version}"));
            let _ = fs::remove_dir_all(&home);
            let checked = package::run_scrubbed(&python, &home, &check, &[])?;
            let docs = [readme.to_string_lossy(), usage.to_string_lossy()];
            let docs: Vec<&str> = docs.iter().map(|d| d.as_ref()).collect();
            let snippets_ok = package::run_scrubbed(&python, &home, &snippets, &docs)?;
            Ok((checked && snippets_ok, python, home))
        })();
        let (passed, env) = match result {
            Ok((passed, python, home)) => (passed, Some((python, home))),
            Err(err) => {
                eprintln!("matrix onnxruntime {ort_version}: {err:#}");
                (false, None)
            }
        };
        outcomes.push(Outcome {
            name: format!(
                "wheel + README/usage snippets on MLX with onnxruntime {ort_version} (cached environment)"
            ),
            passed,
        });
        outcomes.push(cpp_recipe(ort_version, env.as_ref(), &snippets, &usage));
    }
    outcomes
}

/// The C/C++ recipe of `docs/usage.md`, run verbatim in the environment of one matrix entry
/// (`None`: that environment could not be set up).
fn cpp_recipe(
    ort_version: &str,
    env: Option<&(PathBuf, PathBuf)>,
    snippets: &Path,
    usage: &Path,
) -> Outcome {
    let name = format!(
        "docs/usage.md's C/C++ recipe verbatim: header, link to the wheel's libonnxruntime, every node on MLX (onnxruntime {ort_version})"
    );
    banner(&format!("matrix: {name}"));
    let Some((python, home)) = env else {
        return Outcome {
            name: format!("{name}: skipped, no environment"),
            passed: false,
        };
    };
    let result = (|| -> Result<bool> {
        let mut args = vec!["--cpp-recipe".to_string()];
        match crate::ort_headers::ensure(python)? {
            Some(_) => {
                let deb = crate::ort_headers::deb_path()
                    .context("the headers are cached but their .deb is not")?;
                args.push("--seed".into());
                args.push(deb.to_string_lossy().into_owned());
            }
            // The recipe fetches the file itself; without a Debian mirror it fails, and says why.
            None => println!("the pinned .deb is not cached: the recipe fetches it itself"),
        }
        args.push(usage.to_string_lossy().into_owned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        package::run_scrubbed(python, home, snippets, &args)
    })();
    Outcome {
        name,
        passed: result.unwrap_or_else(|err| {
            eprintln!("C/C++ recipe with onnxruntime {ort_version}: {err:#}");
            false
        }),
    }
}
