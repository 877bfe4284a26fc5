"""ONNX's backend node suite through ONNX Runtime with the MLX EP: `cargo xtask conformance`.

Every case of ``onnx/backend/test/data/node`` as the pinned ``onnx`` wheel ships it (a folder
with ``model.onnx`` and ``test_data_set_*/{input,output}_*.pb``) runs twice in a worker
process: on ORT's CPU EP alone (is the case one ORT itself passes?) and with the MLX EP
registered (CPU EP as fallback unless ``--no-fallback``). Outputs are compared with the
reference outputs the way ONNX's backend runner does (same shape and dtype, ``assert_allclose``
with rtol 1e-3, atol 1e-7, or a per-case tolerance below). Where the nodes ran comes from
ORT's EP graph assignment info; why the MLX EP declined a node comes from the JSON lines
the EP appends to ``ORTMLX_CLAIMS_FILE``.

Isolation: workers are separate processes fed one case at a time. A worker that dies
(a crash) or runs past the timeout is recorded against its case, killed and replaced, and
the run goes on.

Each case ends in one bucket:

* ``pass``: every node ORT reports ran on the MLX EP and the outputs match;
* ``fail``: the MLX EP ran at least one node (or the session failed while ORT's CPU EP alone
  passes) and the outputs don't match or the run errored;
* ``crash``: the worker crashed or timed out;
* ``cpu``: not (all) on MLX: nodes declined (the reason is recorded) and the outcome is ORT's;
* ``random``: a case of a random generator op (``RANDOM_OPS``, or a Dropout that drops at
  random: training mode with a nonzero ratio, see ``_draws``) that ran wholly on the MLX EP
  with outputs of the reference's shapes and dtypes, finite, and in the reference's value
  domain (0/1 where the reference is 0/1); its reference values are random draws that no
  other generator reproduces, so it is checked this far and not counted as a pass.

The manifest (``tests/conformance/manifest.tsv``) holds the expected bucket of every case
and whether ORT's CPU EP alone passes it; ``--check`` fails on any difference (a regression,
or an improvement nobody recorded) and ``--update-manifest`` rewrites it.

Run by ``cargo xtask conformance``, which builds the EP and passes ``--library``.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MLX_EP = "MLXExecutionProvider"
CPU_EP = "CPUExecutionProvider"

#: ONNX's backend runner defaults.
RTOL, ATOL = 1e-3, 1e-7

#: Per-case tolerances (rtol, atol), by case-name prefix, where ORT's own CPU EP needs a looser
#: one than the default to pass the reference outputs: the float32 DFT and STFT cases expect
#: exact zeros where any float32 FFT leaves rounding noise (ORT's CPU EP: up to 3.4e-4).
TOLERANCES: dict[str, tuple[float, float]] = {"test_dft": (1e-3, 5e-4), "test_stft": (1e-3, 5e-4)}


def tolerance(case: str) -> tuple[float, float]:
    """The (rtol, atol) a case is compared with."""
    for prefix, tol in TOLERANCES.items():
        if case.startswith(prefix):
            return tol
    return RTOL, ATOL

#: ORT's optimizers turned off in both sessions: constant folding would compute nodes whose
#: inputs it knows (Shape of a statically shaped input) before any EP sees them.
DISABLED_OPTIMIZERS = ["ConstantFolding"]

MANIFEST_HEADER = "# case\tstatus\tort_cpu\treason"

#: Ops whose outputs are random draws: their cases can't match the reference values.
RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"}


def _draws(model, inputs) -> bool:
    """True when the case's outputs are random draws: a node of ``RANDOM_OPS``, or a Dropout in
    training mode (its training_mode true or unknown) whose ratio is not 0 (absent: 0.5).
    ``inputs`` are one data set's inputs, in graph input order."""
    import numpy as np
    from onnx import numpy_helper

    if any(n.op_type in RANDOM_OPS for n in model.graph.node):
        return True
    if not any(n.op_type == "Dropout" for n in model.graph.node):
        return False
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    values.update({model.graph.input[i].name: v for i, v in enumerate(inputs)})
    for n in model.graph.node:
        if n.op_type != "Dropout" or len(n.input) < 3 or not n.input[2]:
            continue
        training = values.get(n.input[2])
        ratio = values.get(n.input[1]) if n.input[1] else np.float32(0.5)
        if (training is None or np.asarray(training).any()) and (ratio is None or np.asarray(ratio).any()):
            return True
    return False


def _random_domain_check(expected, actual, what):
    """(ok, message): same shape and dtype as the reference, finite, and 0/1 where the
    reference holds only 0/1 (Bernoulli)."""
    import numpy as np

    e, a = np.asarray(expected), np.asarray(actual)
    if e.shape != a.shape or e.dtype != a.dtype:
        return False, f"{what}: {a.dtype}{list(a.shape)}, expected {e.dtype}{list(e.shape)}"
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        return False, f"{what}: non-finite random values"
    if e.size and np.isin(e, (0, 1)).all() and not np.isin(a, (0, 1)).all():
        return False, f"{what}: values outside {{0, 1}}"
    return True, ""


# ---------------------------------------------------------------------------
# the worker: runs cases it reads from stdin, answers JSON lines on its result pipe


def _load_proto(path, type_proto):
    import onnx
    from onnx import numpy_helper

    with open(path, "rb") as f:
        data = f.read()
    if type_proto.HasField("sequence_type"):
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return numpy_helper.to_list(seq)
    if type_proto.HasField("optional_type"):
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        return numpy_helper.to_optional(opt)
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    return numpy_helper.to_array(tensor)


