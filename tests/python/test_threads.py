"""Threads: many sessions run concurrently from their own threads, runs from a thread other
than the one that made the session, and initializers shared across sessions made and dropped
concurrently. Results must equal a single-threaded run of the same feeds.

``ORTMLX_THREAD_RUNS`` sets the runs per thread (default 200).
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import HAS_ASSIGNMENT_INFO, assert_all_on_mlx, make_session

THREADS = 8
RUNS = int(os.environ.get("ORTMLX_THREAD_RUNS", "200"))


def mlp_model(hidden: int = 256, seed: int = 0) -> bytes:
    """x[b, 64] -> MatMul(W1) + b1 -> Gelu-ish (Erf) -> MatMul(W2) -> Softmax; the weights
    (64 KiB and up) go through the initializer pool."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((64, hidden)).astype(np.float32) * 0.1
    b1 = rng.standard_normal((hidden,)).astype(np.float32) * 0.1
    w2 = rng.standard_normal((hidden, 32)).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
        helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
        helper.make_node("Erf", ["hb"], ["e"], name="erf"),
        helper.make_node("Mul", ["hb", "e"], ["g"], name="gate"),
        helper.make_node("MatMul", ["g", "w2"], ["o"], name="mm2"),
        helper.make_node("Softmax", ["o"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 32])],
        initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(w2, "w2")],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def feeds_for(thread: int, run: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1000 * thread + run)
    batch = 1 + (thread + run) % 4
    return {"x": rng.standard_normal((batch, 64)).astype(np.float32)}


def run_threads(target, n: int) -> None:
    """Runs ``target(i)`` on ``n`` threads; re-raises the first failure."""
    errors: list[BaseException] = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - re-raised on the main thread
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i,), name=f"ortmlx-worker-{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


#: both execution modes of the runtime: eager, and compiled MLX closures (whose traces belong
#: to the thread that compiled them; other threads run eagerly)
MODES = {"eager": {"compile": "off"}, "compiled": {"compile": "on"}}


def reference(model: bytes, n_threads: int, runs: int) -> list[list[np.ndarray]]:
    """The outputs of every (thread, run) feed, from one eager MLX session on this thread."""
    session = make_session(model, mlx=True, record_placement=False, ep_options=MODES["eager"])
    return [[session.run(None, feeds_for(t, r))[0] for r in range(runs)] for t in range(n_threads)]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_sessions_on_their_own_threads_match_a_single_thread(mode):
    """8 sessions (made on the main thread), each run RUNS times from its own thread, all at
    once: every result equals the single-threaded one."""
    model = mlp_model()
    expected = reference(model, THREADS, RUNS)
    sessions = [make_session(model, mlx=True, ep_options=MODES[mode]) for _ in range(THREADS)]
    if HAS_ASSIGNMENT_INFO:
        for s in sessions:
            assert_all_on_mlx(s)
    results: list[list[np.ndarray | None]] = [[None] * RUNS for _ in range(THREADS)]

    def work(i):
        s = sessions[i]
        s.disable_fallback()
        for r in range(RUNS):
            results[i][r] = s.run(None, feeds_for(i, r))[0]

    run_threads(work, THREADS)
    for i in range(THREADS):
        for r in range(RUNS):
            np.testing.assert_allclose(results[i][r], expected[i][r], rtol=1e-6, atol=1e-7, err_msg=f"thread {i} run {r}")


def test_sessions_made_and_dropped_on_threads_share_initializers():
    """8 threads each make a session of the same model (same weights: one pooled copy),
    run it, drop it, and do it again, concurrently; results stay right throughout."""
    model = mlp_model(hidden=512, seed=3)
    expected = reference(model, THREADS, 4)

    def work(i):
        for _ in range(3):
            s = make_session(model, mlx=True, record_placement=False)
            s.disable_fallback()
            for r in range(4):
                got = s.run(None, feeds_for(i, r))[0]
                np.testing.assert_allclose(got, expected[i][r], rtol=1e-6, atol=1e-7)
            del s

    run_threads(work, THREADS)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_run_from_another_thread(mode):
    """A session made and first run on one thread, then run from other threads (one at a
    time, and concurrently): each run either gives the right result or fails with a clear
    error that says why; it never crashes, and the session keeps working on its first
    thread."""
    model = mlp_model(seed=5)
    session = make_session(model, mlx=True, record_placement=False, ep_options=MODES[mode])
    session.disable_fallback()
    feeds = feeds_for(0, 0)
    first = session.run(None, feeds)[0]
    outcomes: list[str] = []
    lock = threading.Lock()

    def other(i):
        try:
            got = session.run(None, feeds_for(0, 0))[0]
        except Exception as e:  # noqa: BLE001 - judged below
            msg = str(e)
            assert "thread" in msg, f"a foreign-thread run failed without saying why: {msg}"
            with lock:
                outcomes.append("refused")
            return
        np.testing.assert_allclose(got, first, rtol=1e-6, atol=1e-7)
        with lock:
            outcomes.append("ran")

    run_threads(other, 1)
    run_threads(other, 4)
    assert len(outcomes) == 5
    np.testing.assert_allclose(session.run(None, feeds)[0], first, rtol=1e-6, atol=1e-7)
    print(f"foreign-thread runs: {outcomes}")


