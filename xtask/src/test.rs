//! `cargo xtask test`: every test. Setup + build, `cargo test --workspace`, then the pytest
//! suites in `tests/python` against every pinned ONNX Runtime. Every stage runs even when an
//! earlier one failed (except what needs the library); the summary names each failure.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Result, bail};

use crate::build;
use crate::setup::{self, ORT_VERSIONS, Scope, Venv};
use crate::util::{self, banner};

/// The variable the Python tests read the EP library's path from.
pub const EP_LIBRARY_VAR: &str = "ORTMLX_EP_LIBRARY";

/// Options of `cargo xtask test`.
#[derive(Debug, Default)]
pub struct Options {
    no_rust: bool,
    no_python: bool,
    no_package: bool,
    no_conformance: bool,
    no_forward: bool,
    no_genai: bool,
    ort: Vec<&'static str>,
    pytest_args: Vec<String>,
}

impl Options {
    /// Parses `[--no-rust] [--no-python] [--no-package] [--no-conformance] [--no-forward]
    /// [--no-genai] [--ort <version>]... [-- <pytest args>]`.
    pub fn parse(args: &[String]) -> Result<Self> {
        let mut options = Options::default();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--no-rust" => options.no_rust = true,
                "--no-python" => options.no_python = true,
                "--no-package" => options.no_package = true,
                "--no-conformance" => options.no_conformance = true,
                "--no-forward" => options.no_forward = true,
                "--no-genai" => options.no_genai = true,
                "--ort" => {
                    let Some(version) = args.next() else {
                        bail!("--ort needs a version")
                    };
                    let Some(known) = ORT_VERSIONS.iter().find(|v| **v == version.as_str()) else {
                        bail!(
                            "--ort {version}: not a pinned onnxruntime (pinned: {})",
                            ORT_VERSIONS.join(", ")
                        )
                    };
                    options.ort.push(known);
                }
                "--" => {
                    options.pytest_args = args.cloned().collect();
                    break;
                }
                other => bail!("unknown option `{other}`; see `cargo xtask help`"),
            }
        }
        Ok(options)
    }
}

struct Stage {
    name: String,
    passed: bool,
}

impl Stage {
    fn new(name: impl Into<String>, passed: bool) -> Stage {
        Stage {
            name: name.into(),
            passed,
        }
    }
}

/// Runs the tests.
pub fn run(options: Options) -> Result<()> {
    let scope = match options.ort.as_slice() {
        [only] => Scope::Only(only),
        _ => Scope::All,
    };
    let venvs: Vec<Venv> = if options.no_python {
        Vec::new()
    } else {
        setup::run(scope)?
            .into_iter()
            .filter(|v| options.ort.is_empty() || options.ort.contains(&v.ort_version))
            .collect()
    };

    let mut stages = Vec::new();
    let lib = if options.no_python {
        None
    } else {
        match build::run() {
            Ok(lib) => Some(lib),
            Err(err) => {
                eprintln!("build failed: {err:#}");
                stages.push(Stage::new("cargo build --release -p ortmlx-ep", false));
                None
            }
        }
    };

    if !options.no_rust {
        banner("test: cargo test --workspace (unit tests of every crate)");
        let passed = util::status(util::cargo().args(["test", "--workspace"]))?;
        stages.push(Stage::new("cargo test --workspace", passed));
        stages.push(Stage::new(
            "docs/operators.md is current (cargo xtask docs)",
            crate::docs::check_operators()?,
        ));
        stages.push(Stage::new(
            "docs/usage.md's environment table is current (cargo xtask docs)",
            crate::docs::check_env_table()?,
        ));
        stages.push(Stage::new(
            "cargo doc --workspace --no-deps without warnings",
            crate::docs::rustdoc()?,
        ));
        stages.push(Stage::new(
            "cargo package of the library crates",
            crate::package::cargo_package()?,
        ));
    }

    if let Some(venv) = venvs.first()
        && let Err(err) = crate::ort_headers::ensure(&venv.python())
    {
        println!("ONNX Runtime headers: {err:#}; the C++ example will not be compiled");
    }
    for venv in &venvs {
        let name = format!("pytest tests/python (onnxruntime {})", venv.ort_version);
        let passed = match &lib {
            Some(lib) => {
                banner(&format!("test: {name}, {EP_LIBRARY_VAR}={}", lib.display()));
                pytest(venv, lib, &[], &options.pytest_args)?
            }
            None => {
                banner(&format!(
                    "test: {name}: skipped, the EP library did not build"
                ));
                false
            }
        };
        stages.push(Stage { name, passed });
    }

    if !options.no_python && !options.no_forward {
        stages.extend(forward_stages(lib.as_deref(), &options.pytest_args)?);
    }

    if !options.no_python && !options.no_genai {
        stages.push(genai_stage(lib.as_deref(), &options.pytest_args)?);
    }

    if !options.no_conformance
        && let Some(venv) = venvs.iter().find(|v| v.ort_version == setup::LATEST_ORT)
    {
        let name = format!(
            "conformance: ONNX backend node suite as tests/conformance/manifest.tsv records (onnxruntime {})",
            venv.ort_version
        );
        let passed = match &lib {
            Some(lib) => {
                banner(&format!("test: {name}"));
                crate::conformance::check_stage(venv, lib)?
            }
            None => false,
        };
        stages.push(Stage { name, passed });
    }

    if !options.no_package && !venvs.is_empty() {
        stages.extend(package_stages(lib.as_deref(), &venvs));
    }

    banner("test: summary");
    for stage in &stages {
        println!(
            "{}  {}",
            if stage.passed { "PASS" } else { "FAIL" },
            stage.name
        );
    }
    let failed: Vec<&str> = stages
        .iter()
        .filter(|s| !s.passed)
        .map(|s| s.name.as_str())
        .collect();
    println!(
        "stages: {} passed, {} failed",
        stages.len() - failed.len(),
        failed.len()
    );
    if failed.is_empty() {
        Ok(())
    } else {
        bail!(
            "{} of {} stages failed: {}",
            failed.len(),
            stages.len(),
            failed.join("; ")
        )
    }
}

