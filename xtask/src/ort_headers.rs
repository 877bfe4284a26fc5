//! ONNX Runtime's C API headers, for compiling the C++ usage example
//! (`docs/examples/cpp/mlx_ep_example.cpp`) in the tests.
//!
//! The onnxruntime wheels ship no headers; Debian's `libonnxruntime-dev` 1.23.2 does. Debian 12
//! has no such package in its suites, but the file stays in the Debian archive's pool while a
//! suite (sid) carries it, so it is fetched the way the C/C++ recipe of `docs/usage.md` does:
//! from the pool of the Debian mirror this system's apt is configured with, by its pinned
//! name, and checked against its pinned SHA-256. Where apt itself knows that version (sid),
//! `apt-get download` is the fallback. The `.deb` is kept in the cache (the recipe's check in
//! the wheel matrix starts from it, so it runs offline after the first time) and its headers
//! are unpacked next to it once. Where it can't be had, the C++ tests say so and are skipped.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::util::{self, banner};

/// The variable the Python test reads the include folder from.
pub const INCLUDE_VAR: &str = "ORTMLX_ORT_INCLUDE";

/// The pinned package file; `docs/usage.md`'s recipe names the same file and digest.
pub const DEB_FILE: &str = "libonnxruntime-dev_1.23.2+dfsg-6.1_amd64.deb";
/// SHA-256 of [`DEB_FILE`].
pub const DEB_SHA256: &str = "4630a94adb36dc056feb124e51c6e952e2cab5188bc093a25bee8a7e1ac5196d";
/// The same file by package name and version, for `apt-get download`.
const DEB_PACKAGE: &str = "libonnxruntime-dev=1.23.2+dfsg-6.1";
/// Where the file lies below a Debian mirror's root.
const POOL_PATH: &str = "pool/main/o/onnxruntime";
const CACHE_DIR: &str = "ort-headers-1.23.2";

/// Unpacks the headers of the .deb (an `ar` archive holding `data.tar.xz`) with only the
/// Python standard library, so no Debian tool is needed once the file is there.
const UNPACK_SCRIPT: &str = r#"
import io, sys, tarfile
path, dest = sys.argv[1:3]
data = open(path, "rb").read()
if not data.startswith(b"!<arch>\n"):
    sys.exit("not an ar archive")
pos, payload = 8, None
while pos + 60 <= len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        payload = body
    pos += 60 + size + (size % 2)
if payload is None:
    sys.exit("no data.tar in the package")
with tarfile.open(fileobj=io.BytesIO(payload)) as tar:
    members = [m for m in tar.getmembers() if m.isfile() and m.name.lstrip("./").startswith("usr/include/onnxruntime/")]
    for m in members:
        m.name = m.name.lstrip("./")[len("usr/include/"):]
        tar.extract(m, dest)
print(len(members), "headers")
"#;

fn root() -> Result<PathBuf> {
    Ok(util::cache_root()?.join(CACHE_DIR))
}

/// The cached, verified `.deb` ([`DEB_FILE`]), when there.
pub fn deb_path() -> Option<PathBuf> {
    let path = root().ok()?.join(DEB_FILE);
    path.is_file().then_some(path)
}

/// The unpacked include folder (holding `onnxruntime_c_api.h`), when already in the cache.
pub fn include_dir() -> Option<PathBuf> {
    let dir = root().ok()?.join("include").join("onnxruntime");
    dir.join("onnxruntime_c_api.h").is_file().then_some(dir)
}

/// The root URL of the Debian mirror apt is configured with (ending in `/`), from
/// `apt-get indextargets`; the security archive has no such pool, so it is passed over.
fn apt_mirror() -> Option<String> {
    let out = util::output(
        "apt-get",
        &[
            "indextargets",
            "--format",
            "$(REPO_URI)",
            "Created-By: Packages",
        ],
    )?;
    out.lines()
        .map(str::trim)
        .find(|uri| !uri.is_empty() && !uri.contains("-security"))
        .map(|uri| {
            if uri.ends_with('/') {
                uri.to_string()
            } else {
                format!("{uri}/")
            }
        })
}

