//! EP options: ORT hands them over as session config entries `ep.mlxexecutionprovider.<key>`.

use runtime::DeviceKind;

use crate::error::EpError;

/// The EP's name, as the factory and every EP report it.
pub const EP_NAME: &str = "MLXExecutionProvider";

/// Prefix of the session config entries that carry this EP's options (ORT lower-cases the EP
/// name).
pub const OPTION_PREFIX: &str = "ep.mlxexecutionprovider.";

/// Option keys this EP understands, with a description for error messages.
pub const VALID_KEYS: &[(&str, &str)] = &[
    ("device", "cpu|gpu: where MLX runs the fused nodes"),
    (
        "compile",
        "on|off|auto: run plans as compiled MLX closures (auto: on for the GPU; on the CPU, the decode closure only)",
    ),
    (
        "share_initializers",
        "on|off: share identical initializers across sessions (default on)",
    ),
    (
        "kernel_cache_dir",
        "folder|off: where MLX keeps the CUDA kernels it compiles (process-wide, first session wins)",
    ),
    (
        "memory_limit",
        "bytes (K/M/G suffixes): MLX's memory limit, past which it frees its buffer cache (process-wide)",
    ),
    (
        "cache_limit",
        "bytes (K/M/G suffixes): most freed memory MLX keeps for reuse (process-wide; 0 keeps none)",
    ),
];

/// Options of one EP instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpOptions {
    /// Device the fused nodes run on.
    pub device: DeviceKind,
    /// `Some(on)` when the `compile` option was given; `None` (or `auto`) leaves the choice to
    /// the runtime.
    pub compile: Option<bool>,
    /// Whether identical initializers are shared across sessions.
    pub share_initializers: bool,
    /// The `kernel_cache_dir` option, as given (see `runtime::kernel_cache`).
    pub kernel_cache_dir: Option<String>,
    /// MLX's memory limit in bytes, when given.
    pub memory_limit: Option<usize>,
    /// MLX's buffer cache limit in bytes, when given.
    pub cache_limit: Option<usize>,
    /// ORT's session option `ep.context_enable=1`: the session compiles the model into one
    /// with EPContext nodes (see `context`).
    pub ep_context: bool,
}

/// ORT's session config key that asks EPs for EPContext nodes.
pub const EP_CONTEXT_ENABLE: &str = "ep.context_enable";

/// Reads a byte count: digits with an optional K, M, G or T suffix (powers of 1024; a
/// trailing `B`/`iB` is accepted).
fn parse_bytes(key: &str, value: &str) -> Result<usize, EpError> {
    let text = value.trim().to_ascii_uppercase();
    let text = text
        .strip_suffix("IB")
        .or_else(|| text.strip_suffix('B'))
        .unwrap_or(&text)
        .trim_end();
    let (digits, shift) = match text.char_indices().last() {
        Some((i, 'K')) => (&text[..i], 10),
        Some((i, 'M')) => (&text[..i], 20),
        Some((i, 'G')) => (&text[..i], 30),
        Some((i, 'T')) => (&text[..i], 40),
        _ => (text, 0),
    };
    digits
        .trim()
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize << shift))
        .ok_or_else(|| {
            EpError::invalid_argument(format!(
                "{EP_NAME} option {key}='{value}': expected a byte count such as 8589934592, 512M or 8G"
            ))
        })
}

/// Reads an on/off option value (`on|off`, `1|0`, `true|false`, `yes|no`).
fn parse_switch(key: &str, value: &str, extra: &str) -> Result<bool, EpError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "true" | "yes" => Ok(true),
        "off" | "0" | "false" | "no" => Ok(false),
        other => Err(EpError::invalid_argument(format!(
            "{EP_NAME} option {key}='{other}': expected on or off{extra} (also accepted: 1|0, true|false, yes|no)"
        ))),
    }
}

