//! The runtime's switches: a plain struct the EP plugin fills once per process (from its
//! `Config`, which reads the environment) and installs before the first session. The runtime
//! reads no environment variable itself; without an installed config (the runtime's own tests
//! and examples) every switch has its default.

use std::path::PathBuf;
use std::sync::OnceLock;

/// Every process-wide switch the runtime honours.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// No compiled closures at all (`ORTMLX_DISABLE_COMPILE`).
    pub disable_compile: bool,
    /// No compiled decode slot (`ORTMLX_DISABLE_COMPILE_DECODE`).
    pub disable_compile_decode: bool,
    /// No compiled prefill slot (`ORTMLX_DISABLE_COMPILE_PREFILL`).
    pub disable_compile_prefill: bool,
    /// No compiled general slot (`ORTMLX_DISABLE_COMPILE_GENERAL`).
    pub disable_compile_general: bool,
    /// No KV-cache carrying between decode runs (`ORTMLX_DISABLE_DECODE_REUSE`).
    pub disable_decode_reuse: bool,
    /// Keep MLX's quantized matmul on the CPU stream (`ORTMLX_CPU_QUANTIZED_MATMUL`).
    pub cpu_quantized_matmul: bool,
    /// The largest tensor one step may make, overriding physical memory
    /// (`ORTMLX_MAX_TENSOR_BYTES`).
    pub max_tensor_bytes: Option<u64>,
    /// Worker threads for the lanes without a GPU too (`ORTMLX_LANE_WORKERS`).
    pub lane_workers: bool,
    /// The number of lanes, overriding the machine's parallelism (`ORTMLX_LANES`).
    pub lanes: Option<usize>,
    /// The kernel cache folder or `off` (`ORTMLX_KERNEL_CACHE_DIR`).
    pub kernel_cache_dir: Option<String>,
    /// MLX's own kernel cache variable as the user set it (`MLX_PTX_CACHE_DIR`).
    pub mlx_ptx_cache_dir: Option<String>,
    /// The user's cache folder (`XDG_CACHE_HOME`, else `HOME/.cache`), for the default kernel
    /// cache.
    pub cache_home: Option<PathBuf>,
    /// The user set `MLX_ENABLE_TF32` (else the runtime turns TF32 off).
    pub mlx_enable_tf32_set: bool,
    /// Identical initializers are not shared across sessions
    /// (`ORTMLX_DISABLE_INITIALIZER_SHARING`).
    pub disable_initializer_sharing: bool,
}

static CONFIG: OnceLock<RuntimeConfig> = OnceLock::new();

/// Installs the process's config; the first call wins (returns false when one was installed
/// already, or the runtime had started with the defaults).
pub fn install_config(config: RuntimeConfig) -> bool {
    initializer_pool::configure_sharing(!config.disable_initializer_sharing);
    CONFIG.set(config).is_ok()
}

/// The installed config (the defaults when none was).
pub fn config() -> &'static RuntimeConfig {
    CONFIG.get_or_init(RuntimeConfig::default)
}