/// Fetches [`DEB_FILE`] into `dir`: from the configured mirror's pool with curl, else with
/// `apt-get download` where apt knows the version. Returns the file, unverified.
fn download(dir: &Path) -> Result<PathBuf> {
    let target = dir.join(DEB_FILE);
    let partial = dir.join(format!("{DEB_FILE}.partial"));
    let mut tried = Vec::new();
    match apt_mirror() {
        Some(mirror) => {
            let url = format!("{mirror}{POOL_PATH}/{DEB_FILE}");
            let fetched = util::status(
                Command::new("curl")
                    .args(["-fsSL", "--retry", "2", "-o"])
                    .arg(&partial)
                    .arg(&url),
            )
            .unwrap_or(false);
            if fetched {
                fs::rename(&partial, &target)?;
                return Ok(target);
            }
            let _ = fs::remove_file(&partial);
            tried.push(format!("curl {url}"));
        }
        None => tried.push("apt-get indextargets (no Debian mirror configured)".to_string()),
    }
    let fetched = Command::new("apt-get")
        .args(["download", DEB_PACKAGE])
        .current_dir(dir)
        .stdin(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if fetched && target.is_file() {
        return Ok(target);
    }
    tried.push(format!("apt-get download {DEB_PACKAGE}"));
    bail!(
        "could not fetch {DEB_FILE}: tried {}",
        tried.join(", then ")
    )
}

/// Provisions the `.deb` and its headers once; `Ok(None)` with a printed reason when they
/// can't be had (no Debian mirror, no network on the first run).
pub fn ensure(python: &Path) -> Result<Option<PathBuf>> {
    if let (Some(_), Some(dir)) = (deb_path(), include_dir()) {
        return Ok(Some(dir));
    }
    banner("setup: ONNX Runtime C API headers (Debian libonnxruntime-dev 1.23.2, once)");
    let root = root()?;
    if root.exists() {
        fs::remove_dir_all(&root).with_context(|| format!("removing {}", root.display()))?;
    }
    fs::create_dir_all(&root)?;
    let deb = match download(&root) {
        Ok(deb) => deb,
        Err(err) => {
            println!("{err:#}: the C++ example and the C/C++ recipe will not be compiled");
            let _ = fs::remove_dir_all(&root);
            return Ok(None);
        }
    };
    let got = crate::mlx_wheel::sha256(&deb)?;
    if got != DEB_SHA256 {
        let _ = fs::remove_dir_all(&root);
        bail!("{DEB_FILE} has SHA-256 {got}, expected {DEB_SHA256}; the download was removed");
    }
    util::run(
        Command::new(python)
            .args(["-c", UNPACK_SCRIPT])
            .arg(&deb)
            .arg(root.join("include")),
    )
    .context("unpacking the headers")?;
    match include_dir() {
        Some(dir) => Ok(Some(dir)),
        None => bail!(
            "{DEB_FILE} unpacked without onnxruntime/onnxruntime_c_api.h into {}",
            root.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recipe users follow and the cache the tests fill fetch the same file.
    #[test]
    fn usage_recipe_pins_the_same_package() {
        let usage = fs::read_to_string(util::workspace_root().join("docs").join("usage.md"))
            .expect("docs/usage.md");
        let marker = usage
            .find("<!-- cpp-recipe")
            .expect("docs/usage.md has a cpp-recipe block");
        let recipe = &usage[marker..];
        let recipe = &recipe[..recipe[3..].find("\n```\n").map_or(recipe.len(), |e| e + 3)];
        assert!(recipe.contains(DEB_FILE), "the recipe names {DEB_FILE}");
        assert!(recipe.contains(DEB_SHA256), "the recipe pins {DEB_SHA256}");
        assert!(
            recipe.contains(POOL_PATH),
            "the recipe fetches from {POOL_PATH}"
        );
    }
}
