//! The EP's one `Config`: every environment switch, read in this one place, once per process
//! (when ORT first creates the EP's factory), then handed to the modules that act on it; the
//! runtime's part ([`runtime::RuntimeConfig`]) is installed into the runtime at the same time.
//! Per-session switches are EP options ([`crate::options::EpOptions`], parsed from each
//! session's options); `env_vars.rs` is the documented table of the variables read here
//! (`cargo xtask docs` writes it into `docs/usage.md`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The process-wide switches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `ORTMLX_LOG`, as given (`logging::level_from` reads it).
    pub log: Option<String>,
    /// `ORTMLX_LOG_CLAIMS=1|true|yes`: per-node claim reports on stderr.
    pub log_claims: bool,
    /// `ORTMLX_CLAIMS_FILE`: the file claim reports are appended to (empty: none).
    pub claims_file: Option<PathBuf>,
    /// `ORTMLX_TRACE`, as given (`trace::trace_path` reads it).
    pub trace: Option<String>,
    /// `ORTMLX_DEVICE_MEMORY`: on unless `0`, `off`, `false` or `no` (any case).
    pub device_memory: bool,
    /// The runtime's switches.
    pub runtime: runtime::RuntimeConfig,
}

/// `1`, `true`, `yes` or `on` in any case (the runtime's compile and reuse switches).
fn flag(v: Option<&str>) -> bool {
    v.is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on"))
}

impl Config {
    /// The config of an environment that `get` reads one variable of (pure, for tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<OsString>) -> Config {
        // A value that is not UTF-8 counts as unset, except for paths.
        let text = |name: &str| get(name).and_then(|v| v.into_string().ok());
        let non_empty_path = |name: &str| get(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let runtime = runtime::RuntimeConfig {
            disable_compile: flag(text("ORTMLX_DISABLE_COMPILE").as_deref()),
            disable_compile_decode: flag(text("ORTMLX_DISABLE_COMPILE_DECODE").as_deref()),
            disable_compile_prefill: flag(text("ORTMLX_DISABLE_COMPILE_PREFILL").as_deref()),
            disable_compile_general: flag(text("ORTMLX_DISABLE_COMPILE_GENERAL").as_deref()),
            disable_decode_reuse: flag(text("ORTMLX_DISABLE_DECODE_REUSE").as_deref()),
            cpu_quantized_matmul: text("ORTMLX_CPU_QUANTIZED_MATMUL").as_deref() == Some("1"),
            max_tensor_bytes: text(runtime::MAX_TENSOR_BYTES_VAR)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|&v| v > 0),
            lane_workers: text("ORTMLX_LANE_WORKERS").is_some_and(|v| v.trim() == "1"),
            lanes: text("ORTMLX_LANES")
                .and_then(|v| v.trim().parse::<usize>().ok())
                .filter(|&n| n > 0),
            kernel_cache_dir: text(runtime::kernel_cache::VARIABLE),
            mlx_ptx_cache_dir: text(runtime::kernel_cache::MLX_VARIABLE),
            cache_home: non_empty_path("XDG_CACHE_HOME")
                .or_else(|| non_empty_path("HOME").map(|home| home.join(".cache"))),
            mlx_enable_tf32_set: get("MLX_ENABLE_TF32").is_some(),
            disable_initializer_sharing: initializer_pool::disable_flag_set(
                text(initializer_pool::DISABLE_SHARING_ENV).as_deref(),
            ),
        };
        Config {
            log: text("ORTMLX_LOG"),
            log_claims: matches!(
                text("ORTMLX_LOG_CLAIMS").as_deref(),
                Some("1") | Some("true") | Some("yes")
            ),
            claims_file: non_empty_path("ORTMLX_CLAIMS_FILE"),
            trace: text(crate::trace::TRACE_VAR),
            device_memory: text(crate::device_memory::DEVICE_MEMORY_VAR).is_none_or(|v| {
                !matches!(
                    v.to_ascii_lowercase().as_str(),
                    "0" | "off" | "false" | "no"
                )
            }),
            runtime,
        }
    }

    /// The process's config: the environment read on the first call, which also installs the
    /// runtime's part.
    pub fn get() -> &'static Config {
        static CONFIG: OnceLock<Config> = OnceLock::new();
        CONFIG.get_or_init(|| {
            let c = Config::from_lookup(|name| std::env::var_os(name));
            runtime::install_config(c.runtime.clone());
            c
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn config(vars: &[(&str, &str)]) -> Config {
        let m: HashMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        Config::from_lookup(|name| m.get(name).cloned())
    }

    #[test]
    fn defaults_without_variables() {
        let c = config(&[]);
        assert!(c.device_memory, "device memory is on by default");
        assert!(!c.log_claims);
        assert_eq!(c.log, None);
        assert_eq!(c.claims_file, None);
        assert_eq!(c.runtime, runtime::RuntimeConfig::default());
    }

    #[test]
    fn each_switch_keeps_its_spelling() {
        for off in ["0", "off", "OFF", "false", "No"] {
            assert!(
                !config(&[("ORTMLX_DEVICE_MEMORY", off)]).device_memory,
                "{off}"
            );
        }
        assert!(config(&[("ORTMLX_DEVICE_MEMORY", "1")]).device_memory);
        let c = config(&[
            ("ORTMLX_DISABLE_COMPILE", "On"),
            ("ORTMLX_DISABLE_COMPILE_DECODE", "yes"),
            ("ORTMLX_DISABLE_COMPILE_PREFILL", "2"),
            ("ORTMLX_DISABLE_DECODE_REUSE", "TRUE"),
            ("ORTMLX_CPU_QUANTIZED_MATMUL", "true"),
            ("ORTMLX_MAX_TENSOR_BYTES", " 4096 "),
            ("ORTMLX_LANE_WORKERS", " 1 "),
            ("ORTMLX_LANES", "0"),
            ("ORTMLX_LOG_CLAIMS", "TRUE"),
            ("ORTMLX_CLAIMS_FILE", ""),
            ("XDG_CACHE_HOME", ""),
            ("HOME", "home"),
            ("MLX_ENABLE_TF32", ""),
            ("ORTMLX_DISABLE_INITIALIZER_SHARING", " On "),
        ]);
        let r = &c.runtime;
        assert!(r.disable_compile && r.disable_compile_decode && r.disable_decode_reuse);
        assert!(!r.disable_compile_prefill && !r.disable_compile_general);
        assert!(
            !r.cpu_quantized_matmul,
            "only `1` keeps the quantized matmul"
        );
        assert_eq!(r.max_tensor_bytes, Some(4096));
        assert!(r.lane_workers);
        assert_eq!(r.lanes, None, "0 lanes is no override");
        assert!(!c.log_claims, "claim reports take 1, true or yes exactly");
        assert_eq!(c.claims_file, None);
        assert_eq!(r.cache_home, Some(PathBuf::from("home").join(".cache")));
        assert!(r.mlx_enable_tf32_set);
        assert!(r.disable_initializer_sharing);
        let c = config(&[("XDG_CACHE_HOME", "xdg"), ("HOME", "home")]);
        assert_eq!(c.runtime.cache_home, Some(PathBuf::from("xdg")));
    }
}
