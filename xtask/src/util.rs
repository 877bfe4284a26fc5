//! Small helpers shared by the subcommands: paths, banners and running child processes.

use std::env;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// The workspace root (the folder above `xtask/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// The cargo that runs us (`$CARGO`), so that `cargo xtask` and its children share a toolchain.
pub fn cargo() -> Command {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root());
    cmd
}

/// Cargo's target folder: `$CARGO_TARGET_DIR` or `<workspace>/target`.
pub fn target_dir() -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                workspace_root().join(dir)
            }
        }
        None => workspace_root().join("target"),
    }
}

/// Cache root outside the repository: `$ORTMLX_CACHE_DIR`, `$XDG_CACHE_HOME/ortmlx` or
/// `~/.cache/ortmlx` (the same rule as the mlx-sys build script).
pub fn cache_root() -> Result<PathBuf> {
    if let Some(dir) = non_empty_var("ORTMLX_CACHE_DIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = non_empty_var("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(dir).join("ortmlx"));
    }
    match non_empty_var("HOME") {
        Some(home) => Ok(PathBuf::from(home).join(".cache").join("ortmlx")),
        None => bail!(
            "neither ORTMLX_CACHE_DIR, XDG_CACHE_HOME nor HOME is set: set ORTMLX_CACHE_DIR to a cache folder"
        ),
    }
}

/// An environment variable, treating "set but empty" as unset.
pub fn non_empty_var(name: &str) -> Option<String> {
    env::var(name).ok().filter(|v| !v.is_empty())
}

/// Prints a banner for one step so that long logs (CI) are easy to scan.
pub fn banner(text: &str) {
    println!("\n==> {text}");
}

/// Prints a command the way a shell would show it.
pub fn show(cmd: &Command) -> String {
    let mut line = String::new();
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            line.push_str(&format!(
                "{}={} ",
                key.to_string_lossy(),
                value.to_string_lossy()
            ));
        }
    }
    line.push_str(&cmd.get_program().to_string_lossy());
    for arg in cmd.get_args() {
        let arg = arg.to_string_lossy();
        line.push(' ');
        if arg.contains('\n') {
            line.push_str("'<script>'");
        } else if arg.is_empty() || arg.contains([' ', '"', '$']) {
            line.push_str(&format!("'{arg}'"));
        } else {
            line.push_str(&arg);
        }
    }
    line
}

/// `python -m pip <subcommand> --no-input --disable-pip-version-check`, for the caller's arguments.
pub fn pip(python: impl AsRef<OsStr>, subcommand: &str) -> Command {
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "pip",
        subcommand,
        "--no-input",
        "--disable-pip-version-check",
    ]);
    cmd
}

/// Runs a command with inherited stdout/stderr and no stdin; an unsuccessful exit is an error.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = status(cmd)?;
    if status {
        Ok(())
    } else {
        bail!("command failed: {}", show(cmd))
    }
}

/// Runs a command (echoed first) and tells whether it succeeded.
pub fn status(cmd: &mut Command) -> Result<bool> {
    Ok(exit_status(cmd)?.success())
}

/// Runs a command (echoed first) and returns its exit code (`None`: killed by a signal).
pub fn exit_code(cmd: &mut Command) -> Result<Option<i32>> {
    Ok(exit_status(cmd)?.code())
}

/// Runs a command (echoed first) with no stdin and returns how it ended.
fn exit_status(cmd: &mut Command) -> Result<std::process::ExitStatus> {
    println!("$ {}", show(cmd));
    cmd.stdin(Stdio::null())
        .status()
        .with_context(|| format!("could not start {}", cmd.get_program().to_string_lossy()))
}

/// Runs a command quietly and returns its stdout (trimmed) when it succeeded.
pub fn output<S: AsRef<OsStr>>(program: S, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether this process runs as root (uid 0).
pub fn is_root() -> bool {
    output("id", &["-u"]).is_some_and(|uid| uid == "0")
}
