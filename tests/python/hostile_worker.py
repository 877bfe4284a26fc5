"""Runs hostile cases (``hostile_cases.py``) one after another in this process and appends
one JSON line per event to a results file: ``{"case": name, "event": "start"}`` before a case,
``{"case": name, "event": "done", "ok": bool, "detail": str}`` after it. A case that kills
the process leaves a "start" without its "done", which ``test_hostile.py`` reports.

After every case a canary (a fresh valid session on the MLX EP) must still run correctly.

Usage: ``python hostile_worker.py RESULTS_FILE CASE [CASE ...]`` (``ORTMLX_EP_LIBRARY`` set).
"""

from __future__ import annotations

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper  # noqa: E402

import conftest  # noqa: E402
from conftest import HAS_ASSIGNMENT_INFO, MLX_EP, assert_outputs_match, make_session  # noqa: E402
from hostile_cases import CASES, Case  # noqa: E402


class Failure(Exception):
    pass


def emit(fd: int, record: dict) -> None:
    os.write(fd, (json.dumps(record) + "\n").encode())


def node_names(data: bytes) -> list[str]:
    try:
        m = onnx.load_from_string(data)
    except Exception:  # noqa: BLE001 - an unparsable model has no names to look for
        return []
    names = []

    def walk(g):
        for n in g.node:
            if n.name:
                names.append(n.name)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)

    walk(m.graph)
    return names


# Folders of the machine that built the EP and MLX; none may show in an error message.
BUILD_PATHS = [
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),  # the checkout
    os.path.join(os.path.expanduser("~"), ".cache", "ortmlx"),  # MLX, mlx-c (xtask's cache)
    "/.cargo/registry/",
    "/mlx/c/",  # mlx-c's source tree
]


def check_clear(case: Case, err: BaseException, where: str) -> str:
    """Fails unless ``err`` is a clear error; returns its one-line summary."""
    msg = str(err).strip()
    if not msg:
        raise Failure(f"{where}: an error with an empty message ({type(err).__name__})")
    if MLX_EP in msg:
        wanted = list(case.names) if case.names else node_names(case.model)
        if wanted and not any(n in msg for n in wanted):
            raise Failure(f"{where}: the MLX EP's error names no node of the model ({wanted[:5]}): {msg[:400]}")
        leaked = [p for p in BUILD_PATHS if p in msg]
        if leaked:
            raise Failure(f"{where}: the MLX EP's error shows a build folder ({leaked[0]}): {msg[:400]}")
    return msg.splitlines()[0][:300]


def mlx_nodes(session) -> int | None:
    if not HAS_ASSIGNMENT_INFO:
        return None
    return sum(len(s.get_nodes()) for s in session.get_provider_graph_assignment_info() if s.ep_name == MLX_EP)