impl EpOptions {
    /// Parses the options among all session config entries.
    ///
    /// `default_device` comes from the hardware device ORT selected; `gpu_available` says
    /// whether the linked MLX has a GPU backend.
    pub fn from_config<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
        default_device: DeviceKind,
        gpu_available: bool,
    ) -> Result<Self, EpError> {
        let mut options = EpOptions {
            device: default_device,
            compile: None,
            share_initializers: true,
            kernel_cache_dir: None,
            memory_limit: None,
            cache_limit: None,
            ep_context: false,
        };
        for (key, value) in entries {
            if key == EP_CONTEXT_ENABLE {
                options.ep_context = value.trim() == "1";
                continue;
            }
            let Some(key) = key.strip_prefix(OPTION_PREFIX) else {
                continue;
            };
            match key {
                "device" => {
                    options.device = match value.trim().to_ascii_lowercase().as_str() {
                        "cpu" => DeviceKind::Cpu,
                        "gpu" | "cuda" | "metal" => DeviceKind::Gpu,
                        other => {
                            return Err(EpError::invalid_argument(format!(
                                "{EP_NAME} option device='{other}': expected cpu or gpu"
                            )));
                        }
                    }
                }
                "compile" => {
                    options.compile = if value.trim().eq_ignore_ascii_case("auto") {
                        None
                    } else {
                        Some(parse_switch(key, value, ", or auto")?)
                    }
                }
                "share_initializers" => {
                    options.share_initializers = parse_switch(key, value, "")?;
                }
                "kernel_cache_dir" => options.kernel_cache_dir = Some(value.to_string()),
                "memory_limit" => options.memory_limit = Some(parse_bytes(key, value)?),
                "cache_limit" => options.cache_limit = Some(parse_bytes(key, value)?),
                unknown => {
                    let valid: Vec<String> = VALID_KEYS
                        .iter()
                        .map(|(k, d)| format!("{k} ({d})"))
                        .collect();
                    return Err(EpError::invalid_argument(format!(
                        "{EP_NAME}: unknown option '{unknown}'; valid options: {}",
                        valid.join(", ")
                    )));
                }
            }
        }
        if options.device == DeviceKind::Gpu && !gpu_available {
            return Err(EpError::invalid_argument(format!(
                "{EP_NAME} option device=gpu: the linked MLX has no GPU backend or no GPU is present"
            )));
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `(option, value)` pairs given under this EP's prefix, on a CPU-only build.
    fn cpu_options<const N: usize>(entries: [(&str, &str); N]) -> Result<EpOptions, EpError> {
        let keyed = entries.map(|(k, v)| (format!("ep.mlxexecutionprovider.{k}"), v));
        EpOptions::from_config(
            keyed.iter().map(|(k, v)| (k.as_str(), *v)),
            DeviceKind::Cpu,
            false,
        )
    }

    /// Asserts that `entries` are refused with a message holding each of `needles`.
    fn refused<const N: usize>(entries: [(&str, &str); N], needles: &[&str]) {
        let e = cpu_options(entries).unwrap_err();
        for needle in needles {
            assert!(e.message.contains(needle), "{e}");
        }
    }

    #[test]
    fn reads_device_and_ignores_other_entries() {
        let entries = [
            ("session.record_ep_graph_assignment_info", "1"),
            ("ep.mlxexecutionprovider.device", "CPU"),
            ("ep.otherep.device", "x"),
        ];
        let o = EpOptions::from_config(entries, DeviceKind::Gpu, true).unwrap();
        assert_eq!(o.device, DeviceKind::Cpu);
        let o = EpOptions::from_config([], DeviceKind::Gpu, true).unwrap();
        assert_eq!(o.device, DeviceKind::Gpu);
    }

    #[test]
    fn rejects_unknown_keys_and_values() {
        refused([("fast", "1")], &["unknown option 'fast'", "device"]);
        refused([("device", "tpu")], &["tpu"]);
    }

    #[test]
    fn reads_compile_and_sharing_switches() {
        let o = cpu_options([]).unwrap();
        assert_eq!((o.compile, o.share_initializers), (None, true));
        let o = cpu_options([("compile", "ON"), ("share_initializers", "0")]).unwrap();
        assert_eq!((o.compile, o.share_initializers), (Some(true), false));
        for (value, want) in [("off", Some(false)), ("auto", None), ("yes", Some(true))] {
            let o = cpu_options([("compile", value)]).unwrap();
            assert_eq!(o.compile, want, "{value}");
        }
    }

    #[test]
    fn invalid_switch_values_name_the_valid_ones() {
        refused(
            [("compile", "maybe")],
            &["compile='maybe'", "on or off, or auto"],
        );
        refused(
            [("share_initializers", "sometimes")],
            &["expected on or off"],
        );
        let e = cpu_options([("fast", "1")]).unwrap_err();
        for key in ["device", "compile", "share_initializers"] {
            assert!(e.message.contains(key), "{e}");
        }
    }

    #[test]
    fn reads_kernel_cache_and_memory_limits() {
        let o = cpu_options([
            ("kernel_cache_dir", "/tmp/k"),
            ("memory_limit", "8G"),
            ("cache_limit", "0"),
        ])
        .unwrap();
        assert_eq!(o.kernel_cache_dir.as_deref(), Some("/tmp/k"));
        assert_eq!(o.memory_limit, Some(8 << 30));
        assert_eq!(o.cache_limit, Some(0));
        for (text, want) in [
            ("512M", 512 << 20),
            ("1 KiB", 1024),
            ("2gb", 2 << 30),
            ("77", 77),
        ] {
            assert_eq!(parse_bytes("memory_limit", text).unwrap(), want, "{text}");
        }
        for bad in ["", "G", "-1", "1.5G", "lots", "99999999999999999999T"] {
            let e = parse_bytes("memory_limit", bad).unwrap_err();
            assert!(e.message.contains("byte count"), "{bad}: {e}");
        }
    }

    #[test]
    fn gpu_needs_a_gpu_backend() {
        let gpu = [("ep.mlxexecutionprovider.device", "gpu")];
        assert!(EpOptions::from_config(gpu, DeviceKind::Cpu, false).is_err());
        assert_eq!(
            EpOptions::from_config(gpu, DeviceKind::Cpu, true)
                .unwrap()
                .device,
            DeviceKind::Gpu
        );
    }
}
