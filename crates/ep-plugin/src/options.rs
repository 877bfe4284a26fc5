//! EP options: ORT hands them over as session config entries `ep.mlxexecutionprovider.<key>`.

use runtime::DeviceKind;

use crate::error::EpError;

/// The EP's name, as the factory and every EP report it.
pub const EP_NAME: &str = "MLXExecutionProvider";

/// Prefix of the session config entries that carry this EP's options (ORT lower-cases the EP
/// name).
pub const OPTION_PREFIX: &str = "ep.mlxexecutionprovider.";

/// Option keys this EP understands, with a description for error messages.
pub const VALID_KEYS: &[(&str, &str)] = &[("device", "cpu|gpu: where MLX runs the fused nodes")];

/// Options of one EP instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpOptions {
    /// Device the fused nodes run on.
    pub device: DeviceKind,
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
