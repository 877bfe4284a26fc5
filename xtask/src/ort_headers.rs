//! ONNX Runtime's C API headers, for compiling the C++ usage example
//! (`docs/examples/cpp/mlx_ep_example.cpp`) in the tests.
//!
//! The onnxruntime wheels ship no headers; Debian's `libonnxruntime-dev` 1.23.2 does (in Debian
//! sid; Debian 12 has none). Where apt knows that pinned version, `apt-get download`
//! fetches it, its SHA-256 is checked and its headers are unpacked into the cache once. Where
//! it can't be had (Debian 12 without that suite), the example's test is skipped with that
//! reason; nothing else depends on it.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{Result, bail};

use crate::setup::Venv;
use crate::util::{self, banner};

/// The variable the Python test reads the include folder from.
pub const INCLUDE_VAR: &str = "ORTMLX_ORT_INCLUDE";

const DEB_PACKAGE: &str = "libonnxruntime-dev=1.23.2+dfsg-6.1";
const DEB_SHA256: &str = "4630a94adb36dc056feb124e51c6e952e2cab5188bc093a25bee8a7e1ac5196d";
const CACHE_DIR: &str = "ort-headers-1.23.2";

/// Verifies and unpacks the .deb (an `ar` archive holding `data.tar.xz`) with only the Python
/// standard library.
const UNPACK_SCRIPT: &str = r#"
import hashlib, io, sys, tarfile
path, sha, dest = sys.argv[1:4]
data = open(path, "rb").read()
if hashlib.sha256(data).hexdigest() != sha:
    sys.exit("SHA-256 mismatch for " + path)
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

/// The unpacked include folder (holding `onnxruntime_c_api.h`), when already in the cache.
pub fn include_dir() -> Option<PathBuf> {
    let dir = util::cache_root()
        .ok()?
        .join(CACHE_DIR)
        .join("include")
        .join("onnxruntime");
    dir.join("onnxruntime_c_api.h").is_file().then_some(dir)
}

/// Provisions the headers once; `Ok(None)` with a printed reason when they can't be had.
pub fn ensure(venv: &Venv) -> Result<Option<PathBuf>> {
    if let Some(dir) = include_dir() {
        return Ok(Some(dir));
    }
    banner("setup: ONNX Runtime C API headers (Debian libonnxruntime-dev 1.23.2)");
    let root = util::cache_root()?.join(CACHE_DIR);
    let include = root.join("include");
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    fs::create_dir_all(&include)?;
    let download = root.join("deb");
    fs::create_dir_all(&download)?;
    let fetched = Command::new("apt-get")
        .args(["download", DEB_PACKAGE])
        .current_dir(&download)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    let deb = fs::read_dir(&download)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"));
    let ok = match (fetched, deb) {
        (true, Some(deb)) => util::status(
            Command::new(venv.python())
                .args(["-c", UNPACK_SCRIPT])
                .arg(&deb)
                .arg(DEB_SHA256)
                .arg(&include),
        )?,
        _ => false,
    };
    if !ok {
        println!(
            "apt has no {DEB_PACKAGE} here (Debian 12 does not carry it): the C++ example will not be compiled"
        );
        let _ = fs::remove_dir_all(&root);
        return Ok(None);
    }
    match include_dir() {
        Some(dir) => Ok(Some(dir)),
        None => bail!(
            "{DEB_PACKAGE} unpacked without onnxruntime_c_api.h into {}",
            include.display()
        ),
    }
}