def judge(case: Case) -> str:
    notes = []
    cpu_needed = case.expect == "same" and any(i not in case.bad_runs and i not in case.free_runs for i in range(len(case.feeds)))
    cpu_session, cpu_error = None, None
    if cpu_needed:
        try:
            cpu_session = make_session(case.model, mlx=False)
        except Exception as e:  # noqa: BLE001
            cpu_error = e
    try:
        session = make_session(case.model, mlx=True, record_placement=HAS_ASSIGNMENT_INFO)
    except Exception as e:  # noqa: BLE001
        summary = check_clear(case, e, "MLX session creation")
        if case.expect == "error" or cpu_error is not None or case.mlx_may_refuse:
            return f"refused at creation: {summary}"
        if case.expect == "any":
            return f"refused at creation: {summary}"
        raise Failure(f"the MLX session refused a model the CPU EP accepts: {summary}")
    # ORT's Python API rebuilds a session on the CPU EP after an EP_FAIL run: a case must
    # see the MLX session itself, so that fallback is off.
    session.disable_fallback()
    if cpu_error is not None and case.expect == "same":
        raise Failure(f"the CPU EP refuses the model ({str(cpu_error).splitlines()[0][:200]}) but the MLX session accepted it")
    n = mlx_nodes(session)
    if n is not None:
        notes.append(f"{n} node(s) on MLX")
    failed_any = False
    for i, feeds in enumerate(case.feeds):
        where = f"run {i}"
        if i in case.bad_runs or case.expect == "error":
            try:
                session.run(None, feeds)
            except Exception as e:  # noqa: BLE001
                notes.append(f"{where} refused: {check_clear(case, e, where)}")
                failed_any = True
                continue
            if i in case.bad_runs:
                raise Failure(f"{where} should have failed (a bad feed) but gave outputs")
            continue
        if i in case.free_runs or case.expect == "any":
            try:
                outs = session.run(None, feeds)
            except Exception as e:  # noqa: BLE001
                notes.append(f"{where} refused: {check_clear(case, e, where)}")
                continue
            if case.check:
                case.check(i, outs)
            notes.append(f"{where} ran")
            continue
        try:
            expected = cpu_session.run(None, feeds)
            cpu_run_error = None
        except Exception as e:  # noqa: BLE001
            expected, cpu_run_error = None, e
        try:
            actual = session.run(None, feeds)
            mlx_run_error = None
        except Exception as e:  # noqa: BLE001
            actual, mlx_run_error = None, e
        if cpu_run_error is not None and mlx_run_error is not None:
            notes.append(f"{where} refused by both: {check_clear(case, mlx_run_error, where)}")
            continue
        if cpu_run_error is not None:
            raise Failure(f"{where}: the CPU EP refuses ({str(cpu_run_error).splitlines()[0][:200]}) but the MLX session gave outputs")
        if mlx_run_error is not None:
            summary = check_clear(case, mlx_run_error, where)
            if case.mlx_may_refuse:
                notes.append(f"{where} refused by MLX: {summary}")
                continue
            raise Failure(f"{where}: the MLX session failed where the CPU EP runs: {summary}")
        assert_outputs_match(actual, expected, rtol=case.rtol, atol=case.atol)
        notes.append(f"{where} matches")
    if case.expect == "error" and not failed_any:
        raise Failure("expected an error, every run gave outputs")
    return "; ".join(notes)


_CANARY = None


def canary() -> None:
    """A fresh valid session on the MLX EP still works (and runs on MLX)."""
    global _CANARY
    if _CANARY is None:
        nodes = [helper.make_node("Add", ["A", "B"], ["S"], name="canary_add"), helper.make_node("Relu", ["S"], ["Y"], name="canary_relu")]
        g = helper.make_graph(
            nodes,
            "canary",
            [helper.make_tensor_value_info("A", onnx.TensorProto.FLOAT, [2, 3]), helper.make_tensor_value_info("B", onnx.TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("Y", onnx.TensorProto.FLOAT, [2, 3])],
        )
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        _CANARY = m.SerializeToString()
    a = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    b = np.full((2, 3), 0.5, np.float32)
    session = make_session(_CANARY, mlx=True, record_placement=HAS_ASSIGNMENT_INFO)
    (y,) = session.run(None, {"A": a, "B": b})
    np.testing.assert_array_equal(y, np.maximum(a + b, 0))
    if HAS_ASSIGNMENT_INFO:
        n = mlx_nodes(session)
        if n != 2:
            raise Failure(f"canary: {n} of 2 nodes on MLX")


def cpu_only(name: str) -> None:
    """Runs a case on ORT's CPU EP alone (session and every feed), ignoring errors: tells
    whether a crash is ORT's own."""
    case = CASES[name]()
    try:
        session = make_session(case.model, mlx=False)
    except Exception:  # noqa: BLE001
        return
    for feeds in case.feeds:
        try:
            session.run(None, feeds)
        except Exception:  # noqa: BLE001
            pass


def main() -> int:
    if sys.argv[1] == "--cpu-only":
        cpu_only(sys.argv[2])
        return 0
    out_path, names = sys.argv[1], sys.argv[2:]
    fd = os.open(out_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    conftest.mlx_ep_devices()
    for name in names:
        emit(fd, {"case": name, "event": "start"})
        ok, detail = True, ""
        try:
            detail = judge(CASES[name]())
        except Failure as e:
            ok, detail = False, str(e)
        except BaseException as e:  # noqa: BLE001 - reported, the worker goes on
            ok, detail = False, "".join(traceback.format_exception_only(type(e), e)).strip()[:2000]
        try:
            canary()
        except BaseException as e:  # noqa: BLE001
            ok = False
            detail += f" | the canary session failed afterwards: {e}"
        emit(fd, {"case": name, "event": "done", "ok": ok, "detail": detail})
    os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