/// The files of `tests/python` the opset-forward stage runs (the rest of the suite needs the
/// pinned onnx 1.21.0 and its backend test data); the profiler and EPContext suites run there
/// too, on the newest ONNX Runtime's plugin hooks.
const FORWARD_TESTS: [&str; 4] = [
    "test_opset_forward.py",
    "test_placement_summary.py",
    "test_profiling.py",
    "test_epcontext.py",
];

/// The opset-forward environment's stages: the schema table matches its onnx, and the
/// [`FORWARD_TESTS`] pass on its ONNX Runtime with models of its onnx's default opset.
fn forward_stages(lib: Option<&Path>, pytest_args: &[String]) -> Result<Vec<Stage>> {
    let venv = setup::forward_venv()?;
    let mut stages = vec![Stage {
        name: "crates/plan/src/schema_versions.rs is current (cargo xtask gen-opset-table)".into(),
        passed: crate::opset_table::check()?,
    }];
    let name = format!(
        "pytest {} (opset-forward: onnxruntime {}, {})",
        FORWARD_TESTS.join(" "),
        venv.ort_version,
        venv.pins[0]
    );
    let passed = match lib {
        Some(lib) => {
            banner(&format!("test: {name}"));
            let dir = util::workspace_root().join("tests").join("python");
            let files: Vec<_> = FORWARD_TESTS.iter().map(|f| dir.join(f)).collect();
            pytest(&venv, lib, &files, pytest_args)?
        }
        None => false,
    };
    stages.push(Stage { name, passed });
    Ok(stages)
}

/// The file of `tests/python` the genai stage runs (skipped in the other environments, which
/// lack onnxruntime-genai).
const GENAI_TEST: &str = "test_genai.py";

/// `tests/python/test_genai.py` in the genai environment ([`setup::genai_venv`]):
/// onnxruntime-genai's decode loop with the EP registered.
/// A missing environment (PyPI without the pinned genai for this platform) fails the stage with
/// the reason.
fn genai_stage(lib: Option<&Path>, pytest_args: &[String]) -> Result<Stage> {
    let name = format!(
        "pytest {GENAI_TEST} (onnxruntime-genai {}, onnxruntime {})",
        setup::GENAI_VERSION,
        setup::GENAI_ORT
    );
    let venv = match setup::genai_venv() {
        Ok(venv) => venv,
        Err(err) => {
            eprintln!("{name}: {err:#}");
            return Ok(Stage {
                name,
                passed: false,
            });
        }
    };
    let passed = match lib {
        Some(lib) => {
            banner(&format!("test: {name}"));
            let file = util::workspace_root()
                .join("tests")
                .join("python")
                .join(GENAI_TEST);
            pytest(&venv, lib, &[file], pytest_args)?
        }
        None => false,
    };
    Ok(Stage { name, passed })
}