def _compare(expected, actual, rtol, atol, label="output"):
    """ONNX's assert_similar_outputs, returning (ok, message, max_abs, max_rel)."""
    import numpy as np

    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)):
            return False, f"{label}: a {type(actual).__name__}, expected a sequence", None, None
        if len(actual) != len(expected):
            return False, f"{label}: {len(actual)} elements, expected {len(expected)}", None, None
        worst = (True, "", 0.0, 0.0)
        for j, (e, a) in enumerate(zip(expected, actual)):
            ok, msg, ab, rel = _compare(e, a, rtol, atol, f"{label}[{j}]")
            if not ok:
                return ok, msg, ab, rel
            worst = (True, "", max(worst[2], ab or 0.0), max(worst[3], rel or 0.0))
        return worst
    if expected is None or actual is None:
        if expected is None and actual is None:
            return True, "", 0.0, 0.0
        return False, f"{label}: {'None' if actual is None else 'a value'}, expected {'None' if expected is None else 'a value'}", None, None
    expected = np.asarray(expected)
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return False, f"{label}: shape {actual.shape}, expected {expected.shape}", None, None
    if expected.dtype == object:
        if np.array_equal(actual, expected):
            return True, "", 0.0, 0.0
        return False, f"{label}: strings differ", None, None
    if actual.dtype != expected.dtype:
        return False, f"{label}: dtype {actual.dtype}, expected {expected.dtype}", None, None
    if expected.size == 0:
        return True, "", 0.0, 0.0
    max_abs, max_rel = _errors(expected, actual)
    try:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
        return True, "", max_abs, max_rel
    except AssertionError:
        bad = _mismatch_count(expected, actual, rtol, atol)
        return False, f"{label}: {bad} of {expected.size} elements differ (max abs {max_abs:.3g}, max rel {max_rel:.3g})", max_abs, max_rel


def _errors(expected, actual):
    import numpy as np

    if expected.dtype.kind not in "biufc":
        try:
            expected, actual = expected.astype(np.float64), actual.astype(np.float64)
        except (TypeError, ValueError):
            return 0.0, 0.0
    e = expected.astype(np.complex128 if expected.dtype.kind == "c" else np.float64)
    a = actual.astype(e.dtype)
    same = (e == a) | (np.isnan(e) & np.isnan(a))
    with np.errstate(all="ignore"):
        diff = np.where(same, 0.0, np.abs(a - e))
        diff = np.where(np.isnan(diff), np.inf, diff)
        rel = np.where(same, 0.0, diff / np.abs(e))
        rel = np.where(np.isnan(rel), np.inf, rel)
    return float(diff.max()), float(rel.max())


def _mismatch_count(expected, actual, rtol, atol):
    import numpy as np

    try:
        close = np.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
        return int(np.size(close) - np.count_nonzero(close))
    except TypeError:
        return int(np.count_nonzero(actual != expected))


#: ONNX element types numpy and ORT's Python binding can't exchange directly (ml_dtypes arrays
#: on the ONNX side): (bits per element, bits per stored code).
SPECIAL_TYPES = {16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 24: 8, 21: 4, 22: 4, 23: 4, 25: 2, 26: 2}


def _onnx_type_of(array):
    """The ONNX element type of an ml_dtypes array, or None for a plain numpy one."""
    from onnx import helper

    import numpy as np

    if not isinstance(array, np.ndarray) or not array.dtype.type.__module__.startswith("ml_dtypes"):
        return None
    try:
        return helper.np_dtype_to_tensor_dtype(array.dtype)
    except (KeyError, ValueError, TypeError):
        return None


