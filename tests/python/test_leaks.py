"""Leaks and growth: create / run / release cycles of an MLX EP session keep resident memory
flat, and valgrind finds no leak whose allocation stack goes through the EP library.

Both run ``leak_loop.py`` in a fresh process. ``ORTMLX_LEAK_CYCLES`` sets the cycles of the
RSS test (default 1000), ``ORTMLX_VALGRIND_CYCLES`` those of the valgrind run (default 5;
``0`` skips it). The valgrind run is made under ONNX Runtime >= 1.24 only (one ORT is enough
for the plugin's own code, and it takes most of a minute).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import pytest

from conftest import HAS_ASSIGNMENT_INFO, LIBRARY_VAR, mlx_ep_devices, report_line

HERE = os.path.dirname(os.path.abspath(__file__))
LOOP = os.path.join(HERE, "leak_loop.py")
CYCLES = int(os.environ.get("ORTMLX_LEAK_CYCLES", "1000"))
VALGRIND_CYCLES = int(os.environ.get("ORTMLX_VALGRIND_CYCLES", "5"))
#: after this many cycles the allocators and caches have their working sets
WARM_UP = 200
#: the bound on growth after warm-up, bytes per cycle (1000 cycles: 2 MiB)
MAX_SLOPE = 2048


def _library() -> str:
    mlx_ep_devices()
    return os.path.abspath(os.environ[LIBRARY_VAR])


def _slope(samples: list[list[int]]) -> float:
    """Theil-Sen slope of RSS over cycles (the median of the pairwise slopes), bytes per
    cycle: the allocator moves RSS up and down by a MiB now and then, which would swing a
    least-squares fit; a steady leak moves every pair."""
    slopes = sorted((b[1] - a[1]) / (b[0] - a[0]) for i, a in enumerate(samples) for b in samples[i + 1 :] if b[0] != a[0])
    if not slopes:
        return 0.0
    mid = len(slopes) // 2
    return slopes[mid] if len(slopes) % 2 else (slopes[mid - 1] + slopes[mid]) / 2


def test_rss_is_flat_over_session_cycles(request):
    _library()
    every = max(1, CYCLES // 40)
    proc = subprocess.run([sys.executable, LOOP, str(CYCLES), str(every)], capture_output=True, text=True, cwd=HERE, timeout=600)
    assert proc.returncode == 0, f"the loop failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "error" not in result, result["error"]
    samples = [s for s in result["samples"] if s[0] >= min(WARM_UP, CYCLES // 2)]
    assert len(samples) >= 3, result
    slope = _slope(samples)
    growth = samples[-1][1] - samples[0][1]
    report_line(
        request,
        f"RSS over {CYCLES} create/run/release cycles: {result['samples'][0][1] / 2**20:.1f} MiB at cycle {result['samples'][0][0]}, "
        f"{samples[-1][1] / 2**20:.1f} MiB at the end; slope after warm-up {slope:+.1f} B/cycle (bound {MAX_SLOPE})",
    )
    assert slope < MAX_SLOPE, f"RSS grows by {slope:.0f} bytes per cycle after warm-up ({growth} bytes in {samples[-1][0] - samples[0][0]} cycles): {result['samples']}"
    if all(len(s) > 2 for s in samples):
        gpu = [[s[0], s[2]] for s in samples]
        gpu_slope = _slope(gpu)
        report_line(request, f"GPU memory over the cycles: {gpu[0][1] / 2**20:.0f} MiB after warm-up, {gpu[-1][1] / 2**20:.0f} MiB at the end; slope {gpu_slope:+.1f} B/cycle")
        assert gpu_slope < MAX_SLOPE, f"GPU memory grows by {gpu_slope:.0f} bytes per cycle after warm-up: {gpu}"


def _frames(error: ET.Element) -> list[tuple[str, str]]:
    stack = error.find("stack")
    if stack is None:
        return []
    return [(f.findtext("obj") or "", f.findtext("fn") or "?") for f in stack.findall("frame")]


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
@pytest.mark.skipif(VALGRIND_CYCLES <= 0, reason="ORTMLX_VALGRIND_CYCLES=0")
@pytest.mark.skipif(not HAS_ASSIGNMENT_INFO, reason="the valgrind run is made under the newest ORT only")
def test_valgrind_finds_no_leak_from_the_plugin(request):
    """memcheck's definite and indirect leaks whose allocation stack has a frame in the EP
    library (Python's, ORT's and MLX's own are not the plugin's)."""
    library = _library()
    name = os.path.basename(library)
    with tempfile.TemporaryDirectory(prefix="ortmlx-valgrind-") as tmp:
        xml_path = os.path.join(tmp, "memcheck.xml")
        env = dict(os.environ, PYTHONMALLOC="malloc")
        cmd = [
            "valgrind",
            "--tool=memcheck",
            "--leak-check=full",
            "--show-leak-kinds=definite,indirect",
            "--num-callers=50",
            "--xml=yes",
            f"--xml-file={xml_path}",
            sys.executable,
            LOOP,
            str(VALGRIND_CYCLES),
            "1",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, env=env, timeout=900)
        assert proc.returncode == 0, f"the loop failed under valgrind ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert "error" not in result, result["error"]
        root = ET.parse(xml_path).getroot()
    ours: dict[str, list] = {}
    total: dict[str, int] = {}
    for error in root.findall("error"):
        kind = error.findtext("kind") or "?"
        total[kind] = total.get(kind, 0) + 1
        frames = _frames(error)
        if any(name in obj for obj, _ in frames):
            text = error.findtext("xwhat/text") or error.findtext("what") or kind
            ours.setdefault(kind, []).append((text, [fn for _, fn in frames[:16]]))
    leaks = ours.get("Leak_DefinitelyLost", []) + ours.get("Leak_IndirectlyLost", [])
    memory_errors = {k: v for k, v in ours.items() if not k.startswith("Leak_")}
    report_line(
        request,
        f"valgrind memcheck, {VALGRIND_CYCLES} cycles: {sum(total.values())} records in the process ({total}); "
        f"from the plugin: {len(leaks)} definite/indirect leaks, {sum(len(v) for v in memory_errors.values())} memory errors",
    )
    detail = "\n".join(f"{what}\n    " + "\n    ".join(stack) for what, stack in leaks[:5])
    assert not leaks, f"{len(leaks)} leak(s) from the plugin:\n{detail}"
    detail = "\n".join(f"{k}: {what}\n    " + "\n    ".join(stack) for k, v in memory_errors.items() for what, stack in v[:3])
    assert not memory_errors, f"memory errors in the plugin:\n{detail}"
