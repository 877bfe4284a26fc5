"""The conformance runner (`tests/conformance/run.py`, `cargo xtask conformance`) itself: a
worker that crashes or hangs is recorded against its case and replaced, the run goes on, and
the manifest check reports regressions and unrecorded improvements."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import HAS_ASSIGNMENT_INFO, LIBRARY_VAR

# the runner reads placement from ORT's graph assignment info (ORT >= 1.24)
pytestmark = pytest.mark.skipif(not HAS_ASSIGNMENT_INFO, reason="the conformance runner needs ONNX Runtime >= 1.24")

RUNNER = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conformance", "run.py")

sys.path.insert(0, os.path.dirname(RUNNER))
import run as runner  # noqa: E402


def run_runner(tmp_path, *args, env=None):
    library = os.environ.get(LIBRARY_VAR)
    if not library:
        pytest.skip(f"{LIBRARY_VAR} is not set")
    cmd = [sys.executable, RUNNER, "--library", library, "--out", str(tmp_path / "out"), "--manifest", str(tmp_path / "manifest.tsv"), "--docs", str(tmp_path / "docs.md"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=300)
    report = tmp_path / "out" / "report.json"
    data = json.loads(report.read_text()) if report.exists() else None
    return proc, data


def test_crash_and_hang_are_isolated(tmp_path):
    proc, data = run_runner(
        tmp_path, "--filter", "test_acos", "--timeout", "5", "--jobs", "2",
        env={"ORTMLX_CONFORMANCE_FAULT": "crash:test_acos,hang:test_acosh_example"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = {c["case"]: c for c in data["cases"]}
    assert set(cases) == {"test_acos", "test_acos_example", "test_acosh", "test_acosh_example"}
    assert cases["test_acos"]["bucket"] == "crash" and cases["test_acos"]["crashed"]
    assert "signal" in cases["test_acos"]["message"]
    assert cases["test_acosh_example"]["bucket"] == "crash" and cases["test_acosh_example"]["timed_out"]
    # the other cases ran on replacement workers
    assert cases["test_acos_example"]["bucket"] == "pass"
    assert cases["test_acosh"]["bucket"] == "pass"
    last = proc.stdout.strip().splitlines()[-1]
    assert last == "conformance: 2 passed on MLX, 0 failed, 2 crashed, 0 not on MLX, of 4", last


def test_a_crash_of_ort_itself_is_told_apart(tmp_path):
    """A crash on ORT's CPU EP alone is noted and the case still runs with the MLX EP."""
    proc, data = run_runner(tmp_path, "--filter", "test_abs", "--jobs", "1", env={"ORTMLX_CONFORMANCE_FAULT": "cpu-crash:test_abs"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (case,) = data["cases"]
    assert case["cpu"]["status"] == "crashed"
    assert case["bucket"] == "pass"


def test_manifest_check_reports_regressions_and_improvements(tmp_path):
    proc, _ = run_runner(tmp_path, "--filter", "test_abs", "--update-manifest")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = tmp_path / "manifest.tsv"
    text = manifest.read_text()
    assert "test_abs\tpass\tok\t" in text
    proc, _ = run_runner(tmp_path, "--filter", "test_abs", "--check")
    assert proc.returncode == 0 and "all 1 case(s) as recorded" in proc.stdout, proc.stdout
    # a case recorded as not on MLX that now passes is an unrecorded improvement
    manifest.write_text(text.replace("test_abs\tpass\tok\t", "test_abs\tcpu\tok\tdeclined once"))
    proc, _ = run_runner(tmp_path, "--filter", "test_abs", "--check")
    assert proc.returncode == 1 and "test_abs: improvement, not recorded: cpu -> pass" in proc.stdout, proc.stdout
    # and a crash where the manifest says pass is a regression
    manifest.write_text(text)
    proc, _ = run_runner(tmp_path, "--filter", "test_abs", "--check", env={"ORTMLX_CONFORMANCE_FAULT": "crash:test_abs"})
    assert proc.returncode == 1 and "test_abs: REGRESSION: pass -> crash" in proc.stdout, proc.stdout


def test_outputs_compare_as_onnx_does():
    import numpy as np

    ok, _, ab, rel = runner._compare(np.float32([1.0, 2.0]), np.float32([1.0005, 2.0]), 1e-3, 1e-7)
    assert ok and ab == pytest.approx(5e-4, rel=1e-3)
    ok, msg, _, _ = runner._compare(np.float32([1.0]), np.float32([1.01]), 1e-3, 1e-7)
    assert not ok and "1 of 1 elements differ" in msg
    ok, msg, _, _ = runner._compare(np.float32([1.0]), np.float64([1.0]), 1e-3, 1e-7)
    assert not ok and "dtype" in msg
    ok, _, _, _ = runner._compare(np.float32([np.nan, 1.0]), np.float32([np.nan, 1.0]), 1e-3, 1e-7)
    assert ok
    ok, msg, _, _ = runner._compare([np.int64([1])], [np.int64([1]), np.int64([2])], 1e-3, 1e-7)
    assert not ok and "elements" in msg


def test_packed_types_round_trip_through_ort_values():
    import ml_dtypes
    import numpy as np
    import onnxruntime as ort

    for dtype in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.float8_e4m3fn, ml_dtypes.bfloat16):
        lo = 0 if dtype is ml_dtypes.uint4 else -8
        values = np.arange(lo, lo + 11, dtype=np.float32).clip(lo, 7).astype(dtype).reshape(1, 11)
        value, _keep = runner._to_ort_value(ort, values)
        back = runner._from_ort_value(value)
        assert back.dtype == values.dtype and back.shape == values.shape
        np.testing.assert_array_equal(back.astype(np.float32), values.astype(np.float32))
