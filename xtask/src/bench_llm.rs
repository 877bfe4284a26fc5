//! `cargo xtask bench llm`: Llama-style decoders with random weights (built by
//! `tests/python/llm.py`: RMSNorm, rotary GQA with a KV cache, SiLU MLP; a tiny and a larger
//! one, float32 and 4-bit MatMulNBits), a 128-token prefill and 64 greedy decode steps on ORT's
//! CPU EP and on the MLX EP in one process. Checks that the greedy tokens agree and the logits
//! are within tolerance, prints prefill and decode tokens/s and the ratios, and writes
//! `target/bench/llm.json`. The last line is `llm: decode mlx/cpu=<ratio>` (larger float32
//! model). The EP traces to `target/bench/llm-trace.json` (`ORTMLX_TRACE`, unless set), from
//! which each model's line adds the EP's run counters: paths taken (compiled decode / prefill /
//! general, eager) and host synchronisations and reads per run. Each model is also decoded
//! through IOBinding with its KV cache bound to the EP's memory, which prints
//! `iobinding: kv_host_bytes_per_step=<n> decode tok/s=<x>` (`-- --no-iobinding` skips it).

use std::process::Command;

use anyhow::{Context, Result};

use crate::setup::{self, LATEST_ORT, Scope};
use crate::util::{self, banner, target_dir};
use crate::{build, test::EP_LIBRARY_VAR};

/// Runs the benchmark; extra arguments go to `llm.py` (`--models tiny,larger`, `--steps 16`,
/// `--repeats 3`, ...).
pub fn run(args: &[String]) -> Result<()> {
    let venvs = setup::run(Scope::Only(LATEST_ORT))?;
    let venv = &venvs[0];
    let lib = build::run()?;
    let out = target_dir().join("bench").join("llm.json");
    banner(&format!(
        "bench llm: Llama-style decoders, 128-token prefill + 64 greedy steps, CPU EP vs MLX EP (onnxruntime {LATEST_ORT})"
    ));
    let root = util::workspace_root();
    // The EP writes its trace when a session is released: the folder must exist by then.
    std::fs::create_dir_all(target_dir().join("bench")).context("creating target/bench")?;
    let mut cmd = Command::new(venv.python());
    if std::env::var_os("ORTMLX_TRACE").is_none() {
        cmd.env(
            "ORTMLX_TRACE",
            target_dir().join("bench").join("llm-trace.json"),
        );
    }
    util::run(
        cmd.arg(root.join("tests").join("python").join("llm.py"))
            .arg("--bench")
            .arg("--out")
            .arg(&out)
            .arg("--iobinding")
            .args(args)
            .current_dir(&root)
            .env(EP_LIBRARY_VAR, &lib)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    )
    .context("the LLM benchmark failed (a mismatch between the EPs fails it too)")
}
