//! `cargo xtask`: everything around the Rust build that cargo alone does not do.
//!
//! ```text
//! cargo xtask setup        provision Debian packages and the pinned Python environments
//! cargo xtask build        build the EP library (release) and print its path
//! cargo xtask demo         setup + build, then run a small encoder with the MLX EP vs the CPU EP
//! cargo xtask test         setup + build, cargo test --workspace, then pytest against every pinned ORT
//! cargo xtask conformance  ONNX's backend node suite through ORT with the MLX EP, per-case report
//! cargo xtask bench bert | gemm | llm | overhead | small
//! ```
//!
//! Only std and `anyhow`: this binary is built on every `cargo xtask` call, so it stays small.

mod bench;
mod bench_llm;
mod build;
mod conformance;
mod demo;
mod docs;
mod gpu_check;
mod matrix;
mod mlx_wheel;
mod opset_table;
mod ort_headers;
mod package;
mod setup;
mod test;
mod util;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  setup                 install the Debian packages the build needs (cmake, libclang-dev,
                        libopenblas0-pthread) and the pinned Python environments
                        (one per ONNX Runtime version, the opset-forward one and
                        onnxruntime-genai's) in the cache directory
  build                 cargo build --release -p ortmlx-ep, then print the library's path
  demo                  setup + build, then run tests/python/demo.py: a small encoder through
                        ONNX Runtime with the MLX EP and with the CPU EP, side by side
  test [options] [-- <pytest args>]
                        setup + build, cargo test --workspace, docs/operators.md and the
                        environment table of docs/usage.md current,
                        cargo doc without warnings, cargo package of the library crates,
                        pytest tests/python (with the C++ example) against every
                        pinned ONNX Runtime, then the wheels: the CPU wheel installed and run
                        in a fresh environment, then with onnxruntime 1.23.1, 1.24.4, 1.25.1 and
                        1.32.0 (cached environments) with every Python snippet of README.md and
                        docs/usage.md and its C/C++ recipe run verbatim; the CUDA wheel built
                        and checked statically
      --no-rust         skip cargo test --workspace, the docs checks and cargo package
      --no-python       skip the pytest suites and the wheel
      --no-package      skip the wheel
      --ort <version>   run pytest only against this ONNX Runtime (repeatable)
      --no-conformance  skip the conformance check against tests/conformance/manifest.tsv
      --no-forward      skip the opset-forward stages: the schema table matches the newest
                        onnx, and tests/python/test_opset_forward.py (with the placement
                        summary tests) on the newest ONNX Runtime, in their own environment
      --no-genai        skip tests/python/test_genai.py in its own environment
                        (onnxruntime-genai 0.18.0 with onnxruntime 1.31.1): genai's greedy
                        decode loop with the EP registered, tokens equal to the CPU EP
  conformance [options] setup + build, then every case of ONNX's backend node suite (onnx 1.21.0)
                        through onnxruntime 1.31.1 with the MLX EP and alone on its CPU EP, each
                        case in an isolated worker; writes <target>/conformance/report.json and
                        a markdown table by op type
      --filter <text>   only cases whose name contains <text>
      --no-fallback     session.disable_cpu_ep_fallback=1 (declined nodes fail the session)
      --check           fail on any difference with tests/conformance/manifest.tsv
      --update-manifest rewrite the manifest and docs/conformance.md from this run
      --float64         the float64 sweep instead: every case widened to float64, MLX against
                        ORT's CPU EP at rtol 1e-9 (ops must compute in float64, not float32)
      --jobs <n>        worker processes (default: the CPU count)
      --timeout <s>     seconds per case before its worker is killed (default 60)
      --verbose         print every failing case as it ends
  bench bert [args]     a BERT fused by ORT's transformer optimizer (Attention,
                        EmbedLayerNormalization, ...): CPU EP vs MLX EP, outputs checked
                        (target/bench/bert.json; args go to tests/python/bench_bert.py)
  bench gemm            a 1024^3 float32 matmul: MLX vs the system BLAS (target/bench/gemm.json)
  bench llm [-- args]   Llama-style decoders (GQA, RoPE, RMSNorm; float32 and 4-bit MatMulNBits):
                        128-token prefill + 64 greedy steps, CPU EP vs MLX EP, tokens checked
                        (target/bench/llm.json; args go to tests/python/llm.py)
  bench overhead [--device gpu] [--budget-ms <ms>] [--only <names>]
                        the EP's cost per run: its runtime against the same computation
                        written directly against the mlx crate (1 node, encoder layer, 6-layer
                        encoder, Llama decode step); target/bench/overhead.json
  bench small [--device gpu] [--budget-ms <ms>] [--only <names>] [--explain]
                        held-out-style small models (tests/python/small_graphs.py: GRU and
                        LSTM steps, a VAD, a 2-layer seq2seq decoder step, a classifier):
                        ORT's CPU EP, ORT + MLX EP, and the same plan run through the
                        runtime directly; ep/plan and ep/cpu ratios; target/bench/small.json
                        and small.md (the table of docs/benchmarks.md)
  gpu-check [--wheel]   stage .gpu/ for the NVIDIA device machine (see tests/gpu/); --wheel
                        stages the EP's CUDA wheel and the pinned mlx-cuda-13 wheel instead,
                        for tests/gpu/device_wheel.sh
  docs                  regenerate docs/operators.md from the op registry and the
                        environment table of docs/usage.md from ENV_VARS
                        (crates/ep-plugin/src/env_vars.rs)
  gen-opset-table [--check]
                        regenerate crates/plan/src/schema_versions.rs (every ONNX op's schema
                        versions) from the newest onnx's schema history, in the opset-forward
                        environment; --check fails when the committed table differs
  package [--cuda] [--no-check]
                        build the Python wheel target/wheels/onnxruntime_mlx_ep-*.whl
                        (EP + MLX + OpenBLAS bundled, relocatable), check its metadata and run
                        paths, then install it into a fresh environment and run a model on the
                        MLX EP with it. --cuda: the NVIDIA wheel onnxruntime_mlx_ep_cuda13-*.whl
                        instead (EP + mlx-c; MLX from the pinned mlx-cuda-13 wheel, a declared
                        dependency), checked without a GPU; prints how to test it on one
  help                  this text

