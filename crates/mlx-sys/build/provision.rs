//! Downloading, verifying, unpacking and building the pinned native parts, in a cache.

use std::env;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::pins::{self, Wheel};

/// Stops the build with one clear message.
pub fn fail(msg: &str) -> ! {
    eprintln!("\nortmlx-sys: {msg}\n");
    panic!("ortmlx-sys: {msg}");
}

/// The built mlx-c: where its headers and library are, and where libmlx lives.
pub struct MlxC {
    /// Folder holding `mlx/c/*.h`.
    pub include_dir: PathBuf,
    /// Folder holding `libmlxc.so`.
    pub lib_dir: PathBuf,
    /// Folder holding `libmlx.so`.
    pub mlx_lib_dir: PathBuf,
}

/// One cache folder per pin set and backend.
pub struct Cache {
    root: PathBuf,
}

fn cache_base() -> PathBuf {
    if let Some(dir) = env::var_os("ORTMLX_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("ortmlx");
    }
    match env::var_os("HOME") {
        Some(home) => PathBuf::from(home).join(".cache/ortmlx"),
        None => fail("set ORTMLX_CACHE_DIR (or HOME) to a folder for the MLX build cache"),
    }
}

fn sha256_file(path: &Path) -> String {
    let mut file =
        fs::File::open(path).unwrap_or_else(|e| fail(&format!("opening {}: {e}", path.display())));
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .unwrap_or_else(|e| fail(&format!("reading {}: {e}", path.display())));
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn verify(path: &Path, expected: &str) {
    let actual = sha256_file(path);
    if actual != expected {
        let _ = fs::remove_file(path);
        fail(&format!(
            "{} has SHA-256 {actual}, expected {expected}; the download was removed, build again",
            path.display()
        ));
    }
}

fn run(cmd: &mut Command, what: &str, hint: &str) {
    let status = cmd.status().unwrap_or_else(|e| {
        fail(&format!(
            "{what}: could not start {:?} ({e}). {hint}",
            cmd.get_program()
        ))
    });
    if !status.success() {
        fail(&format!("{what} failed ({status}). {hint}"));
    }
}

fn python() -> String {
    env::var("PYTHON").unwrap_or_else(|_| "python3".to_string())
}

impl Cache {
    /// The cache folder for `wheel`'s backend, created if needed.
    pub fn open(wheel: &Wheel) -> Cache {
        let root = cache_base().join(format!(
            "mlx-{}-mlxc-{}-{}",
            pins::MLX_VERSION,
            pins::MLX_C_VERSION,
            wheel.backend
        ));
        fs::create_dir_all(&root)
            .unwrap_or_else(|e| fail(&format!("creating {}: {e}", root.display())));
        Cache { root }
    }

    /// Holds an exclusive lock on the cache until dropped (parallel builds share it).
    pub fn lock(&self) -> fs::File {
        let file = fs::File::create(self.root.join(".lock"))
            .unwrap_or_else(|e| fail(&format!("creating the cache lock: {e}")));
        file.lock()
            .unwrap_or_else(|e| fail(&format!("locking the cache: {e}")));
        file
    }

    /// The unpacked MLX SDK from the pinned wheel; returns its CMake config folder.
    pub fn mlx_sdk(&self, wheel: &Wheel) -> PathBuf {
        let sdk = self.root.join("sdk");
        let cmake_dir = sdk.join("mlx/share/cmake/MLX");
        if sdk.join(".complete").is_file() {
            return cmake_dir;
        }
        let downloads = self.root.join("downloads");
        fs::create_dir_all(&downloads)
            .unwrap_or_else(|e| fail(&format!("creating downloads: {e}")));
        let file = downloads.join(wheel.file);
        if !file.is_file() {
            let requirement = wheel.requirement();
            let mut pip = Command::new(python());
            pip.arg("-m").args(wheel.pip_download_args(&downloads));
            run(
                &mut pip,
                &format!("downloading {requirement} with pip"),
                "It needs python3 with pip and access to PyPI, or set ORTMLX_MLX_DIR to an MLX install.",
            );
        }
        verify(&file, wheel.sha256);

        let _ = fs::remove_dir_all(&sdk);
        let mut unzip = Command::new(python());
        unzip.args(["-m", "zipfile", "-e"]).arg(&file).arg(&sdk);
        run(&mut unzip, "unpacking the MLX wheel", "It needs python3.");
        if wheel.backend != "metal" {
            use_optimized_blas(&sdk);
        }
        fs::write(sdk.join(".complete"), wheel.sha256)
            .unwrap_or_else(|e| fail(&format!("marking the SDK: {e}")));
        cmake_dir
    }

    /// mlx-c built against the MLX whose CMake config is in `mlx_cmake_dir`.
    pub fn mlx_c(&self, mlx_cmake_dir: &Path) -> MlxC {
        let prefix = mlx_cmake_dir.join("../../..");
        let mlx_lib_dir = fs::canonicalize(prefix.join("lib")).unwrap_or_else(|e| {
            fail(&format!(
                "MLX lib folder next to {}: {e}",
                mlx_cmake_dir.display()
            ))
        });
        let install = self.root.join("mlxc");
        let marker = install.join(".complete");
        let stamp = format!("{}\n{}", pins::MLX_C_VERSION, mlx_cmake_dir.display());
        let result = MlxC {
            include_dir: install.join("include"),
            lib_dir: install.join("lib"),
            mlx_lib_dir,
        };
        if fs::read_to_string(&marker).ok().as_deref() == Some(stamp.as_str()) {
            return result;
        }
        let source = self.mlx_c_source();
        let _ = fs::remove_dir_all(&install);
        let mut config = cmake::Config::new(&source);
        config
            .out_dir(&install)
            .profile("Release")
            .define("MLX_C_USE_SYSTEM_MLX", "ON")
            .define("MLX_DIR", mlx_cmake_dir)
            .define("MLX_C_BUILD_EXAMPLES", "OFF")
            .define("BUILD_SHARED_LIBS", "ON")
            .define("CMAKE_INSTALL_LIBDIR", "lib")
            .define("CMAKE_INSTALL_RPATH_USE_LINK_PATH", "ON");
        if env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
            config.define("CMAKE_INSTALL_RPATH", "@loader_path");
        }
        if Command::new("cmake").arg("--version").output().is_err() {
            fail("cmake is missing: install Debian's `cmake` (or `pip install cmake`)");
        }
        config.build();
        fs::write(&marker, stamp).unwrap_or_else(|e| fail(&format!("marking mlx-c: {e}")));
        result
    }

    /// mlx-c's source, from the pinned registry crate that vendors it, patched for gcc 12.
    fn mlx_c_source(&self) -> PathBuf {
        let dir = self.root.join("src");
        let source = dir.join(format!(
            "{}-{}/src/mlx-c",
            pins::MLX_C_CARRIER_CRATE,
            pins::MLX_C_CARRIER_VERSION
        ));
        if source.join("CMakeLists.txt").is_file() {
            return source;
        }
        let archive = fetch_crate_archive(&self.root.join("fetch"));
        verify(&archive, pins::MLX_C_CARRIER_SHA256);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir)
            .unwrap_or_else(|e| fail(&format!("creating {}: {e}", dir.display())));
        let mut tar = Command::new("tar");
        tar.arg("-xzf").arg(&archive).arg("-C").arg(&dir);
        run(&mut tar, "unpacking mlx-c's source", "It needs tar.");
        patch_std_format(&source.join("mlx/c/private/io.h"));
        source
    }
}

