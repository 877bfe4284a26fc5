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
        "on|off|auto: run plans as compiled MLX closures (auto: on for the GPU, off for the CPU)",
    ),
    (
        "share_initializers",
        "on|off: share identical initializers across sessions (default on)",
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
        };
        for (key, value) in entries {
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
        let e = EpOptions::from_config(
            [("ep.mlxexecutionprovider.fast", "1")],
            DeviceKind::Cpu,
            false,
        )
        .unwrap_err();
        assert!(e.message.contains("unknown option 'fast'"), "{e}");
        assert!(e.message.contains("device"), "{e}");
        let e = EpOptions::from_config(
            [("ep.mlxexecutionprovider.device", "tpu")],
            DeviceKind::Cpu,
            false,
        )
        .unwrap_err();
        assert!(e.message.contains("tpu"), "{e}");
    }

    #[test]
    fn reads_compile_and_sharing_switches() {
        let o = EpOptions::from_config([], DeviceKind::Cpu, false).unwrap();
        assert_eq!((o.compile, o.share_initializers), (None, true));
        let o = EpOptions::from_config(
            [
                ("ep.mlxexecutionprovider.compile", "ON"),
                ("ep.mlxexecutionprovider.share_initializers", "0"),
            ],
            DeviceKind::Cpu,
            false,
        )
        .unwrap();
        assert_eq!((o.compile, o.share_initializers), (Some(true), false));
        for (value, want) in [("off", Some(false)), ("auto", None), ("yes", Some(true))] {
            let o = EpOptions::from_config(
                [("ep.mlxexecutionprovider.compile", value)],
                DeviceKind::Cpu,
                false,
            )
            .unwrap();
            assert_eq!(o.compile, want, "{value}");
        }
    }

    #[test]
    fn invalid_switch_values_name_the_valid_ones() {
        let e = EpOptions::from_config(
            [("ep.mlxexecutionprovider.compile", "maybe")],
            DeviceKind::Cpu,
            false,
        )
        .unwrap_err();
        assert!(e.message.contains("compile='maybe'"), "{e}");
        assert!(e.message.contains("on or off, or auto"), "{e}");
        let e = EpOptions::from_config(
            [("ep.mlxexecutionprovider.share_initializers", "sometimes")],
            DeviceKind::Cpu,
            false,
        )
        .unwrap_err();
        assert!(e.message.contains("expected on or off"), "{e}");
        let e = EpOptions::from_config(
            [("ep.mlxexecutionprovider.fast", "1")],
            DeviceKind::Cpu,
            false,
        )
        .unwrap_err();
        for key in ["device", "compile", "share_initializers"] {
            assert!(e.message.contains(key), "{e}");
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
