"""The hostile-model suite: malformed, inconsistent, huge and odd models and feeds
(``hostile_cases.py``) must each end in a correct result or a clear error, never in a crash,
a hang or a wrong answer, and a valid session must still work afterwards.

The cases run in worker subprocesses (``hostile_worker.py``), many per process for speed. A
case that kills its worker (a signal, an abort, an exit) or hangs is reported as that case's
failure with the worker's last stderr lines, and a new worker takes the remaining cases.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import onnxruntime as ort
import pytest

from conftest import LIBRARY_VAR, mlx_ep_devices, report_line
from hostile_cases import CASES

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "hostile_worker.py")
#: seconds one case may take before it counts as a hang
CASE_TIMEOUT = float(os.environ.get("ORTMLX_HOSTILE_TIMEOUT", "120"))


def _describe_exit(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with status {rc}"


def _tail(path: str, n: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def run_cases(names: list[str]) -> dict[str, tuple[bool, str]]:
    """Runs the named cases in worker processes; returns name -> (passed, detail)."""
    results: dict[str, tuple[bool, str]] = {}
    remaining = list(names)
    env = dict(os.environ)
    env.setdefault("ORTMLX_LOG", "error")
    with tempfile.TemporaryDirectory(prefix="ortmlx-hostile-") as tmp:
        round_ = 0
        while remaining:
            round_ += 1
            out = os.path.join(tmp, f"results{round_}.jsonl")
            err = os.path.join(tmp, f"stderr{round_}.txt")
            with open(err, "wb") as err_file:
                proc = subprocess.Popen([sys.executable, WORKER, out, *remaining], stdout=subprocess.DEVNULL, stderr=err_file, env=env, cwd=HERE)
                current, started, seen = None, time.monotonic(), 0
                hung = False
                while proc.poll() is None:
                    time.sleep(0.05)
                    records = _read(out)
                    if len(records) != seen:
                        seen = len(records)
                        last = records[-1]
                        current = last["case"] if last["event"] == "start" else None
                        started = time.monotonic()
                    if current is not None and time.monotonic() - started > CASE_TIMEOUT:
                        proc.kill()
                        proc.wait()
                        hung = True
                        break
            records = _read(out)
            done = set()
            for r in records:
                if r["event"] == "done":
                    results[r["case"]] = (r["ok"], r["detail"])
                    done.add(r["case"])
            started_cases = [r["case"] for r in records if r["event"] == "start"]
            crashed = [c for c in started_cases if c not in done]
            if crashed:
                c = crashed[-1]
                why = f"hung for more than {CASE_TIMEOUT:.0f} s" if hung else f"the process {_describe_exit(proc.returncode)}"
                own = None if hung else _cpu_ep_crash(c, env)
                if own is not None:
                    results[c] = (SKIPPED, f"ORT's own CPU EP {own} on this case without the MLX EP (an ONNX Runtime {ort.__version__} bug)")
                else:
                    results[c] = (False, f"{why} during this case; stderr tail:\n{_tail(err)}")
                done.add(c)
            elif proc.returncode != 0 and not done:
                # The worker died before starting any case: report it on the first one.
                results[remaining[0]] = (False, f"the worker {_describe_exit(proc.returncode)} before the case started:\n{_tail(err)}")
                done.add(remaining[0])
            remaining = [c for c in remaining if c not in done]
    return results


#: result marker of a case ORT's CPU EP can't survive by itself
SKIPPED = "skipped"


def _cpu_ep_crash(name: str, env: dict) -> str | None:
    """How the case ends on ORT's CPU EP alone, when that kills the process too."""
    try:
        proc = subprocess.run([sys.executable, WORKER, "--cpu-only", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=HERE, timeout=CASE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return None
    return _describe_exit(proc.returncode) if proc.returncode != 0 else None


def _read(path: str) -> list[dict]:
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return []
    records = []
    for line in text.splitlines():
        if line.endswith("}"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return records


def _selected_cases(session) -> list[str]:
    names = []
    for item in session.items:
        callspec = getattr(item, "callspec", None)
        if item.originalname == "test_hostile_case" and callspec is not None:
            names.append(callspec.params["name"])
    return names


@pytest.fixture(scope="module")
def hostile_results(request):
    mlx_ep_devices()  # fail early and clearly when the library is not configured
    assert os.environ.get(LIBRARY_VAR)
    names = _selected_cases(request.session) or sorted(CASES)
    results = run_cases(names)
    tried = [r for r in results.values() if r[0] != SKIPPED]
    crashed = sum(1 for ok, detail in tried if not ok and ("the process" in detail or "hung" in detail))
    passed = sum(1 for ok, _ in tried if ok is True)
    skipped = len(results) - len(tried)
    summary = (
        f"hostile cases (onnxruntime {ort.__version__}): {len(tried)} tried, {len(tried) - crashed} survived, "
        f"{passed} passed; {skipped} skipped (ORT's CPU EP crashes on them by itself)"
    )
    report_line(request, summary)
    return results


def test_there_are_enough_cases():
    assert len(CASES) >= 40


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_case(name, hostile_results):
    ok, detail = hostile_results[name]
    if ok == SKIPPED:
        pytest.skip(detail)
    assert ok, detail


def test_failed_run_keeps_the_session_on_mlx():
    """A run that fails inside MLX (a Reshape to an impossible run-time shape) is an ordinary
    error, not ORT_EP_FAIL: ORT's Python API answers EP_FAIL by rebuilding the session on the
    CPU EP for good, silently. The same session, fallback left on, keeps running on MLX."""
    import numpy as np

    from conftest import HAS_ASSIGNMENT_INFO, assert_all_on_mlx, make_session
    from hostile_cases import reshape_model

    session = make_session(reshape_model().SerializeToString(), mlx=True)
    providers = list(session.get_providers())
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    good = {"X": x, "S": np.array([3, 2], np.int64)}
    np.testing.assert_array_equal(session.run(None, good)[0], np.maximum(x.reshape(3, 2), 0))
    with pytest.raises(Exception) as failure:
        session.run(None, {"X": x, "S": np.array([4, 4], np.int64)})
    assert type(failure.value).__name__ != "EPFail", f"an EP_FAIL status makes ORT's Python API fall back to the CPU EP: {failure.value}"
    assert "bad_Reshape" in str(failure.value), f"the error names no node: {failure.value}"
    assert list(session.get_providers()) == providers, f"the session changed providers: {session.get_providers()}"
    for _ in range(3):
        np.testing.assert_array_equal(session.run(None, good)[0], np.maximum(x.reshape(3, 2), 0))
    if HAS_ASSIGNMENT_INFO:
        assert_all_on_mlx(session)


def test_mlx_errors_name_no_build_machine_path():
    """An error raised inside MLX (a broadcast of incompatible run-time shapes) reaches the
    caller with MLX's message and short source locations, never a folder of the machine that
    built mlx-c or the EP (mlx-c appends `` at <absolute source path>:<line>``)."""
    import re

    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper

    from conftest import make_session
    from hostile_worker import BUILD_PATHS

    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "Y"], ["Z"], name="bad_Add")],
        "broadcast",
        [helper.make_tensor_value_info("X", T.FLOAT, ["a", "b"]), helper.make_tensor_value_info("Y", T.FLOAT, ["c", "d"])],
        [helper.make_tensor_value_info("Z", T.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    session = make_session(model.SerializeToString(), mlx=True)
    with pytest.raises(Exception) as failure:
        session.run(None, {"X": np.ones((2, 3), np.float32), "Y": np.ones((4, 5), np.float32)})
    message = str(failure.value)
    assert "[broadcast_shapes]" in message, f"not MLX's own error: {message}"
    assert "bad_Add" in message, message
    absolute = re.findall(r"(?<![\w.])/(?:[\w.+-]+/)+[\w.+-]+", message)
    assert not absolute, f"the error shows absolute paths {absolute}: {message}"
    for path in BUILD_PATHS + ["/root/", "/home/"]:
        assert path not in message, f"the error shows {path}: {message}"
    # The locations that remain are short: mlx-c's file name and the EP's crate-relative file.
    assert re.search(r" at \w+\.cpp:\d+", message), message
