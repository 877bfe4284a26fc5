//! `cargo xtask bench ...`: benchmarks (results go under `target/bench/`).

use anyhow::{Result, bail};

use std::ffi::OsStr;
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
        Some("small") => small(&args[1..]),
        Some("startup") => startup(&args[1..]),
        Some("bert") => bert(&args[1..]),
        Some(other) => {
            bail!("unknown benchmark `{other}`; known: bert, gemm, llm, overhead, small, startup")
        }
        None => bail!("usage: cargo xtask bench <bert|gemm|llm|overhead|small|startup>"),
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

/// Held-out-style small models (`tests/python/small_graphs.py`: GRU and LSTM steps, a VAD, a
/// 2-layer seq2seq decoder step, a classifier), per run: ORT's CPU EP, ORT with the MLX EP, and
/// the same plan run through the runtime directly. `tests/python/small_bench.py --prepare`
/// writes each model as ORT hands it to an EP (after its basic rewrites) with its inputs and
/// the CPU EP's outputs; `crates/runtime/examples/small_bench.rs` reads, plans and runs them
/// as the EP would (`target/bench/small.json`); `small_bench.py` then times both ORT sessions
/// into that JSON and writes the table to `target/bench/small.md`. Arguments: `--device gpu`,
/// `--budget-ms <ms per measurement>`, `--only <model,...>`, `--explain` (Rust side).
fn small(args: &[String]) -> Result<()> {
    let venvs = setup::run(Scope::Only(LATEST_ORT))?;
    let venv = &venvs[0];
    let lib = crate::build::run()?;
    let bench = target_dir().join("bench");
    let models = bench.join("small-models");
    let out = bench.join("small.json");
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    banner("bench small: the models as ORT hands them to the EP, with inputs and CPU EP outputs");
    let mut prepare = python_script(venv, &lib, "small_bench.py");
    prepare.arg("--prepare").arg("--dir").arg(&models);
    if let Some(only) = value("--only") {
        prepare.args(["--only", only]);
    }
    run_cmd(&mut prepare)?;
    banner("bench small: each model's plan through the runtime directly (no ORT)");
    run_cmd(
        release_example("ortmlx-runtime", "small_bench")
            .arg("--dir")
            .arg(&models)
            .arg("--out")
            .arg(&out)
            .args(args),
    )?;
    banner("bench small: ORT's CPU EP and ORT with the MLX EP");
    let budget = value("--budget-ms").unwrap_or("2000");
    let markdown = bench.join("small.md");
    run_python_bench(
        venv,
        &lib,
        "small_bench.py",
        &out,
        [
            OsStr::new("--budget-ms"),
            OsStr::new(budget),
            OsStr::new("--markdown"),
            markdown.as_os_str(),
        ],
    )
}

/// `tests/python/<script>` on `venv`'s Python against the EP library `lib`, run from the
/// workspace root; the caller adds the script's arguments.
fn python_script(venv: &setup::Venv, lib: &Path, script: &str) -> Command {
    let root = crate::util::workspace_root();
    let mut cmd = Command::new(venv.python());
    cmd.arg(root.join("tests").join("python").join(script))
        .current_dir(&root)
        .env(crate::test::EP_LIBRARY_VAR, lib)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    cmd
}

/// Runs `tests/python/<script>` on `venv`'s Python against the EP library `lib`, the script
/// writing its JSON to `out`; `args` follow `--json <out>`.
fn run_python_bench<S: AsRef<OsStr>>(
    venv: &setup::Venv,
    lib: &Path,
    script: &str,
    out: &Path,
    args: impl IntoIterator<Item = S>,
) -> Result<()> {
    run_cmd(
        python_script(venv, lib, script)
            .arg("--json")
            .arg(out)
            .args(args),
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