def _to_ort_value(ort, array):
    """An OrtValue holding ``array`` (ml_dtypes arrays become their ONNX bit patterns, sub-byte
    types packed low bits first). Returns (value, keep-alive buffer)."""
    import numpy as np

    onnx_type = _onnx_type_of(array)
    if onnx_type not in SPECIAL_TYPES:
        array = np.ascontiguousarray(array)
        return ort.OrtValue.ortvalue_from_numpy(array), array
    bits = SPECIAL_TYPES[onnx_type]
    if bits == 16:
        raw = np.ascontiguousarray(array).view(np.uint16)
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, onnx_type), raw
    codes = np.ascontiguousarray(array).view(np.uint8).reshape(-1)
    if bits < 8:
        per = 8 // bits
        mask = (1 << bits) - 1
        padded = np.zeros(-(-codes.size // per) * per, np.uint8)
        padded[: codes.size] = codes & mask
        packed = np.zeros(padded.size // per, np.uint8)
        for k in range(per):
            packed |= padded[k::per] << (k * bits)
        codes = packed
    # ORT reads the tensor's bytes from the buffer's start; the buffer has the tensor's shape
    buf = np.zeros(array.shape, np.uint8)
    buf.reshape(-1)[: codes.size] = codes
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(buf, onnx_type), buf


def _from_ort_value(value):
    """An OrtValue's tensor as numpy (an ml_dtypes array for the special types)."""
    import ctypes

    import numpy as np
    from onnx import helper

    onnx_type = value.element_type()
    if onnx_type not in SPECIAL_TYPES:
        return value.numpy()
    shape = tuple(value.shape())
    raw = np.frombuffer(ctypes.string_at(value.data_ptr(), value.tensor_size_in_bytes()), np.uint8)
    dtype = helper.tensor_dtype_to_np_dtype(onnx_type)
    bits = SPECIAL_TYPES[onnx_type]
    if bits == 16:
        return raw.view(np.uint16).view(dtype).reshape(shape)
    if bits < 8:
        per = 8 // bits
        mask = (1 << bits) - 1
        codes = np.stack([(raw >> (k * bits)) & mask for k in range(per)], axis=1).reshape(-1)
        n = int(np.prod(shape)) if shape else 1
        codes = codes[:n]
        if onnx_type in (22, 26):  # signed: sign-extend to int8, then the ml_dtypes type
            sign = 1 << (bits - 1)
            values = (codes.astype(np.int16) ^ sign) - sign
            return values.astype(np.int8).astype(dtype).reshape(shape)
        if onnx_type in (21, 25):
            return codes.astype(dtype).reshape(shape)
        return codes.view(dtype).reshape(shape)
    return raw.view(dtype).reshape(shape)


#: Tolerances of the float64 sweep (MLX's float64 result against ORT's CPU EP in float64):
#: an op that computes in float32 inside misses them by far.
F64_RTOL, F64_ATOL = 1e-9, 1e-12


def _to_float64(model):
    """The model with every float32 tensor widened to float64, or None when that's not a
    clean rewrite (no float32 at all, other float types, subgraphs, float attributes that
    type a Constant)."""
    import copy

    import numpy as np
    import onnx
    from onnx import TensorProto, numpy_helper

    m = copy.deepcopy(model)
    found = False

    def widen_type(tp):
        nonlocal found
        which = tp.WhichOneof("value")
        if which == "tensor_type":
            et = tp.tensor_type.elem_type
            if et == TensorProto.FLOAT:
                tp.tensor_type.elem_type = TensorProto.DOUBLE
                found = True
            elif et in (TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE):
                return False
            return True
        if which == "sequence_type":
            return widen_type(tp.sequence_type.elem_type)
        if which == "optional_type":
            return widen_type(tp.optional_type.elem_type)
        return which is None

    def widen_tensor(t):
        nonlocal found
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))
            found = True
        return t.data_type not in (TensorProto.FLOAT16, TensorProto.BFLOAT16)

    g = m.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if not widen_type(vi.type):
            return None
    for t in g.initializer:
        if not widen_tensor(t):
            return None
    for node in g.node:
        if node.op_type in ("LayerNormalization", "GroupNormalization", "RMSNormalization"):
            # stash_type (default float32) sets the precision they compute in
            return None
        for a in node.attribute:
            if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                return None
            if a.type == onnx.AttributeProto.TENSOR and not widen_tensor(a.t):
                return None
            if node.op_type == "Constant" and a.name in ("value_float", "value_floats"):
                return None
            if a.name == "stash_type":
                # computes in float32 by definition
                return None
            if a.name in ("to", "dtype") and a.type == onnx.AttributeProto.INT:
                if a.i == TensorProto.FLOAT:
                    a.i = TensorProto.DOUBLE
                elif a.i in (TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE):
                    return None
    return m if found else None


def _widen(value):
    import numpy as np

    if isinstance(value, list):
        return [_widen(v) for v in value]
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return value.astype(np.float64)
    return value


def _short(err: BaseException | str, limit: int = 400) -> str:
    text = " ".join(str(err).split())
    # "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not ..." -> "NOT_IMPLEMENTED: Could not ..."
    text = re.sub(r"\[ONNXRuntimeError\] : \d+ : (\w+) : ", r"\1: ", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Worker:
    """State of one worker process: ORT with the EP registered once."""

    def __init__(self, library: str, no_fallback: bool, ep_options: dict[str, str] | None = None):
        import onnxruntime as ort

        self.ort = ort
        ort.set_default_logger_severity(3)
        ort.register_execution_provider_library("ortmlx", os.path.abspath(library))
        self.devices = [d for d in ort.get_ep_devices() if d.ep_name == MLX_EP]
        if not self.devices:
            raise SystemExit(f"{library} registered but offers no {MLX_EP} device")
        self.no_fallback = no_fallback
        self.ep_options = dict(ep_options or {})
        self.claims_path = os.environ.get("ORTMLX_CLAIMS_FILE", "")

    def _options(self):
        options = self.ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return options

    @staticmethod
    def _inject_fault(phase: str, case: str) -> None:
        """Test hook: `ORTMLX_CONFORMANCE_FAULT=crash:<case>,hang:<case>,cpu-crash:<case>` makes
        the worker die or hang on those cases (on the MLX EP; `cpu-crash` on ORT's CPU EP), so
        that the runner's isolation can be tested."""
        for fault in filter(None, os.environ.get("ORTMLX_CONFORMANCE_FAULT", "").split(",")):
            kind, _, target = fault.partition(":")
            if target != case:
                continue
            if (phase, kind) in (("mlx", "crash"), ("cpu", "cpu-crash")):
                os.abort()
            if (phase, kind) == ("mlx", "hang"):
                time.sleep(3600)

    def _claims_since(self, offset: int):
        if not self.claims_path or not os.path.exists(self.claims_path):
            return [], offset
        with open(self.claims_path, "rb") as f:
            f.seek(offset)
            data = f.read()
        records = []
        for line in data.decode("utf-8", "replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                pass
        return records, offset + len(data)

    def _run_session(self, session, model, inputs):
        """The session's outputs for `inputs` (in graph input order); types numpy and ORT's
        Python API can't exchange go through OrtValues."""
        feeds = {model.graph.input[i].name: v for i, v in enumerate(inputs)}
        special = any(_onnx_type_of(v) in SPECIAL_TYPES for v in inputs) or any(
            o.type.HasField("tensor_type") and o.type.tensor_type.elem_type in SPECIAL_TYPES for o in model.graph.output
        )
        if not special:
            return session.run(None, feeds)
        values = {k: _to_ort_value(self.ort, v) for k, v in feeds.items()}
        results = session.run_with_ort_values(None, {k: v for k, (v, _) in values.items()})
        return [_from_ort_value(v) for v in results]

    def _run_one(self, session, model, data_sets, rtol, atol):
        """Runs every data set; (status, message, max_abs, max_rel)."""
        worst_abs, worst_rel = 0.0, 0.0
        for inputs, outputs in data_sets:
            try:
                actual = self._run_session(session, model, inputs)
            except Exception as err:  # noqa: BLE001 - recorded
                return "errored", "run: " + _short(err), None, None
            if len(actual) != len(outputs):
                return "mismatched", f"{len(actual)} outputs, expected {len(outputs)}", None, None
            random = _draws(model, inputs)
            for i, (e, a) in enumerate(zip(outputs, actual)):
                name = model.graph.output[i].name if i < len(model.graph.output) else f"output {i}"
                if random:
                    ok, msg = _random_domain_check(e, a, f"output '{name}'")
                    if not ok:
                        return "mismatched", msg, None, None
                    continue
                ok, msg, ab, rel = _compare(e, a, rtol, atol, f"output '{name}'")
                if ab is not None:
                    worst_abs, worst_rel = max(worst_abs, ab), max(worst_rel, rel)
                if not ok:
                    return "mismatched", msg, ab, rel
        if data_sets and all(_draws(model, inputs) for inputs, _ in data_sets):
            return "random", "random draws: shapes, dtypes and value domain match", None, None
        return "passed", "", worst_abs, worst_rel

    def run_case(self, request, say):
        import onnx

        case_dir = request["dir"]
        name = os.path.basename(case_dir)
        rtol, atol = tolerance(name)
        result = {"case": name, "rtol": rtol, "atol": atol}
        model_path = os.path.join(case_dir, "model.onnx")
        model = onnx.load(model_path)
        result["ops"] = [n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for n in model.graph.node]
        data_sets = []
        for ds in sorted(glob.glob(os.path.join(case_dir, "test_data_set_*"))):
            n_in = len(glob.glob(os.path.join(ds, "input_*.pb")))
            n_out = len(glob.glob(os.path.join(ds, "output_*.pb")))
            inputs = [_load_proto(os.path.join(ds, f"input_{i}.pb"), model.graph.input[i].type) for i in range(n_in)]
            outputs = [_load_proto(os.path.join(ds, f"output_{i}.pb"), model.graph.output[i].type) for i in range(n_out)]
            data_sets.append((inputs, outputs))
        with open(model_path, "rb") as f:
            model_bytes = f.read()
        if request.get("float64"):
            model = _to_float64(model)
            if model is None:
                result["skipped"] = "no clean float64 form"
                return result
            model_bytes = model.SerializeToString()
            data_sets = [([_widen(v) for v in inputs], None) for inputs, _ in data_sets]
            rtol, atol = result["rtol"], result["atol"] = F64_RTOL, F64_ATOL
            # the reference: ORT's CPU EP on the float64 form
            try:
                session = self.ort.InferenceSession(
                    model_bytes, sess_options=self._options(), providers=[CPU_EP], disabled_optimizers=DISABLED_OPTIMIZERS
                )
                data_sets = [(inputs, self._run_session(session, model, inputs)) for inputs, _ in data_sets]
                del session
            except Exception as err:  # noqa: BLE001 - recorded
                result["skipped"] = "ORT's CPU EP can't run the float64 form: " + _short(err, 200)
                return result
            result["cpu"] = {"status": "passed", "message": "reference"}

        if request.get("cpu", True) and not request.get("float64"):
            say({"phase": "cpu"})
            self._inject_fault("cpu", name)
            t0 = time.perf_counter()
            try:
                session = self.ort.InferenceSession(
                    model_bytes, sess_options=self._options(), providers=[CPU_EP], disabled_optimizers=DISABLED_OPTIMIZERS
                )
                status, msg, ab, rel = self._run_one(session, model, data_sets, rtol, atol)
                del session
            except Exception as err:  # noqa: BLE001 - recorded
                status, msg, ab, rel = "errored", "session: " + _short(err), None, None
            result["cpu"] = {"status": status, "message": msg, "max_abs": ab, "max_rel": rel, "seconds": round(time.perf_counter() - t0, 4)}

        say({"phase": "mlx"})
        self._inject_fault("mlx", name)
        t0 = time.perf_counter()
        _, offset = self._claims_since(0)
        options = self._options()
        options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        if self.no_fallback:
            options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        options.add_provider_for_devices(self.devices, self.ep_options)
        nodes = None
        try:
            session = self.ort.InferenceSession(model_bytes, sess_options=options, disabled_optimizers=DISABLED_OPTIMIZERS)
            nodes = []
            for sub in session.get_provider_graph_assignment_info():
                for node in sub.get_nodes():
                    op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
                    nodes.append([op, sub.ep_name])
            status, msg, ab, rel = self._run_one(session, model, data_sets, rtol, atol)
            del session
        except Exception as err:  # noqa: BLE001 - recorded
            status, msg, ab, rel = "errored", "session: " + _short(err), None, None
        claims, _ = self._claims_since(offset)
        result["mlx"] = {"status": status, "message": msg, "max_abs": ab, "max_rel": rel, "seconds": round(time.perf_counter() - t0, 4)}
        result["nodes"] = nodes
        result["claims"] = [
            {k: c.get(k) for k in ("op_type", "domain", "action", "reason", "node")} for c in claims
        ]
        return result


def worker_main(library: str, no_fallback: bool, ep_options: dict[str, str]) -> None:
    # Results go to the original stdout; anything else written to fd 1 (native code) goes
    # to stderr, so the result stream stays clean.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def say(obj):
        out.write(json.dumps(obj) + "\n")
        out.flush()

    worker = Worker(library, no_fallback, ep_options)
    say({"ready": True})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        request = json.loads(line)
        try:
            result = worker.run_case(request, say)
        except Exception as err:  # noqa: BLE001 - a harness error is recorded, not fatal
            result = {"case": os.path.basename(request["dir"]), "harness_error": _short(err)}
        say({"result": result})


# ---------------------------------------------------------------------------
# the coordinator


class Proc:
    """A worker process seen from the coordinator."""

    def __init__(self, index: int, args, env):
        self.index = index
        self.spawns = 0
        self.args = args
        self.env = env
        self.proc = None
        self.buffer = b""
        self.request = None
        self.deadline = None
        self.phase = None
        self.started = None
        self.log_path = os.path.join(args.work, f"worker-{index}.log")
        self.log = open(self.log_path, "ab")
        self.log_offset = 0

    def spawn(self):
        self.spawns += 1
        env = dict(self.env)
        env["ORTMLX_CLAIMS_FILE"] = os.path.join(self.args.work, f"claims-{self.index}-{self.spawns}.jsonl")
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--library", self.args.library]
        if self.args.no_fallback:
            cmd.append("--no-fallback")
        for option in self.args.ep_option:
            cmd += ["--ep-option", option]
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            start_new_session=True,
        )
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.buffer = b""
        self.ready = False
        self.request = None

    def send(self, request, timeout):
        self.request = request
        self.phase = None
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.log.flush()
        self.log_offset = os.path.getsize(self.log_path)
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()

    def stderr_tail(self, limit=600):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        text = " | ".join(line.strip() for line in text.splitlines() if line.strip())
        return text[-limit:]

    def kill(self):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc:
            self.proc.wait()
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close()
                except OSError:
                    pass

    def close(self):
        if self.proc and self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


def node_dir() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")


def classify(r: dict, no_fallback: bool) -> tuple[str, str]:
    """The case's bucket and a one-line reason."""
    if r.get("crashed") or r.get("timed_out"):
        return "crash", r.get("message", "")
    if "harness_error" in r:
        return "fail", "harness: " + r["harness_error"]
    if "skipped" in r:
        r["placement"] = "none"
        return "skip", r["skipped"]
    mlx = r["mlx"]
    nodes = r.get("nodes")
    claims = r.get("claims") or []
    if nodes is not None:
        on_mlx = sum(1 for _, ep in nodes if ep == MLX_EP)
        total = len(nodes)
    else:
        on_mlx = sum(1 for c in claims if c["action"] == "claim")
        total = len(r["ops"])
    r["placement"] = "mlx" if total and on_mlx == total else ("partial" if on_mlx else "cpu")
    cpu_ok = r.get("cpu", {}).get("status") == "passed"
    if mlx["status"] == "passed" and r["placement"] == "mlx":
        return "pass", ""
    if mlx["status"] == "random":
        if r["placement"] == "mlx":
            return "random", mlx["message"]
        return "cpu", decline_reason(r)
    cpu = r.get("cpu", {})
    if mlx["status"] != "passed" and cpu.get("status") == mlx["status"] and cpu.get("message") == mlx["message"]:
        return "cpu", "fails the same way on ORT's CPU EP"
    if mlx["status"] != "passed":
        fallback_refused = no_fallback and "fallback" in mlx["message"].lower() and any(c["action"] != "claim" for c in claims)
        if (on_mlx or cpu_ok) and not fallback_refused:
            return "fail", mlx["message"]
    return "cpu", decline_reason(r)


def decline_reason(r: dict) -> str:
    claims = r.get("claims") or []
    tested = set(r["ops"])
    declines = [c for c in claims if c["action"] in ("decline", "left")]
    declines.sort(key=lambda c: (c["op_type"] not in tested, c["op_type"] == "Constant"))
    if declines:
        c = declines[0]
        op = c["op_type"] if not c.get("domain") else f"{c['domain']}.{c['op_type']}"
        reason = c["reason"] or "declined"
        return reason if reason.startswith(c["op_type"]) else f"{op}: {reason}"
    if r["mlx"]["status"] != "passed":
        return r["mlx"]["message"]
    nodes = r.get("nodes")
    if nodes is not None and not nodes:
        return "ORT reports no node (the graph was folded away)"
    if nodes:
        others = sorted({op for op, ep in nodes if ep != MLX_EP})
        return f"ORT kept {', '.join(others)} on its own EP before the MLX EP was asked"
    return "no claim report"


def run_all(args) -> tuple[list[dict], float]:
    root = node_dir()
    cases = sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "model.onnx")))
    if args.filter:
        cases = [c for c in cases if args.filter in c]
    if not cases:
        raise SystemExit(f"no case matches --filter {args.filter!r}")
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    env.pop("ORTMLX_LOG_CLAIMS", None)
    jobs = max(1, min(args.jobs, len(cases)))
    print(f"conformance: {len(cases)} case(s) from {root}, {jobs} worker(s), {args.timeout:.0f} s per case", flush=True)

    queue = collections.deque({"dir": os.path.join(root, c), "cpu": True, "float64": args.float64} for c in cases)
    results: dict[str, dict] = {}
    procs = [Proc(i, args, env) for i in range(jobs)]
    sel = selectors.DefaultSelector()
    counts = collections.Counter()
    start = time.monotonic()
    last_progress = 0.0

    def progress(force=False):
        nonlocal last_progress
        now = time.monotonic()
        if not force and now - last_progress < args.progress:
            return
        last_progress = now
        done = len(results)
        print(
            f"  [{done:>4}/{len(cases)}] {now - start:6.1f} s  pass {counts['pass']}  fail {counts['fail']}  crash {counts['crash']}  cpu {counts['cpu']}",
            flush=True,
        )

    def record(r):
        bucket, reason = classify(r, args.no_fallback)
        r["bucket"], r["reason"] = bucket, reason
        results[r["case"]] = r
        counts[bucket] += 1
        if bucket in ("crash", "fail") and args.verbose_failures:
            print(f"  {bucket:<5} {r['case']}: {reason}", flush=True)
        progress()

    def start_proc(p):
        p.spawn()
        sel.register(p.proc.stdout, selectors.EVENT_READ, p)

    def feed(p):
        if queue:
            p.send(queue.popleft(), args.timeout)
        else:
            p.request = None

    def lost(p, why, timed_out):
        """The worker died or hung on its current case: record it, replace the worker."""
        request = p.request
        tail = p.stderr_tail()
        try:
            sel.unregister(p.proc.stdout)
        except (KeyError, ValueError):
            pass
        p.kill()
        if request is not None:
            name = os.path.basename(request["dir"])
            if p.phase == "cpu" and not timed_out:
                # ORT's own CPU EP crashed: note it and retry the case on the MLX EP only.
                retry = dict(request, cpu=False, cpu_crash=f"{why}{': ' + tail if tail else ''}")
                queue.appendleft(retry)
            else:
                r = {
                    "case": name,
                    "crashed": not timed_out,
                    "timed_out": timed_out,
                    "phase": p.phase,
                    "message": f"{why} on the {'CPU EP' if p.phase == 'cpu' else 'MLX EP'}{': ' + tail if tail else ''}"[:700],
                    "ops": [],
                }
                if request.get("cpu_crash"):
                    r["cpu"] = {"status": "crashed", "message": request["cpu_crash"]}
                record(r)
                if not args.verbose_failures:
                    print(f"  {'timeout' if timed_out else 'crash'} {name}: {r['message'][:200]}", flush=True)
        start_proc(p)

    for p in procs:
        start_proc(p)
    try:
        while len(results) < len(cases):
            now = time.monotonic()
            waits = [p.deadline - now for p in procs if p.request is not None]
            timeout = max(0.0, min(waits)) if waits else 1.0
            for key, _ in sel.select(timeout=min(timeout, 1.0)):
                p = key.data
                try:
                    chunk = p.proc.stdout.read()
                except (BlockingIOError, ValueError):
                    chunk = None
                if chunk is None:
                    continue
                if not chunk:
                    code = p.proc.wait()
                    why = f"worker exited with signal {-code}" if code < 0 else f"worker exited with status {code}"
                    if not p.ready:
                        tail = p.stderr_tail(2000)
                        raise SystemExit(f"conformance: a worker failed to start ({why}): {tail}")
                    # the replacement asks for work when it is ready
                    lost(p, why, False)
                    continue
                p.buffer += chunk
                while b"\n" in p.buffer:
                    line, p.buffer = p.buffer.split(b"\n", 1)
                    msg = json.loads(line)
                    if msg.get("ready"):
                        p.ready = True
                        feed(p)
                    elif "phase" in msg:
                        p.phase = msg["phase"]
                    elif "result" in msg and p.request is not None:
                        r = msg["result"]
                        if p.request.get("cpu_crash"):
                            r["cpu"] = {"status": "crashed", "message": p.request["cpu_crash"]}
                        r["seconds"] = round(time.monotonic() - p.started, 3)
                        record(r)
                        feed(p)
            now = time.monotonic()
            for p in procs:
                if p.request is not None and now > p.deadline:
                    lost(p, f"timed out after {args.timeout:.0f} s", True)
            # a worker left idle (no request, ready) picks up retried cases
            for p in procs:
                if p.request is None and p.ready and queue:
                    feed(p)
    finally:
        for p in procs:
            p.close()
    progress(force=True)
    elapsed = time.monotonic() - start
    print(f"conformance: ran {len(cases)} case(s) in {elapsed:.1f} s", flush=True)
    return [results[c] for c in cases], elapsed


