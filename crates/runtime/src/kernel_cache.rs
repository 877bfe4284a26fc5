//! Where MLX's CUDA backend keeps the kernels it compiles at run time.
//!
//! MLX compiles its CUDA kernels with NVRTC the first time a process needs them (about 110 s
//! for a model's worth on an H200) and reads them back from `MLX_PTX_CACHE_DIR` when that
//! folder holds them. MLX reads the variable once, at its first kernel compile, so the choice
//! is made once per process, before the first GPU run:
//!
//! 1. `MLX_PTX_CACHE_DIR` set by the user wins (MLX's own switch);
//! 2. else the EP option `kernel_cache_dir` of the first session that gives one;
//! 3. else `ORTMLX_KERNEL_CACHE_DIR`;
//! 4. else `$XDG_CACHE_HOME/onnxruntime-mlx-ep/mlx-<version>/ptx` (`~/.cache/...` without
//!    `XDG_CACHE_HOME`).
//!
//! `off` (as option or variable value) turns the cache off: MLX then compiles in every process.

use std::path::PathBuf;
use std::sync::OnceLock;

/// MLX's variable for its kernel cache folder.
pub const MLX_VARIABLE: &str = "MLX_PTX_CACHE_DIR";
/// The EP's variable for the kernel cache folder (or `off`).
pub const VARIABLE: &str = "ORTMLX_KERNEL_CACHE_DIR";

/// The kernel cache this process uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KernelCache {
    /// Kernels are kept in this folder across processes.
    Folder(PathBuf),
    /// No cache: every process compiles its kernels.
    Off,
}

impl std::fmt::Display for KernelCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KernelCache::Folder(p) => write!(f, "{}", p.display()),
            KernelCache::Off => f.write_str("off"),
        }
    }
}

/// Where the choice came from, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The user's `MLX_PTX_CACHE_DIR`.
    MlxVariable,
    /// The EP option `kernel_cache_dir`.
    Option,
    /// `ORTMLX_KERNEL_CACHE_DIR`.
    Variable,
    /// The default under the user's cache folder.
    Default,
}

fn parse(value: &str) -> KernelCache {
    let value = value.trim();
    if value.eq_ignore_ascii_case("off") {
        KernelCache::Off
    } else {
        KernelCache::Folder(PathBuf::from(value))
    }
}

/// The default folder: under the user's cache folder (`XDG_CACHE_HOME`, else `HOME/.cache`,
/// as the config gives it); `None` without one.
fn default_folder(cache_home: Option<PathBuf>, version: &str) -> Option<PathBuf> {
    let base = cache_home?;
    Some(
        base.join("onnxruntime-mlx-ep")
            .join(format!("mlx-{version}"))
            .join("ptx"),
    )
}

/// Decides the kernel cache from the user's variables, the EP option and the MLX version
/// (pure; [`configure`] applies it).
pub fn choose(
    mlx_variable: Option<&str>,
    option: Option<&str>,
    variable: Option<&str>,
    default: Option<PathBuf>,
) -> (KernelCache, Source) {
    if let Some(v) = mlx_variable {
        let cache = if v.is_empty() {
            KernelCache::Off
        } else {
            KernelCache::Folder(PathBuf::from(v))
        };
        return (cache, Source::MlxVariable);
    }
    if let Some(v) = option.filter(|v| !v.trim().is_empty()) {
        return (parse(v), Source::Option);
    }
    if let Some(v) = variable.filter(|v| !v.trim().is_empty()) {
        return (parse(v), Source::Variable);
    }
    match default {
        Some(folder) => (KernelCache::Folder(folder), Source::Default),
        None => (KernelCache::Off, Source::Default),
    }
}

/// Fixes the process's kernel cache on the first call (before any GPU work) and returns it;
/// later calls return the first choice (and log when their option asked for another).
pub fn configure(option: Option<&str>) -> &'static KernelCache {
    static CHOSEN: OnceLock<KernelCache> = OnceLock::new();
    let mut fresh = false;
    let chosen = CHOSEN.get_or_init(|| {
        fresh = true;
        let config = crate::config();
        let mlx_variable = config.mlx_ptx_cache_dir.clone();
        let variable = config.kernel_cache_dir.clone();
        let (cache, source) = choose(
            mlx_variable.as_deref(),
            option,
            variable.as_deref(),
            default_folder(config.cache_home.clone(), &mlx::version()),
        );
        if source != Source::MlxVariable {
            // MLX reads the variable at its first kernel compile; an empty value makes it
            // keep no cache (it can't create a folder named "").
            let value = match &cache {
                KernelCache::Folder(p) => p.clone().into_os_string(),
                KernelCache::Off => Default::default(),
            };
            // SAFETY: set once, when the first EP instance is made and before any GPU run,
            // the same point the EP sets MLX's other variables (see `init`).
            unsafe { std::env::set_var(MLX_VARIABLE, value) };
        }
        log::info!("CUDA kernel cache: {cache} (from {source:?})");
        cache
    });
    if !fresh
        && let Some(asked) = option.filter(|v| !v.trim().is_empty())
        && parse(asked) != *chosen
    {
        log::warn!(
            "kernel_cache_dir='{asked}' ignored: this process already uses the kernel cache {chosen} (MLX reads it once per process)"
        );
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_is_mlx_variable_then_option_then_variable_then_default() {
        let default = Some(PathBuf::from("/c/onnxruntime-mlx-ep/mlx-0.32.2/ptx"));
        let folder = |p: &str| KernelCache::Folder(PathBuf::from(p));
        assert_eq!(
            choose(Some("/m"), Some("/o"), Some("/v"), default.clone()),
            (folder("/m"), Source::MlxVariable)
        );
        assert_eq!(
            choose(Some(""), Some("/o"), None, default.clone()),
            (KernelCache::Off, Source::MlxVariable)
        );
        assert_eq!(
            choose(None, Some("/o"), Some("/v"), default.clone()),
            (folder("/o"), Source::Option)
        );
        assert_eq!(
            choose(None, Some(" OFF "), Some("/v"), default.clone()),
            (KernelCache::Off, Source::Option)
        );
        assert_eq!(
            choose(None, Some(""), Some("/v"), default.clone()),
            (folder("/v"), Source::Variable)
        );
        assert_eq!(
            choose(None, None, Some("off"), default.clone()),
            (KernelCache::Off, Source::Variable)
        );
        assert_eq!(
            choose(None, None, None, default.clone()),
            (
                folder("/c/onnxruntime-mlx-ep/mlx-0.32.2/ptx"),
                Source::Default
            )
        );
        assert_eq!(
            choose(None, None, None, None),
            (KernelCache::Off, Source::Default)
        );
    }

    #[test]
    fn the_default_lives_under_the_users_cache_folder() {
        let folder = default_folder(Some(PathBuf::from("cache-home")), "0.32.2").unwrap();
        assert!(
            folder.ends_with("onnxruntime-mlx-ep/mlx-0.32.2/ptx"),
            "{folder:?}"
        );
        assert_eq!(default_folder(None, "0.32.2"), None);
    }
}