/// pytest over `files` (default: all of `tests/python`) in `venv`; a selection (`-k`) that
/// leaves nothing to run in these files passes.
fn pytest(venv: &Venv, lib: &Path, files: &[std::path::PathBuf], extra: &[String]) -> Result<bool> {
    let root = util::workspace_root();
    let mut cmd = Command::new(venv.python());
    cmd.args(["-m", "pytest", "-p", "no:cacheprovider", "-ra"]);
    if files.is_empty() {
        cmd.arg(root.join("tests").join("python"));
    } else {
        cmd.args(files);
    }
    let status = util::exit_code(
        cmd.args(extra)
            .current_dir(&root)
            .env(EP_LIBRARY_VAR, lib)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .envs(
                crate::ort_headers::include_dir().map(|dir| (crate::ort_headers::INCLUDE_VAR, dir)),
            ),
    )?;
    // pytest's exit code 5: no test collected.
    Ok(status == Some(0) || (!files.is_empty() && status == Some(5)))
}

/// The wheels: the CPU wheel built once, checked statically and installed into a fresh
/// environment under the newest pinned ONNX Runtime, then the ONNX Runtime matrix
/// ([`crate::matrix`]); the CUDA wheel built and checked statically (metadata, run paths,
/// libmlx resolved from the `mlx-cuda-13` wheel unpacked next to it; no GPU needed).
fn package_stages(lib: Option<&Path>, venvs: &[Venv]) -> Vec<Stage> {
    use crate::package::{self, Flavor};

    let mut stages = Vec::new();
    let started = Instant::now();
    let report = |what: &str, err: anyhow::Error| {
        eprintln!("{what} failed: {err:#}");
        false
    };
    let build = |flavor: Flavor| match lib.map(|lib| package::build_wheel(lib, flavor)) {
        Some(Ok(wheel)) => Some(wheel),
        Some(Err(err)) => {
            report("building the wheel", err);
            None
        }
        None => None,
    };
    // The wheel needs onnxruntime >= 1.23.1: 1.23.0 is covered by pytest, not by the wheel.
    let latest = venvs
        .iter()
        .find(|v| v.ort_version == setup::LATEST_ORT)
        .unwrap_or(&venvs[0]);
    let wheel = build(Flavor::Cpu);
    stages.push(Stage::new(
        "cargo xtask package: the CPU wheel builds, relocatable",
        wheel.is_some(),
    ));
    stages.push(Stage {
        name: "CPU wheel: metadata, run paths, libraries resolved (check_wheel.py --static)".into(),
        passed: wheel.as_ref().is_some_and(|w| {
            package::static_check(w, Flavor::Cpu, latest)
                .unwrap_or_else(|e| report("the static check", e))
        }),
    });
    for venv in venvs.iter().filter(|v| v.ort_version != "1.23.0") {
        let passed = wheel.as_ref().is_some_and(|w| {
            package::check_wheel(w, venv).unwrap_or_else(|e| report("checking the wheel", e))
        });
        stages.push(Stage {
            name: format!(
                "wheel installed in a fresh environment runs on MLX (onnxruntime {})",
                venv.ort_version
            ),
            passed,
        });
    }
    let cpu_secs = started.elapsed().as_secs_f64();

    let started = Instant::now();
    let cuda = build(Flavor::Cuda13);
    let passed = cuda.as_ref().is_some_and(|w| {
        package::static_check(w, Flavor::Cuda13, latest)
            .unwrap_or_else(|e| report("the static check", e))
    });
    stages.push(Stage {
        name: format!(
            "cargo xtask package --cuda: the CUDA 13 wheel builds; metadata, run paths, libmlx from mlx-cuda-13 resolved ({:.0} s)",
            started.elapsed().as_secs_f64()
        ),
        passed,
    });

    let started = Instant::now();
    match &wheel {
        Some(wheel) => {
            for outcome in crate::matrix::run(wheel) {
                stages.push(Stage {
                    name: outcome.name,
                    passed: outcome.passed,
                });
            }
        }
        None => stages.push(Stage {
            name: "ONNX Runtime matrix of the wheel: skipped, the wheel did not build".into(),
            passed: false,
        }),
    }
    println!(
        "package stages: CPU wheel + checks {cpu_secs:.0} s, ONNX Runtime matrix {:.0} s",
        started.elapsed().as_secs_f64()
    );
    stages
}
