//! `cargo xtask bench ...`: benchmarks (results go under `target/bench/`).

use anyhow::{Result, bail};

use crate::setup::{self, Scope};
use crate::util::{banner, cargo, run as run_cmd, target_dir};

/// Dispatches `cargo xtask bench <name>`.
pub fn run(args: &[String]) -> Result<()> {
    match args.first().map(String::as_str) {
        Some("gemm") => gemm(),
        Some("llm") => crate::bench_llm::run(&args[1..]),
        Some(other) => bail!("unknown benchmark `{other}`; known: gemm, llm"),
        None => bail!("usage: cargo xtask bench <gemm|llm>"),
    }
}

/// A 1024^3 float32 matmul through the `mlx` crate against the system BLAS, in one process.
fn gemm() -> Result<()> {
    setup::run(Scope::SystemOnly)?;
    let out = target_dir().join("bench").join("gemm.json");
    banner("bench gemm: MLX matmul vs the system BLAS (1024x1024x1024 float32)");
    run_cmd(
        cargo()
            .args([
                "run",
                "--release",
                "--quiet",
                "-p",
                "ortmlx",
                "--example",
                "gemm_bench",
                "--",
            ])
            .arg(&out),
    )
}