environment:
  ORTMLX_CACHE_DIR      cache root (default $XDG_CACHE_HOME/ortmlx or ~/.cache/ortmlx)
  ORTMLX_PYTHON         interpreter used to create the environments (default python3)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((command, rest)) = args.split_first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = match command.as_str() {
        "setup" => no_args(command, rest).and_then(|()| setup::run(setup::Scope::All).map(|_| ())),
        "build" => no_args(command, rest).and_then(|()| {
            let lib = build::run()?;
            println!("{}", lib.display());
            Ok(())
        }),
        "demo" => no_args(command, rest).and_then(|()| demo::run()),
        "test" => test::Options::parse(rest).and_then(test::run),
        "conformance" => conformance::Options::parse(rest).and_then(conformance::run),
        "bench" => bench::run(rest),
        "docs" => no_args(command, rest).and_then(|()| docs::run()),
        "gen-opset-table" => opset_table::Options::parse(rest).and_then(opset_table::run),
        "package" => package::Options::parse(rest).and_then(package::run),
        "gpu-check" => match rest {
            [] => gpu_check::run_check(),
            [flag] if flag == "--wheel" => gpu_check::stage_wheel(),
            _ => Err(anyhow::anyhow!(
                "`gpu-check` takes only `--wheel`; see `cargo xtask help`"
            )),
        },
        "help" | "-h" | "--help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => {
            eprintln!("xtask: unknown command `{other}`\n");
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("\nxtask {command}: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn no_args(command: &str, rest: &[String]) -> anyhow::Result<()> {
    if rest.is_empty() {
        Ok(())
    } else {
        anyhow::bail!("`{command}` takes no arguments (got {rest:?}); see `cargo xtask help`")
    }
}