@pytest.mark.parametrize("mode", sorted(MODES))
def test_foreign_thread_runs_give_correct_results(mode):
    """Runs of one session from many threads in turn (the usual thread-pool server) give the
    single-threaded results."""
    model = mlp_model(seed=7)
    session = make_session(model, mlx=True, record_placement=False, ep_options=MODES[mode])
    session.disable_fallback()
    expected = reference(model, 1, 16)[0]
    results: dict[int, np.ndarray] = {}

    def work(i):
        results[i] = session.run(None, feeds_for(0, i))[0]

    for i in range(16):
        run_threads(lambda _t, i=i: work(i), 1)
    for i in range(16):
        np.testing.assert_allclose(results[i], expected[i], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_one_session_run_from_eight_threads_at_once(mode):
    """ORT >= 1.24 asks the EP whether Run may be called concurrently (it says yes: each fused
    node's runs wait for each other); 8 threads then call one session at the same time and
    every result is the single-threaded one."""
    model = mlp_model(seed=11)
    session = make_session(model, mlx=True, record_placement=False, ep_options=MODES[mode])
    session.disable_fallback()
    runs = max(4, RUNS // 20)
    expected = reference(model, 8, runs)
    start = threading.Barrier(8)
    results: dict[tuple[int, int], np.ndarray] = {}

    def work(t):
        start.wait()
        for r in range(runs):
            results[(t, r)] = session.run(None, feeds_for(t, r))[0]

    run_threads(work, 8)
    for t in range(8):
        for r in range(runs):
            np.testing.assert_allclose(results[(t, r)], expected[t][r], rtol=1e-6, atol=1e-7)


def test_the_ep_declares_concurrent_runs_supported():
    """ORT >= 1.24 asks through `OrtEp::IsConcurrentRunSupported`; the answer comes from the run
    gate's policy (read in the EP's debug log of a child process)."""
    import subprocess
    import sys

    import onnxruntime as ort

    code = (
        "import os, onnxruntime as ort, numpy as np; import test_threads as t; import conftest;"
        "s = conftest.make_session(t.mlp_model(), mlx=True, record_placement=False);"
        "s.run(None, t.feeds_for(0, 0))"
    )
    env = dict(os.environ, ORTMLX_LOG="debug")
    done = subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(os.path.abspath(__file__)), env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    asked = [line for line in done.stderr.splitlines() if "IsConcurrentRunSupported" in line]
    if tuple(int(p) for p in ort.__version__.split(".")[:2]) < (1, 24):
        assert not asked, "ORT before 1.24 has no IsConcurrentRunSupported hook"
    else:
        assert asked and asked[0].endswith("IsConcurrentRunSupported: true"), done.stderr[-2000:]


def _os_threads() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def test_short_lived_threads_leave_no_threads_behind():
    """Runs from 100 threads that each exit afterwards: MLX's thread-affine streams would
    leave one stream and one worker thread per calling thread behind; the EP's runs must not."""
    if _os_threads() is None:
        pytest.skip("no /proc/self/status")
    model = mlp_model(seed=11)
    session = make_session(model, mlx=True, record_placement=False)
    session.disable_fallback()
    session.run(None, feeds_for(0, 0))
    for i in range(10):  # warm up: MLX's lanes and ORT's pools exist after this
        run_threads(lambda _t, i=i: session.run(None, feeds_for(1, i)), 1)
    before = _os_threads()
    for i in range(100):
        run_threads(lambda _t, i=i: session.run(None, feeds_for(2, i)), 1)
    after = _os_threads()
    assert after - before <= 2, f"{after - before} OS threads more after runs from 100 short-lived threads"