# ---------------------------------------------------------------------------
# report, table, manifest


def op_of(r: dict, by_case: dict[str, dict]) -> str:
    """The op a case tests: its node's op type; for a function-expanded case, its base case's op."""
    name = r["case"]
    if "_expanded" in name:
        base = by_case.get(name.split("_expanded")[0])
        if base and base.get("ops"):
            return op_of(base, by_case) + " (expanded)"
    ops = [o for o in r.get("ops") or [] if o != "Constant"] or list(r.get("ops") or [])
    if not ops:
        return "?"
    # several nodes: the last one computes the output
    return ops[-1]


def write_report(results, elapsed, args, path):
    by_case = {r["case"]: r for r in results}
    for r in results:
        r["op"] = op_of(r, by_case)
    report = {
        "suite": node_dir(),
        "no_fallback": args.no_fallback,
        "filter": args.filter,
        "seconds": round(elapsed, 1),
        "summary": summary(results),
        "cases": results,
    }
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=1)


def summary(results):
    counts = collections.Counter(r["bucket"] for r in results)
    cpu_ok = [r for r in results if cpu_passes(r)]
    return {
        "total": len(results),
        "pass": counts["pass"],
        "fail": counts["fail"],
        "crash": counts["crash"],
        "cpu": counts["cpu"],
        "random": counts["random"],
        "timed_out": sum(1 for r in results if r.get("timed_out")),
        "ort_cpu_passes": len(cpu_ok),
        "ort_cpu_passes_and_pass_on_mlx": sum(1 for r in cpu_ok if r["bucket"] == "pass"),
        "ort_cpu_passes_and_fail_on_mlx": sum(1 for r in cpu_ok if r["bucket"] in ("fail", "crash")),
    }


