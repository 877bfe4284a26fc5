//! `cargo xtask`: everything around the Rust build that cargo alone does not do.
//!
//! ```text
//! cargo xtask setup        provision Debian packages and the pinned Python environments
//! cargo xtask build        build the EP library (release) and print its path
//! cargo xtask demo         setup + build, then run a small encoder with the MLX EP vs the CPU EP
//! cargo xtask test         setup + build, cargo test --workspace, then pytest against every pinned ORT
//! cargo xtask bench gemm
//! ```
//!
//! Only std and `anyhow`: this binary is built on every `cargo xtask` call, so it stays small.

mod bench;
mod build;
mod demo;
mod gpu_check;
mod setup;
mod test;
mod util;

use std::process::ExitCode;

const USAGE: &str = "\
usage: cargo xtask <command> [options]

commands:
  setup                 install the Debian packages the build needs (cmake, libclang-dev,
                        libopenblas0-pthread) and the pinned Python environments
                        (one per ONNX Runtime version) in the cache directory
  build                 cargo build --release -p ortmlx-ep, then print the library's path
  demo                  setup + build, then run tests/python/demo.py: a small encoder through
                        ONNX Runtime with the MLX EP and with the CPU EP, side by side
  test [options] [-- <pytest args>]
                        setup + build, cargo test --workspace, then pytest tests/python
                        against every pinned ONNX Runtime
      --no-rust         skip cargo test --workspace
      --no-python       skip the pytest suites
      --ort <version>   run pytest only against this ONNX Runtime (repeatable)
  bench gemm            a 1024^3 float32 matmul: MLX vs the system BLAS (target/bench/gemm.json)
  gpu-check             stage .gpu/ for the NVIDIA device machine (see tests/gpu/)
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
        "bench" => bench::run(rest),
        "gpu-check" => no_args(command, rest).and_then(|()| gpu_check::run_check()),
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