/// Downloads the carrier crate with cargo itself (so the user's registry settings apply).
fn fetch_crate_archive(work: &Path) -> PathBuf {
    fs::create_dir_all(work.join("src"))
        .unwrap_or_else(|e| fail(&format!("creating {}: {e}", work.display())));
    fs::write(
        work.join("Cargo.toml"),
        format!(
            "[package]\nname = \"ortmlx-fetch-mlx-c\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
             [dependencies]\n{} = \"={}\"\n[workspace]\n",
            pins::MLX_C_CARRIER_CRATE,
            pins::MLX_C_CARRIER_VERSION
        ),
    )
    .unwrap_or_else(|e| fail(&format!("writing the fetch manifest: {e}")));
    fs::write(work.join("src/lib.rs"), "")
        .unwrap_or_else(|e| fail(&format!("writing the fetch crate: {e}")));
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let mut fetch = Command::new(cargo);
    fetch
        .arg("fetch")
        .arg("--manifest-path")
        .arg(work.join("Cargo.toml"));
    run(
        &mut fetch,
        "fetching mlx-c's source crate",
        "It needs access to the crates.io registry.",
    );
    let cargo_home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| fail("neither CARGO_HOME nor HOME is set"));
    let name = format!(
        "{}-{}.crate",
        pins::MLX_C_CARRIER_CRATE,
        pins::MLX_C_CARRIER_VERSION
    );
    fs::read_dir(cargo_home.join("registry/cache"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|registry| registry.path().join(&name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            fail(&format!(
                "cargo fetch left no {name} in {}",
                cargo_home.display()
            ))
        })
}