def cpu_passes(r) -> bool:
    return r.get("cpu", {}).get("status") == "passed"


def summary_line(s) -> str:
    random = f"{s['random']} random (ran on MLX, values not comparable), " if s.get("random") else ""
    return f"conformance: {s['pass']} passed on MLX, {s['fail']} failed, {s['crash']} crashed, {s['cpu']} not on MLX, {random}of {s['total']}"


def markdown(results, args) -> str:
    s = summary(results)
    rows = collections.defaultdict(list)
    for r in results:
        rows[r["op"]].append(r)
    lines = [
        "# Operator conformance",
        "",
        "<!-- Generated by `cargo xtask conformance --update-manifest`; do not edit by hand. -->",
        "",
        "Every case of ONNX's backend node suite as the `onnx==1.21.0` wheel ships it",
        "(`onnx/backend/test/data/node`), run through `onnxruntime==1.31.1` with the MLX EP (ORT's CPU EP",
        "takes what it declines) and compared with the reference outputs as ONNX's backend runner does",
        "(same shape and dtype; rtol 1e-3, atol 1e-7; atol 5e-4 for the DFT and STFT cases, whose float32",
        "FFTs ORT's own CPU EP computes only that closely). ORT's constant folding is off, so that a node",
        "whose inputs are known (Shape of a static input) still reaches an EP. A case *passes on MLX* when every",
        "node ORT reports ran on the MLX EP and the outputs match; *failed* counts cases the MLX EP ran (or",
        "broke) with a wrong result, an error or a crash; *not on MLX* counts cases with at least one node",
        "left to ORT, with the EP's decline reason (the most common one of the op's cases). Expanded",
        "cases (`*_expanded*`: the op's function body as separate nodes) have rows of their own.",
        "Cases of the random generator ops (RandomNormal, RandomUniform, their `*Like` forms, Bernoulli,",
        "Multinomial, and Dropout in training mode with a nonzero ratio) hold reference outputs that are random draws no other generator reproduces: one that",
        "ran wholly on MLX with outputs of the reference's shapes and dtypes, finite and in its value domain",
        "(0/1 for Bernoulli) is *random*, counted apart and not as a pass (`tests/python/test_random_ops.py`",
        "checks their distributions).",
        "",
        f"Totals: **{s['pass']}** of {s['total']} cases pass on MLX, {s['fail']} fail, {s['crash']} crash,",
        f"{s['cpu']} are not (all) on MLX, {s['random']} are random (ran on MLX, values not comparable). ORT's CPU EP alone passes {s['ort_cpu_passes']} cases;",
        f"{s['ort_cpu_passes_and_pass_on_mlx']} of them pass on MLX.",
        "",
        "Per-case outcomes are in [`tests/conformance/manifest.tsv`](../tests/conformance/manifest.tsv).",
        "",
        "| op | cases | passed on MLX | failed | not on MLX | main reason |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for op in sorted(rows, key=lambda o: o.lower()):
        rs = rows[op]
        n_pass = sum(1 for r in rs if r["bucket"] == "pass")
        n_fail = sum(1 for r in rs if r["bucket"] in ("fail", "crash"))
        n_cpu = sum(1 for r in rs if r["bucket"] == "cpu")
        # the reason of the most common non-passing outcome; cases ORT's CPU EP fails too
        # only when nothing else is left
        open_cases = [r for r in rs if r["bucket"] != "pass"]
        mine = [r for r in open_cases if cpu_passes(r)] or open_cases
        reasons = collections.Counter(r["reason"] for r in mine if r["reason"])
        reason = reasons.most_common(1)[0][0] if reasons else ""
        if mine and not any(cpu_passes(r) for r in mine):
            why = mine[0].get("cpu", {}).get("message") or "fails"
            reason = f"ORT's CPU EP fails too ({why})" if reason == "fails the same way on ORT's CPU EP" else f"ORT's CPU EP fails too; {reason}"
        reason = reason.replace("|", "\\|").replace("\n", " ")
        if len(reason) > 160:
            reason = reason[:157] + "..."
        lines.append(f"| {op} | {len(rs)} | {n_pass} | {n_fail} | {n_cpu} | {reason} |")
    return "\n".join(lines) + "\n"


def manifest_reason(r) -> str:
    reason = "" if r["bucket"] == "pass" else r.get("reason", "")
    if r.get("cpu", {}).get("status") == "random":
        reason = "random draws on both EPs (ORT's CPU EP too): shapes, dtypes and value domain match"
    elif not cpu_passes(r):
        cpu = r.get("cpu", {})
        why = cpu.get("message") or cpu.get("status", "not run")
        if reason == "fails the same way on ORT's CPU EP":
            reason = ""
        reason = f"ORT's CPU EP fails: {why}" + (f"; with the MLX EP: {reason}" if reason else "")
    reason = " ".join(reason.split()).replace("\t", " ")
    return reason if len(reason) <= 240 else reason[:237] + "..."


def read_manifest(path) -> dict[str, tuple[str, str, str]]:
    entries = {}
    if not os.path.exists(path):
        return entries
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            parts = line.split("\t")
            while len(parts) < 4:
                parts.append("")
            entries[parts[0]] = (parts[1], parts[2], parts[3])
    return entries


def write_manifest(path, results, keep: dict[str, tuple[str, str, str]]):
    entries = dict(keep)
    for r in results:
        entries[r["case"]] = (r["bucket"], "ok" if cpu_passes(r) else "fails", manifest_reason(r))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("# Expected outcome of every ONNX backend node case (onnx 1.21.0) through onnxruntime 1.31.1\n")
        f.write("# with the MLX EP. status: pass (every node on MLX, outputs match) | fail | crash |\n")
        f.write("# cpu (not all on MLX; reason) | random (random-draw op on MLX; shapes, dtypes, domain checked).\n")
        f.write("# ort_cpu: ok | fails (ORT's CPU EP alone).\n")
        f.write("# `cargo xtask conformance --check` fails on any status change; --update-manifest rewrites this.\n")
        f.write(MANIFEST_HEADER + "\n")
        for case in sorted(entries):
            status, cpu, reason = entries[case]
            f.write(f"{case}\t{status}\t{cpu}\t{reason}\n")


def check_manifest(path, results) -> list[str]:
    expected = read_manifest(path)
    problems = []
    for r in results:
        got = (r["bucket"], "ok" if cpu_passes(r) else "fails")
        want = expected.get(r["case"])
        if want is None:
            problems.append(f"{r['case']}: not in the manifest (now {got[0]}, ORT CPU {got[1]})")
            continue
        if got[0] != want[0]:
            if got[0] == "pass":
                kind = "improvement, not recorded"
            elif want[0] == "pass" or got[0] in ("fail", "crash"):
                kind = "REGRESSION"
            else:
                kind = "changed"
            problems.append(f"{r['case']}: {kind}: {want[0]} -> {got[0]}" + (f" ({r['reason'][:200]})" if r.get("reason") else ""))
        elif got[1] != want[1]:
            problems.append(f"{r['case']}: ORT CPU EP {want[1]} -> {got[1]}")
    return problems


def float64_report(results, elapsed, args) -> int:
    """Writes report-float64.json and prints, per op that ran on MLX, how its cases fared."""
    by_case = {r["case"]: r for r in results}
    for r in results:
        r["op"] = op_of(r, by_case)
    path = os.path.join(args.out, "report-float64.json")
    with open(path, "w") as f:
        json.dump({"seconds": round(elapsed, 1), "cases": results}, f, indent=1)
    per_op = collections.defaultdict(lambda: collections.Counter())
    worst = collections.defaultdict(float)
    for r in results:
        if r["bucket"] == "skip":
            continue
        ran = sorted({op for op, ep in (r.get("nodes") or []) if ep == MLX_EP})
        for op in ran:
            per_op[op][r["bucket"]] += 1
            if r["bucket"] == "fail":
                worst[op] = max(worst[op], (r.get("mlx") or {}).get("max_rel") or 0.0)
    print(f"float64 sweep: {sum(1 for r in results if r['bucket'] != 'skip')} case(s) with a float64 form; per op that ran on MLX:")
    for op in sorted(per_op):
        c = per_op[op]
        flag = "ok  " if not c["fail"] and not c["crash"] else "FAIL"
        print(f"  {flag} {op:<28} pass {c['pass']:>3}  fail {c['fail']:>3}  crash {c['crash']:>3}  cpu {c['cpu']:>3}" + (f"  worst rel {worst[op]:.2g}" if op in worst else ""))
    for r in results:
        if r["bucket"] in ("fail", "crash"):
            print(f"  {r['bucket']} {r['case']}: {r['reason'][:200]}")
    counts = collections.Counter(r["bucket"] for r in results)
    print(f"float64: {counts['pass']} passed on MLX, {counts['fail']} failed, {counts['crash']} crashed, {counts['cpu']} not on MLX, {counts['skip']} skipped, of {len(results)}")
    return 1 if counts["fail"] or counts["crash"] else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--library", help="the EP library (libonnxruntime_mlx_ep.so)")
    parser.add_argument("--filter", default="", help="only cases whose name contains this")
    parser.add_argument("--no-fallback", action="store_true", help="session.disable_cpu_ep_fallback=1")
    parser.add_argument("--check", action="store_true", help="fail on any difference with the manifest")
    parser.add_argument("--update-manifest", action="store_true", help="rewrite the manifest and docs/conformance.md")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--out", default=os.path.join(ROOT, "target", "conformance"), help="report folder")
    parser.add_argument("--manifest", default=os.path.join(HERE, "manifest.tsv"))
    parser.add_argument("--docs", default=os.path.join(ROOT, "docs", "conformance.md"))
    parser.add_argument("--progress", type=float, default=10.0, help="seconds between progress lines")
    parser.add_argument("--verbose-failures", action="store_true", help="print every failing case as it ends")
    parser.add_argument(
        "--float64",
        action="store_true",
        help="the float64 sweep: every case with float32 tensors widened to float64, MLX against ORT's CPU EP (rtol 1e-9)",
    )
    parser.add_argument(
        "--ep-option", action="append", default=[], metavar="KEY=VALUE", help="an MLX EP option (e.g. device=gpu); repeatable"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.library:
        parser.error("--library is required (cargo xtask conformance passes it)")
    ep_options = {}
    for option in args.ep_option:
        key, sep, value = option.partition("=")
        if not sep:
            parser.error(f"--ep-option {option!r}: expected KEY=VALUE")
        ep_options[key] = value
    if args.worker:
        worker_main(args.library, args.no_fallback, ep_options)
        return 0
    if args.float64 and (args.check or args.update_manifest):
        parser.error("the manifest records the suite as shipped: --float64 can't be combined with --check or --update-manifest")
    if args.no_fallback and (args.check or args.update_manifest):
        parser.error("the manifest records runs with CPU fallback: --no-fallback can't be combined with --check or --update-manifest")

    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="work-", dir=args.out) as work:
        args.work = work
        results, elapsed = run_all(args)
        if args.float64:
            return float64_report(results, elapsed, args)
        report_path = os.path.join(args.out, "report.json")
        write_report(results, elapsed, args, report_path)
        table = markdown(results, args)
        table_path = os.path.join(args.out, "conformance.md")
        with open(table_path, "w") as f:
            f.write(table)
        # keep the workers' logs of a run with crashes
        if any(r["bucket"] == "crash" for r in results):
            for log in glob.glob(os.path.join(work, "worker-*.log")):
                os.replace(log, os.path.join(args.out, os.path.basename(log)))
    s = summary(results)
    status = 0
    print(f"report: {report_path}")
    print(f"table:  {table_path}")
    print(
        f"ORT's CPU EP alone passes {s['ort_cpu_passes']} of {s['total']}; of those, {s['ort_cpu_passes_and_pass_on_mlx']} pass on MLX and "
        f"{s['ort_cpu_passes_and_fail_on_mlx']} fail or crash with the MLX EP"
    )
    if args.update_manifest:
        keep = read_manifest(args.manifest) if args.filter else {}
        write_manifest(args.manifest, results, keep)
        print(f"manifest: wrote {args.manifest}")
        if not args.filter:
            os.makedirs(os.path.dirname(args.docs), exist_ok=True)
            with open(args.docs, "w") as f:
                f.write(table)
            print(f"docs:     wrote {args.docs}")
    elif args.check:
        problems = check_manifest(args.manifest, results)
        if problems:
            print(f"manifest check: {len(problems)} case(s) differ from {os.path.relpath(args.manifest, ROOT)}:")
            for p in problems:
                print(f"  {p}")
            print("fix the regression, or record the change with `cargo xtask conformance --update-manifest`")
            status = 1
        else:
            print(f"manifest check: all {len(results)} case(s) as recorded")
    print(summary_line(s))
    return status


if __name__ == "__main__":
    sys.exit(main())
