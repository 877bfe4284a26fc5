// This file is also compiled into xtask (`include!`), whose `cargo xtask docs` writes the
// environment table of docs/usage.md from it: keep it free of imports and dependencies.
// `tests/env_vars.rs` fails when a source file reads an `ORTMLX_` variable missing here, or
// when a variable listed here is read nowhere.

/// Who reads an environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvScope {
    /// The EP library, when it loads or runs (set it before the process registers the EP).
    Library,
    /// The crates' build (`cargo build`, `cargo xtask build`).
    Build,
    /// `cargo xtask` and the test suites.
    Tools,
}

impl EnvScope {
    /// How the generated table names the scope.
    pub fn label(self) -> &'static str {
        match self {
            EnvScope::Library => "EP library",
            EnvScope::Build => "build",
            EnvScope::Tools => "xtask, tests",
        }
    }
}

/// One environment variable the project reads (or, for MLX's own, sets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar {
    /// Its name.
    pub name: &'static str,
    /// Who reads it.
    pub scope: EnvScope,
    /// The crate or file that reads it.
    pub read_by: &'static str,
    /// What it does (one line of Markdown).
    pub meaning: &'static str,
}

/// Every environment variable of the project, in the order the documentation lists them.
pub const ENV_VARS: &[EnvVar] = &[
    EnvVar {
        name: "ORTMLX_LOG",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep",
        meaning: "`error|warn|info|debug|trace`: log to stderr through the `log` facade (off by \
                  default). `info` gives one line per `GetCapability` (nodes claimed, declines \
                  grouped by reason) and per compiled group, what keeps a fused node from the \
                  shapeless compiled slot, and each fused node's run counters when it is \
                  released; `debug` gives every decline. The one-line placement summary goes \
                  through ORT's logger whatever this says",
    },
    EnvVar {
        name: "ORTMLX_LOG_CLAIMS",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep",
        meaning: "`1`: a claim report on stderr: for every graph ORT offers, one line per node \
                  saying whether MLX took it and, if not, why",
    },
    EnvVar {
        name: "ORTMLX_CLAIMS_FILE",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep",
        meaning: "`<path>`: the claim report appended to a file as JSON lines (`graph`, `node`, \
                  `domain`, `op_type`, `action`, `cluster`, `reason`)",
    },
    EnvVar {
        name: "ORTMLX_TRACE",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep",
        meaning: "`<path>`: a Chrome-trace JSON (opens in Perfetto) of capability, compile and \
                  each run (with its path and host syncs and reads); `%p` in the path becomes \
                  the process id",
    },
    EnvVar {
        name: "ORTMLX_DISABLE_INITIALIZER_SHARING",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep config (ortmlx-initializer-pool acts on it)",
        meaning: "`1`: don't share identical initializers across sessions",
    },
    EnvVar {
        name: "ORTMLX_DISABLE_COMPILE",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep config (ortmlx-runtime acts on it)",
        meaning: "`1`: never compile plans with `mlx_compile` (eager only). Compiling is on by \
                  default on the GPU; on the CPU only the shapeless decode closure compiles by \
                  default (MLX's CPU compile runs the system C++ compiler at first use); the \
                  `compile` EP option overrides the default",
    },
    EnvVar {
        name: "ORTMLX_DISABLE_COMPILE_DECODE",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep config (ortmlx-runtime acts on it)",
        meaning: "`1`: turn off the compiled decode slot (sequence length 1, shapeless)",
    },
    EnvVar {
        name: "ORTMLX_DISABLE_COMPILE_PREFILL",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep config (ortmlx-runtime acts on it)",
        meaning: "`1`: turn off the compiled prefill slot (sequence length > 1, keyed by shapes)",
    },
    EnvVar {
        name: "ORTMLX_DISABLE_COMPILE_GENERAL",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep config (ortmlx-runtime acts on it)",
        meaning: "`1`: turn off the compiled slot of other plans (keyed by input shapes)",
    },
    EnvVar {
        name: "ORTMLX_DISABLE_DECODE_REUSE",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep config (ortmlx-runtime acts on it)",
        meaning: "`1`: don't carry KV-cache outputs and unchanged inputs from one decode step \
                  to the next (see \"LLM decoding\")",
    },
    EnvVar {
        name: "ORTMLX_DEVICE_MEMORY",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep",
        meaning: "`0`: declare no MLX device memory (no allocator, data transfer, zero-copy \
                  inputs and outputs or IOBinding of the KV cache; see \"Device memory and \
                  IOBinding\"): every value stays in ORT's CPU memory and each run copies its \
                  inputs and outputs. Declared by default",
    },
    EnvVar {
        name: "ORTMLX_CPU_QUANTIZED_MATMUL",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep config (ortmlx-runtime acts on it)",
        meaning: "`1`: keep MLX's quantized matmul for MatMulNBits on the CPU stream (by \
                  default its weights are dequantized to float32 once at load, since MLX's CPU \
                  quantized kernels are scalar code)",
    },
    EnvVar {
        name: "ORTMLX_MAX_TENSOR_BYTES",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep config (ortmlx-runtime acts on it)",
        meaning: "the largest tensor one plan step may produce, in bytes (default: physical \
                  memory); a larger one fails the run with an error naming the node instead of \
                  an allocation failure",
    },
    EnvVar {
        name: "ORTMLX_LANES",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep config (ortmlx-runtime acts on it)",
        meaning: "how many MLX stream lanes runs share (default: CPU cores, at most 8); each \
                  lane is one MLX CPU worker thread, and bounds how many runs execute at once",
    },
    EnvVar {
        name: "MLX_ENABLE_TF32",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep config (ortmlx-runtime sets it)",
        meaning: "MLX's own: its CUDA backend runs float32 matmuls in TF32 unless this is `0`. \
                  The EP sets it to `0` when it loads unless you set it first (`1` allows \
                  TF32: faster, about 1e-3 relative error)",
    },
    EnvVar {
        name: "ORTMLX_LANE_WORKERS",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep config (ortmlx-runtime acts on it)",
        meaning: "`1`: CPU runs too go through the lanes' worker threads (GPU runs always do: \
                  each GPU lane's streams live on a thread of their own); for tests and \
                  measurements",
    },
    EnvVar {
        name: "ORTMLX_KERNEL_CACHE_DIR",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep config (ortmlx-runtime acts on it)",
        meaning: "folder for MLX's compiled CUDA kernels, or `off` (default \
                  `$XDG_CACHE_HOME/onnxruntime-mlx-ep/mlx-<version>/ptx`, else under \
                  `~/.cache`); the EP option `kernel_cache_dir` wins over it, MLX's own \
                  `MLX_PTX_CACHE_DIR` over both. Fixed once per process",
    },
    EnvVar {
        name: "MLX_PTX_CACHE_DIR",
        scope: EnvScope::Library,
        read_by: "ortmlx-ep config (ortmlx-runtime sets it)",
        meaning: "MLX's own kernel cache folder. When you set it, the EP leaves it alone; \
                  otherwise the EP sets it from `kernel_cache_dir` / `ORTMLX_KERNEL_CACHE_DIR` / \
                  the default (empty for `off`)",
    },
    EnvVar {
        name: "ORTMLX_EP_BUILD",
        scope: EnvScope::Library,
        read_by: "onnxruntime_mlx_ep (Python package)",
        meaning: "`cpu|cuda13`: which installed build `get_library_path()` returns (default: the \
                  CUDA build when its wheel is installed, else the CPU one)",
    },
    EnvVar {
        name: "ORTMLX_CACHE_DIR",
        scope: EnvScope::Build,
        read_by: "ortmlx-sys build script, xtask",
        meaning: "cache root for the MLX SDK, the built mlx-c and the Python environments \
                  (default `$XDG_CACHE_HOME/ortmlx`, else `~/.cache/ortmlx`)",
    },
    EnvVar {
        name: "ORTMLX_MLX_DIR",
        scope: EnvScope::Build,
        read_by: "ortmlx-sys build script",
        meaning: "build against your own MLX installation (a prefix with \
                  `share/cmake/MLX/MLXConfig.cmake`) instead of the pinned wheel",
    },
    EnvVar {
        name: "ORTMLX_ALLOW_REFERENCE_BLAS",
        scope: EnvScope::Build,
        read_by: "ortmlx-sys build script, xtask package",
        meaning: "`1`: accept the wheel's slow reference BLAS when no OpenBLAS is installed",
    },
    EnvVar {
        name: "ORTMLX_PYTHON",
        scope: EnvScope::Tools,
        read_by: "xtask setup",
        meaning: "the interpreter `cargo xtask setup` makes the Python environments from \
                  (default `python3`)",
    },
    EnvVar {
        name: "ORTMLX_EP_LIBRARY",
        scope: EnvScope::Tools,
        read_by: "tests/python, demo",
        meaning: "path of the built EP library (`cargo xtask test` sets it)",
    },
    EnvVar {
        name: "ORTMLX_TEST_DEVICE",
        scope: EnvScope::Tools,
        read_by: "tests/python",
        meaning: "`gpu` runs every MLX session on MLX's GPU stream (the device machine's run \
                  sets it; without it the GPU tests are skipped with that reason)",
    },
    EnvVar {
        name: "ORTMLX_ORT_INCLUDE",
        scope: EnvScope::Tools,
        read_by: "xtask test, tests/python",
        meaning: "folder of ONNX Runtime's C API headers for the C++ example test (`cargo \
                  xtask test` provisions it)",
    },
    EnvVar {
        name: "ORTMLX_LEAK_CYCLES",
        scope: EnvScope::Tools,
        read_by: "tests/python",
        meaning: "session cycles of the RSS leak test (default 1000)",
    },
    EnvVar {
        name: "ORTMLX_LEAK_GPU_MEMORY",
        scope: EnvScope::Tools,
        read_by: "tests/python/leak_loop.py",
        meaning: "`1`: the leak loop also samples the process's GPU memory (nvidia-smi) and \
                  `test_leaks.py` bounds its growth (set by `tests/gpu/device_run.sh`)",
    },
    EnvVar {
        name: "ORTMLX_VALGRIND_CYCLES",
        scope: EnvScope::Tools,
        read_by: "tests/python",
        meaning: "session cycles of the valgrind leak run (default 5; `0` skips it)",
    },
    EnvVar {
        name: "ORTMLX_THREAD_RUNS",
        scope: EnvScope::Tools,
        read_by: "tests/python",
        meaning: "runs per thread of the threading tests (default 200)",
    },
    EnvVar {
        name: "ORTMLX_HOSTILE_TIMEOUT",
        scope: EnvScope::Tools,
        read_by: "tests/python",
        meaning: "seconds each hostile-input case may take (default 120)",
    },
    EnvVar {
        name: "ORTMLX_CONFORMANCE_FAULT",
        scope: EnvScope::Tools,
        read_by: "tests/conformance",
        meaning: "test hook of the conformance runner: `crash:<case>`, `hang:<case>`, \
                  `cpu-crash:<case>` (comma-separated) inject worker faults",
    },
    EnvVar {
        name: "ORTMLX_BENCH_BLAS",
        scope: EnvScope::Tools,
        read_by: "ortmlx gemm_bench example",
        meaning: "the BLAS library `cargo xtask bench gemm` compares MLX with (default \
                  `libopenblas.so.0`)",
    },
];
