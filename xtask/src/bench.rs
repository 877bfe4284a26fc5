//! `cargo xtask bench ...`: benchmarks (results go under `target/bench/`).

use anyhow::{Result, bail};

use std::path::Path;
use std::process::Command;

use crate::setup::{self, LATEST_ORT, Scope};
use crate::util::{banner, cargo, run as run_cmd, target_dir};

/// Dispatches `cargo xtask bench <name>`.
pub fn run(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("gemm") => gemm(),
        Some("llm") => crate::bench_llm::run(&args[1..]),
        Some("overhead") => overhead(&args[1..]),
        Some("startup") => startup(&args[1..]),
        Some("bert") => bert(&args[1..]),
        Some(other) => {
            bail!("unknown benchmark `{other}`; known: bert, gemm, llm, overhead, startup")
        }
        None => bail!("usage: cargo xtask bench <bert|gemm|llm|overhead|startup>"),
    }
}

/// The EP's own cost per run: the runtime's `Executable` (the EP minus ORT's shell) against
/// the same computation written directly against the `mlx` crate, eager and compiled, in one
/// process (`crates/runtime/examples/overhead_bench.rs`); then the same workloads through a
/// real ORT session with the EP (`tests/python/overhead.py`, merged into the JSON). Extra
/// arguments go to the Rust bench: `--device gpu`, `--budget-ms <ms per variant>`,
/// `--only <workload,...>`, `--explain`.
fn overhead(args: &[String]) -> Result<()> {
    let venvs = setup::run(Scope::Only(LATEST_ORT))?;
    let venv = &venvs[0];
    let lib = crate::build::run()?;
    let out = target_dir().join("bench").join("overhead.json");
    banner(
        "bench overhead: the EP's runtime vs the same MLX calls written directly (1 node, encoder layer, 6-layer encoder, Llama decode step)",
    );
    run_cmd(
        release_example("ortmlx-runtime", "overhead_bench")
            .arg("--out")
            .arg(&out)
            .args(args),
    )?;
    let device = args
        .iter()
        .position(|a| a == "--device")
        .and_then(|i| args.get(i + 1))
        .map_or("cpu", String::as_str);
    let budget = args
        .iter()
        .position(|a| a == "--budget-ms")
        .and_then(|i| args.get(i + 1))
        .map_or("2000", String::as_str);
    run_python_bench(
        venv,
        &lib,
        "overhead.py",
        &out,
        ["--device", device, "--budget-ms", budget],
    )
}

/// Runs `tests/python/<script>` on `venv`'s Python against the EP library `lib`, the script
/// writing its JSON to `out`; `args` follow `--json <out>`.
fn run_python_bench<S: AsRef<std::ffi::OsStr>>(
    venv: &setup::Venv,
    lib: &Path,
    script: &str,
    out: &Path,
    args: impl IntoIterator<Item = S>,
) -> Result<()> {
    let root = crate::util::workspace_root();
    run_cmd(
        Command::new(venv.python())
            .arg(root.join("tests").join("python").join(script))
            .arg("--json")
            .arg(out)
            .args(args)
            .current_dir(&root)
            .env(crate::test::EP_LIBRARY_VAR, lib)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    )
}

/// Time from session creation to first output with the source model and with its EPContext
/// model (`tests/python/startup.py`), fresh processes per measurement, on the newest ORT;
/// checks that loading the EPContext model lowers nothing. Extra arguments go to the script:
/// `--repeats N`, `--only minilm-6,resnet,llama-tiny,llama-larger`.
fn startup(args: &[String]) -> Result<()> {
    let venvs = setup::run(Scope::Only(LATEST_ORT))?;
    let venv = &venvs[0];
    let lib = crate::build::run()?;
    let out = target_dir().join("bench").join("startup.json");
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    banner("bench startup: session creation to first output, source model vs its EPContext model");
    run_python_bench(venv, &lib, "startup.py", &out, args)
}

/// A BERT fused by ORT's transformer optimizer (EmbedLayerNormalization, Attention,
/// SkipLayerNormalization, BiasGelu) on ORT's CPU EP and on the MLX EP, outputs checked to
/// agree (`tests/python/bench_bert.py`); extra arguments go to the script (`--shapes`,
/// `--layers`, `--hidden`, `--heads`, `--budget-ms`, `--device`).
fn bert(args: &[String]) -> Result<()> {
    let venvs = setup::run(Scope::Only(LATEST_ORT))?;
    let venv = &venvs[0];
    let lib = crate::build::run()?;
    let out = target_dir().join("bench").join("bert.json");
    banner("bench bert: an ORT-optimized BERT, CPU EP vs MLX EP");
    run_python_bench(
        venv,
        &lib,
        "bench_bert.py",
        &out,
        args.iter().filter(|a| *a != "--"),
    )
}

/// A 1024^3 float32 matmul through the `mlx` crate against the system BLAS, in one process.
fn gemm() -> Result<()> {
    setup::run(Scope::SystemOnly)?;
    let out = target_dir().join("bench").join("gemm.json");
    banner("bench gemm: MLX matmul vs the system BLAS (1024x1024x1024 float32)");
    run_cmd(release_example("ortmlx", "gemm_bench").arg(&out))
}

/// `cargo run --release --quiet -p <package> --example <example> --`, the example's own
/// arguments to follow.
fn release_example(package: &str, example: &str) -> Command {
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--release",
        "--quiet",
        "-p",
        package,
        "--example",
        example,
        "--",
    ]);
    cmd
}