/// libstdc++ 12 has no `std::format`; mlx-c's io.h uses it for error texts only.
fn patch_std_format(io_h: &Path) {
    let text = fs::read_to_string(io_h)
        .unwrap_or_else(|e| fail(&format!("reading {}: {e}", io_h.display())));
    if !text.contains("std::format(") {
        return;
    }
    let shim = r#"
#include <sstream>
#include <string>
#include <utility>
namespace ortmlx_compat {
inline void format_into(std::ostringstream& out, const char* f) { out << f; }
template <typename T, typename... Rest>
void format_into(std::ostringstream& out, const char* f, T&& value, Rest&&... rest) {
  for (; *f; ++f) {
    if (f[0] == '{' && f[1] == '}') {
      out << value;
      format_into(out, f + 2, std::forward<Rest>(rest)...);
      return;
    }
    out << *f;
  }
}
template <typename... Args>
std::string format(const char* f, Args&&... args) {
  std::ostringstream out;
  format_into(out, f, std::forward<Args>(args)...);
  return out.str();
}
} // namespace ortmlx_compat
"#;
    let patched = text
        .replacen(
            "#include <iostream>",
            &format!("#include <iostream>{shim}"),
            1,
        )
        .replace("std::format(", "ortmlx_compat::format(");
    fs::write(io_h, patched).unwrap_or_else(|e| fail(&format!("patching {}: {e}", io_h.display())));
}

/// Points the wheel's bundled reference BLAS/LAPACK at the system's OpenBLAS.
///
/// The wheels link a netlib BLAS about 35x slower than OpenBLAS for a float32 matmul;
/// libmlx finds its BLAS through its rpath, so replacing those two files is enough.
fn use_optimized_blas(sdk: &Path) {
    let bundled: Vec<PathBuf> = fs::read_dir(sdk)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".libs"))
        .flat_map(|libs| fs::read_dir(libs.path()).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.starts_with("libblas-") || name.starts_with("liblapack-")
        })
        .collect();
    if bundled.is_empty() {
        return;
    }
    let Some(openblas) = find_openblas() else {
        if env::var_os("ORTMLX_ALLOW_REFERENCE_BLAS").is_some() {
            println!("cargo:warning=OpenBLAS not found: MLX keeps the wheel's slow reference BLAS");
            return;
        }
        fail(
            "no OpenBLAS found for MLX's CPU matmul: install Debian's `libopenblas0-pthread` \
             (the wheel's reference BLAS is ~35x slower), or set ORTMLX_ALLOW_REFERENCE_BLAS=1",
        );
    };
    for lib in bundled {
        let _ = fs::remove_file(&lib);
        #[cfg(unix)]
        std::os::unix::fs::symlink(&openblas, &lib)
            .unwrap_or_else(|e| fail(&format!("linking {} to OpenBLAS: {e}", lib.display())));
    }
}

fn find_openblas() -> Option<PathBuf> {
    if let Ok(out) = Command::new("ldconfig").arg("-p").output() {
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with("libopenblas.so.0 ")
                && line.contains("x86-64")
                && let Some(path) = line.split("=> ").nth(1)
            {
                return Some(PathBuf::from(path.trim()));
            }
        }
    }
    [
        "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
        "/usr/lib64/libopenblas.so.0",
        "/usr/lib/libopenblas.so.0",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}
