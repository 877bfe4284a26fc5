"""Hostile models for ``test_hostile.py``: malformed, inconsistent, huge or odd graphs and feeds.

Every case is built here with ``onnx.helper`` (never ``onnx.checker``: most of these are
meant to be invalid) and sometimes edited at the protobuf level. ``hostile_worker.py`` runs
them; ``test_hostile.py`` runs the worker in subprocesses so a crash or a hang is a reported
failure, not a dead test run.

A case declares what a correct outcome is (:class:`Case` ``expect``):

* ``"same"``: do what ORT's CPU EP does. If the CPU EP gives outputs, the MLX session must
  give the same (NaN matches NaN); if the CPU EP refuses the model or the feed, the MLX
  session must refuse it too, with a clear error.
* ``"error"``: the MLX session must refuse (at creation or at the run) with a clear error.
  Used where the CPU EP itself can't be the reference (a 4 TB allocation, an integer
  division by zero, which kills ORT's CPU EP with SIGFPE).
* ``"any"``: anything but a crash or a hang; ``check`` (if any) validates outputs.

A clear error: a non-empty message; when the message is the MLX EP's own, it names the
ONNX node at fault (one of ``names``, by default any node of the model).

Each case gives a list of runs (``feeds``), all on one session; a case whose first feed is
bad and whose second is good checks that a failed run leaves the session usable.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

F32, F16, F64, I32, I64, BOOL = T.FLOAT, T.FLOAT16, T.DOUBLE, T.INT32, T.INT64, T.BOOL
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min
HUGE = 1_000_000  # two such dims make 1e12 elements


@dataclasses.dataclass
class Case:
    name: str
    model: bytes
    feeds: list[dict[str, np.ndarray]]
    expect: str = "same"
    #: substrings one of which an MLX EP error must contain (default: any node name)
    names: Sequence[str] | None = None
    #: for ``expect="any"``: validates the outputs of each successful run
    check: Callable[[int, list[np.ndarray]], None] | None = None
    #: the CPU EP may accept what the MLX EP refuses (with a clear error)
    mlx_may_refuse: bool = False
    #: runs (indices into ``feeds``) the MLX session must refuse with a clear error; the CPU
    #: EP is not asked about them
    bad_runs: frozenset[int] = frozenset()
    #: runs with no CPU reference: anything but a crash (``check`` validates outputs)
    free_runs: frozenset[int] = frozenset()
    rtol: float = 1e-4
    atol: float = 1e-4
    note: str = ""


CASES: dict[str, Callable[[], Case]] = {}


def case(fn: Callable[[], Case]) -> Callable[[], Case]:
    name = fn.__name__
    assert name not in CASES, name
    CASES[name] = fn
    return fn


# ---------------------------------------------------------------------------
# builders (no checker, no strict inference)


def vi(name: str, elem: int | None, shape: Sequence | None) -> onnx.ValueInfoProto:
    if elem is None:
        return onnx.ValueInfoProto(name=name)
    return helper.make_tensor_value_info(name, elem, shape)


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    *,
    inits: Mapping[str, np.ndarray] | Sequence[onnx.TensorProto] = (),
    opset: int = 17,
    opsets: Mapping[str, int] | None = None,
    ir: int | None = None,
    name: str = "hostile",
) -> onnx.ModelProto:
    if isinstance(inits, Mapping):
        inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()]
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), initializer=list(inits))
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (opsets or {}).items()]
    m = helper.make_model(graph, opset_imports=ops, producer_name="ortmlx-hostile")
    m.ir_version = ir if ir is not None else (8 if opset <= 17 else 10)
    return m


def one(op: str, inputs: Sequence[onnx.ValueInfoProto], out: onnx.ValueInfoProto, *, inits=(), opset: int = 17, node_inputs=None, **attrs) -> onnx.ModelProto:
    """A one-node model; the node is named ``bad_<op>``."""
    names = list(node_inputs) if node_inputs is not None else [i.name for i in inputs] + [n for n in (inits.keys() if isinstance(inits, Mapping) else [])]
    node = helper.make_node(op, names, [out.name], name=f"bad_{op}", **attrs)
    return model([node], inputs, [out], inits=inits, opset=opset)


def mk(name: str, m: onnx.ModelProto | bytes, feeds, **kw) -> Case:
    if isinstance(feeds, dict):
        feeds = [feeds]
    data = m if isinstance(m, bytes) else m.SerializeToString()
    return Case(name, data, list(feeds), **kw)


def randn(*shape, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def set_attr_type(m: onnx.ModelProto, node: int, attr: str, kind: int, **fields) -> onnx.ModelProto:
    """Protobuf edit: give an attribute another type tag and value (past the helper's checks)."""
    a = next(a for a in m.graph.node[node].attribute if a.name == attr)
    a.Clear()
    a.name = attr
    a.type = kind
    for k, v in fields.items():
        if isinstance(v, list):
            getattr(a, k).extend(v)
        else:
            setattr(a, k, v)
    return m


X23 = vi("X", F32, [2, 3])
Y_ANY = vi("Y", F32, None)


def x23() -> dict[str, np.ndarray]:
    return {"X": randn(2, 3)}


# ---------------------------------------------------------------------------
# attributes: wrong types and values


@case
def attr_softmax_axis_float():
    m = one("Softmax", [X23], vi("Y", F32, [2, 3]), axis=1)
    return mk("attr_softmax_axis_float", set_attr_type(m, 0, "axis", onnx.AttributeProto.FLOAT, f=1.0), x23())


@case
def attr_transpose_perm_as_int():
    m = one("Transpose", [X23], vi("Y", F32, [3, 2]), perm=[1, 0])
    return mk("attr_transpose_perm_as_int", set_attr_type(m, 0, "perm", onnx.AttributeProto.INT, i=1), x23())


@case
def attr_transpose_perm_duplicate():
    return mk("attr_transpose_perm_duplicate", one("Transpose", [X23], Y_ANY, perm=[0, 0]), x23())


@case
def attr_transpose_perm_short():
    return mk("attr_transpose_perm_short", one("Transpose", [X23], Y_ANY, perm=[1]), x23())


@case
def attr_transpose_perm_oob():
    return mk("attr_transpose_perm_oob", one("Transpose", [X23], Y_ANY, perm=[0, 7]), x23())


@case
def attr_softmax_axis_oob():
    return mk("attr_softmax_axis_oob", one("Softmax", [X23], Y_ANY, axis=7), x23())


@case
def attr_concat_axis_oob():
    m = one("Concat", [X23, vi("Z", F32, [2, 3])], Y_ANY, axis=-5)
    return mk("attr_concat_axis_oob", m, {"X": randn(2, 3), "Z": randn(2, 3, seed=1)})


@case
def attr_gather_axis_oob():
    m = one("Gather", [X23, vi("I", I64, [2])], Y_ANY, axis=3)
    return mk("attr_gather_axis_oob", m, {"X": randn(2, 3), "I": np.array([0, 1], np.int64)})


@case
def attr_flatten_axis_oob():
    return mk("attr_flatten_axis_oob", one("Flatten", [X23], Y_ANY, axis=4), x23())


@case
def attr_reduce_axes_oob():
    return mk("attr_reduce_axes_oob", one("ReduceSum", [X23], Y_ANY, opset=11, axes=[5]), x23())


@case
def attr_argmax_axis_oob():
    return mk("attr_argmax_axis_oob", one("ArgMax", [X23], vi("Y", I64, None), axis=-3), x23())


@case
def attr_layernorm_axis_oob():
    m = one("LayerNormalization", [X23], Y_ANY, inits={"g": np.ones(3, np.float32)}, axis=4)
    return mk("attr_layernorm_axis_oob", m, x23())


@case
def attr_cast_to_invalid():
    return mk("attr_cast_to_invalid", one("Cast", [X23], vi("Y", None, None), to=999), x23())


@case
def attr_cast_missing_to():
    return mk("attr_cast_missing_to", one("Cast", [X23], vi("Y", None, None)), x23())


@case
def attr_cast_to_string():
    """A valid cast MLX can't do: must stay on the CPU EP and give ORT's strings."""
    return mk("attr_cast_to_string", one("Cast", [X23], vi("Y", T.STRING, [2, 3]), to=T.STRING), x23())


@case
def attr_unknown_extra_attribute():
    return mk("attr_unknown_extra_attribute", one("Relu", [X23], vi("Y", F32, [2, 3]), foo=3), x23())


@case
def attr_leakyrelu_alpha_nan():
    return mk("attr_leakyrelu_alpha_nan", one("LeakyRelu", [X23], vi("Y", F32, [2, 3]), alpha=float("nan")), x23())


@case
def attr_clip_min_above_max():
    m = one("Clip", [X23], vi("Y", F32, [2, 3]), inits={"lo": np.array(1.0, np.float32), "hi": np.array(-1.0, np.float32)}, node_inputs=["X", "lo", "hi"])
    return mk("attr_clip_min_above_max", m, x23())


def conv_case(name: str, channels: int = 2, **attrs) -> Case:
    """A Conv of 3 kernels 3x3 over a ``[1, channels, 5, 5]`` input, with ``attrs``."""
    m = one("Conv", [vi("X", F32, [1, channels, 5, 5])], Y_ANY, inits={"W": randn(3, channels, 3, 3)}, **attrs)
    return mk(name, m, {"X": randn(1, channels, 5, 5)})


@case
def attr_conv_strides_zero():
    return conv_case("attr_conv_strides_zero", strides=[0, 0])


@case
def attr_conv_dilations_zero():
    return conv_case("attr_conv_dilations_zero", dilations=[0, 0])


@case
def attr_conv_pads_negative():
    return conv_case("attr_conv_pads_negative", pads=[-1, -1, -1, -1])


@case
def attr_conv_group_mismatch():
    return conv_case("attr_conv_group_mismatch", channels=4, group=3)


@case
def attr_conv_kernel_shape_disagrees():
    return conv_case("attr_conv_kernel_shape_disagrees", kernel_shape=[2, 2])


@case
def attr_maxpool_kernel_zero():
    m = one("MaxPool", [vi("X", F32, [1, 2, 5, 5])], Y_ANY, kernel_shape=[0, 0])
    return mk("attr_maxpool_kernel_zero", m, {"X": randn(1, 2, 5, 5)})


@case
def attr_avgpool_kernel_larger_than_input():
    m = one("AveragePool", [vi("X", F32, [1, 2, 3, 3])], Y_ANY, kernel_shape=[5, 5])
    return mk("attr_avgpool_kernel_larger_than_input", m, {"X": randn(1, 2, 3, 3)})


@case
def attr_unsqueeze_duplicate_axes():
    m = one("Unsqueeze", [X23], Y_ANY, inits={"axes": np.array([0, 0], np.int64)}, node_inputs=["X", "axes"])
    return mk("attr_unsqueeze_duplicate_axes", m, x23())


@case
def attr_squeeze_non_unit_axis():
    m = one("Squeeze", [X23], Y_ANY, inits={"axes": np.array([1], np.int64)}, node_inputs=["X", "axes"])
    return mk("attr_squeeze_non_unit_axis", m, x23())


@case
def attr_split_sizes_disagree():
    node = helper.make_node("Split", ["X", "s"], ["A", "B"], name="bad_Split", axis=1)
    m = model([node], [vi("X", F32, [2, 5])], [vi("A", F32, None), vi("B", F32, None)], inits={"s": np.array([1, 1], np.int64)})
    return mk("attr_split_sizes_disagree", m, {"X": randn(2, 5)})


@case
def attr_gemm_trans_a_is_2():
    """Any non-zero transA means transposed (ORT reads it as a bool)."""
    m = one("Gemm", [vi("A", F32, [4, 3])], vi("Y", F32, [3, 5]), inits={"B": randn(4, 5)}, transA=2)
    return mk("attr_gemm_trans_a_is_2", m, {"A": randn(4, 3)})


# ---------------------------------------------------------------------------
# shapes: zero-size, negative, mismatched


@case
def zero_size_add():
    m = one("Add", [vi("A", F32, [0, 3]), vi("B", F32, [0, 3])], vi("Y", F32, [0, 3]))
    return mk("zero_size_add", m, {"A": np.zeros((0, 3), np.float32), "B": np.zeros((0, 3), np.float32)})


@case
def zero_size_matmul_inner():
    m = one("MatMul", [vi("A", F32, [3, 0]), vi("B", F32, [0, 5])], vi("Y", F32, [3, 5]))
    return mk("zero_size_matmul_inner", m, {"A": np.zeros((3, 0), np.float32), "B": np.zeros((0, 5), np.float32)})


@case
def zero_size_matmul_outer():
    m = one("MatMul", [vi("A", F32, ["n", 4]), vi("B", F32, [4, 5])], vi("Y", F32, ["n", 5]))
    return mk("zero_size_matmul_outer", m, [{"A": np.zeros((0, 4), np.float32), "B": randn(4, 5)}, {"A": randn(2, 4), "B": randn(4, 5)}])


@case
def zero_size_reduce_sum():
    m = one("ReduceSum", [vi("X", F32, [2, 0])], vi("Y", F32, [2, 1]), inits={"axes": np.array([1], np.int64)}, node_inputs=["X", "axes"], opset=13)
    return mk("zero_size_reduce_sum", m, {"X": np.zeros((2, 0), np.float32)})


@case
def zero_size_reduce_max():
    m = one("ReduceMax", [vi("X", F32, [2, 0])], vi("Y", F32, None), axes=[1], opset=13)
    return mk("zero_size_reduce_max", m, {"X": np.zeros((2, 0), np.float32)})


@case
def zero_size_argmax():
    return mk("zero_size_argmax", one("ArgMax", [vi("X", F32, [2, 0])], vi("Y", I64, None), axis=1), {"X": np.zeros((2, 0), np.float32)})


@case
def zero_size_softmax():
    return mk("zero_size_softmax", one("Softmax", [vi("X", F32, [0, 5])], vi("Y", F32, [0, 5]), axis=-1), {"X": np.zeros((0, 5), np.float32)})


@case
def zero_size_concat():
    m = one("Concat", [vi("A", F32, [2, 0]), vi("B", F32, [2, 3])], vi("Y", F32, [2, 3]), axis=1)
    return mk("zero_size_concat", m, {"A": np.zeros((2, 0), np.float32), "B": randn(2, 3)})


@case
def zero_size_gather_indices():
    m = one("Gather", [vi("X", F32, [4, 3]), vi("I", I64, [0])], vi("Y", F32, [0, 3]))
    return mk("zero_size_gather_indices", m, {"X": randn(4, 3), "I": np.zeros((0,), np.int64)})


@case
def zero_size_conv_batch():
    m = one("Conv", [vi("X", F32, ["n", 2, 5, 5])], vi("Y", F32, None), inits={"W": randn(3, 2, 3, 3)})
    return mk("zero_size_conv_batch", m, [{"X": np.zeros((0, 2, 5, 5), np.float32)}, {"X": randn(1, 2, 5, 5)}])


@case
def zero_size_layernorm():
    m = one("LayerNormalization", [vi("X", F32, [0, 4])], vi("Y", F32, [0, 4]), inits={"g": np.ones(4, np.float32)}, node_inputs=["X", "g"])
    return mk("zero_size_layernorm", m, {"X": np.zeros((0, 4), np.float32)})


@case
def negative_dim_declared():
    m = one("Relu", [vi("X", F32, [-5, 3])], vi("Y", F32, [-5, 3]))
    return mk("negative_dim_declared", m, x23())


@case
def feed_shape_mismatch():
    return mk("feed_shape_mismatch", one("Relu", [X23], vi("Y", F32, [2, 3])), {"X": randn(3, 2)})


@case
def feed_rank_mismatch():
    return mk("feed_rank_mismatch", one("Relu", [X23], vi("Y", F32, [2, 3])), {"X": randn(2, 3, 1)})


@case
def feed_dtype_mismatch():
    return mk("feed_dtype_mismatch", one("Relu", [X23], vi("Y", F32, [2, 3])), {"X": np.ones((2, 3), np.int32)})


@case
def declared_output_type_wrong():
    """The graph says the Add's output is int64; it is float."""
    return mk("declared_output_type_wrong", one("Add", [X23, vi("Z", F32, [2, 3])], vi("Y", I64, [2, 3])), {"X": randn(2, 3), "Z": randn(2, 3)})


@case
def declared_output_shape_wrong():
    return mk("declared_output_shape_wrong", one("Relu", [X23], vi("Y", F32, [7, 7])), x23())


@case
def runtime_broadcast_mismatch():
    """Broadcasting fails in the run (symbolic dims), then a good feed on the same session."""
    m = one("Add", [vi("A", F32, ["n"]), vi("B", F32, ["m"])], vi("Y", F32, None))
    return mk("runtime_broadcast_mismatch", m, [{"A": randn(3), "B": randn(4)}, {"A": randn(3), "B": randn(3)}])


@case
def runtime_matmul_mismatch():
    m = one("MatMul", [vi("A", F32, ["n", "k"]), vi("B", F32, ["j", "m"])], vi("Y", F32, None))
    return mk("runtime_matmul_mismatch", m, [{"A": randn(2, 3), "B": randn(4, 5)}, {"A": randn(2, 3), "B": randn(3, 5)}])


@case
def runtime_where_mismatch():
    m = one("Where", [vi("C", BOOL, ["a"]), vi("A", F32, ["b"]), vi("B", F32, ["c"])], vi("Y", F32, None))
    bad = {"C": np.array([True, False]), "A": randn(3), "B": randn(4)}
    good = {"C": np.array([True, False, True]), "A": randn(3), "B": randn(3)}
    return mk("runtime_where_mismatch", m, [bad, good])


@case
def runtime_concat_mismatch():
    m = one("Concat", [vi("A", F32, ["a", "b"]), vi("B", F32, ["c", "d"])], vi("Y", F32, None), axis=0)
    return mk("runtime_concat_mismatch", m, [{"A": randn(2, 3), "B": randn(2, 4)}, {"A": randn(2, 3), "B": randn(1, 3)}])


@case
def runtime_conv_channel_mismatch():
    m = one("Conv", [vi("X", F32, ["n", "c", 5, 5])], vi("Y", F32, None), inits={"W": randn(3, 2, 3, 3)})
    return mk("runtime_conv_channel_mismatch", m, [{"X": randn(1, 4, 5, 5)}, {"X": randn(1, 2, 5, 5)}])


@case
def runtime_layernorm_scale_mismatch():
    m = one("LayerNormalization", [vi("X", F32, ["n", "d"]), vi("G", F32, ["e"])], vi("Y", F32, None))
    return mk("runtime_layernorm_scale_mismatch", m, [{"X": randn(2, 4), "G": randn(3)}, {"X": randn(2, 4), "G": randn(4)}])


def reshape_model(allowzero: int = 0, opset: int = 14) -> onnx.ModelProto:
    node = helper.make_node("Reshape", ["X", "S"], ["R"], name="bad_Reshape", allowzero=allowzero)
    relu = helper.make_node("Relu", ["R"], ["Y"], name="after_Reshape")
    return model([node, relu], [vi("X", F32, ["a", "b"]), vi("S", I64, [None])], [vi("Y", F32, None)], opset=opset)


@case
def reshape_impossible_then_good():
    """A Reshape to an impossible shape from a run-time shape input fails in MLX mid-run; the
    next good feed on the same session works."""
    x = randn(2, 3)
    return mk(
        "reshape_impossible_then_good",
        reshape_model(),
        [{"X": x, "S": np.array([4, 4], np.int64)}, {"X": x, "S": np.array([3, 2], np.int64)}, {"X": x, "S": np.array([5], np.int64)}, {"X": x, "S": np.array([-1], np.int64)}],
    )


@case
def reshape_two_minus_ones():
    x = randn(2, 3)
    return mk("reshape_two_minus_ones", reshape_model(), [{"X": x, "S": np.array([-1, -1], np.int64)}, {"X": x, "S": np.array([6, -1], np.int64)}])


@case
def reshape_negative_two():
    x = randn(2, 3)
    return mk("reshape_negative_two", reshape_model(), [{"X": x, "S": np.array([-2, -3], np.int64)}, {"X": x, "S": np.array([1, 6], np.int64)}])


@case
def reshape_zero_copies_missing_dim():
    x = randn(2, 3)
    return mk("reshape_zero_copies_missing_dim", reshape_model(), [{"X": x, "S": np.array([6, 1, 0], np.int64)}, {"X": x, "S": np.array([0, 3], np.int64)}])


@case
def reshape_allowzero_with_minus_one():
    x = np.zeros((0, 3), np.float32)
    # ONNX: with allowzero, a shape holding both 0 and -1 is invalid; ORT infers something.
    return mk("reshape_allowzero_with_minus_one", reshape_model(allowzero=1), [{"X": x, "S": np.array([0, -1], np.int64)}, {"X": x, "S": np.array([3, 0], np.int64)}], mlx_may_refuse=True)


@case
def reshape_int32_overflow_dims():
    x = randn(2, 3)
    s = np.array([2**33, 3], np.int64)
    return mk("reshape_int32_overflow_dims", reshape_model(), [{"X": x, "S": s}, {"X": x, "S": np.array([3, 2], np.int64)}])


def slice_model() -> onnx.ModelProto:
    node = helper.make_node("Slice", ["X", "st", "en", "ax", "sp"], ["Y"], name="bad_Slice")
    ins = [vi("X", F32, ["a", "b"])] + [vi(n, I64, [None]) for n in ("st", "en", "ax", "sp")]
    return model([node], ins, [vi("Y", F32, None)], opset=13)


@case
def slice_step_zero():
    x = randn(4, 5)
    one_ = np.array([1], np.int64)
    bad = {"X": x, "st": np.array([0], np.int64), "en": np.array([3], np.int64), "ax": one_, "sp": np.array([0], np.int64)}
    good = {"X": x, "st": np.array([0], np.int64), "en": np.array([3], np.int64), "ax": one_, "sp": one_}
    return mk("slice_step_zero", slice_model(), [bad, good])


@case
def slice_extreme_bounds():
    x = randn(4, 5)
    feeds = [
        {"X": x, "st": np.array([INT64_MIN, INT64_MAX], np.int64), "en": np.array([INT64_MAX, INT64_MIN], np.int64), "ax": np.array([0, 1], np.int64), "sp": np.array([1, -1], np.int64)},
        {"X": x, "st": np.array([-100], np.int64), "en": np.array([100], np.int64), "ax": np.array([-1], np.int64), "sp": np.array([INT64_MAX], np.int64)},
        {"X": x, "st": np.array([3], np.int64), "en": np.array([1], np.int64), "ax": np.array([0], np.int64), "sp": np.array([1], np.int64)},
    ]
    return mk("slice_extreme_bounds", slice_model(), feeds)


@case
def slice_axis_oob_runtime():
    x = randn(4, 5)
    one_ = np.array([1], np.int64)
    bad = {"X": x, "st": np.array([0], np.int64), "en": np.array([3], np.int64), "ax": np.array([9], np.int64), "sp": one_}
    bad2 = {"X": x, "st": np.array([0, 0], np.int64), "en": np.array([3, 3], np.int64), "ax": np.array([1, 1], np.int64), "sp": np.array([1, 1], np.int64)}
    good = {"X": x, "st": np.array([0], np.int64), "en": np.array([3], np.int64), "ax": one_, "sp": one_}
    return mk("slice_axis_oob_runtime", slice_model(), [bad, bad2, good])


@case
def high_rank_transpose():
    shape = [1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2]
    perm = list(reversed(range(len(shape))))
    m = one("Transpose", [vi("X", F32, shape)], vi("Y", F32, list(reversed(shape))), perm=perm)
    return mk("high_rank_transpose", m, {"X": randn(*shape)})


@case
def scalar_into_softmax():
    return mk("scalar_into_softmax", one("Softmax", [vi("X", F32, [])], vi("Y", F32, [])), {"X": np.array(1.5, np.float32)})


@case
def scalar_into_matmul():
    m = one("MatMul", [vi("A", F32, []), vi("B", F32, [3])], vi("Y", F32, None))
    return mk("scalar_into_matmul", m, {"A": np.array(2.0, np.float32), "B": randn(3)})


@case
def matmul_1d_by_1d():
    m = one("MatMul", [vi("A", F32, [4]), vi("B", F32, [4])], vi("Y", F32, []))
    return mk("matmul_1d_by_1d", m, {"A": randn(4), "B": randn(4, seed=1)})


# ---------------------------------------------------------------------------
# huge requested allocations: an error, never an OOM kill


def big_error(name: str, m: onnx.ModelProto, feeds, good=None) -> Case:
    runs = [feeds] + ([good] if good is not None else [])
    return mk(name, m, runs, bad_runs=frozenset({0}))


@case
def huge_expand_runtime():
    m = one("Expand", [vi("X", F32, [1]), vi("S", I64, [2])], vi("Y", F32, None))
    return big_error("huge_expand_runtime", m, {"X": randn(1), "S": np.array([HUGE, HUGE], np.int64)}, {"X": randn(1), "S": np.array([2, 3], np.int64)})


@case
def huge_constant_of_shape_runtime():
    m = one("ConstantOfShape", [vi("S", I64, [2])], vi("Y", F32, None), value=helper.make_tensor("v", F32, [1], [1.0]))
    return big_error("huge_constant_of_shape_runtime", m, {"S": np.array([HUGE, HUGE], np.int64)}, {"S": np.array([2, 2], np.int64)})


@case
def huge_constant_of_shape_constant():
    """The shape is an initializer: ORT may fold it, the EP's planner may fold it; neither may
    try to fill 4 TB. Whoever refuses, the process survives."""
    relu = helper.make_node("Add", ["C", "X"], ["Y"], name="after_ConstantOfShape")
    cos = helper.make_node("ConstantOfShape", ["S"], ["C"], name="bad_ConstantOfShape", value=helper.make_tensor("v", F32, [1], [1.0]))
    m = model([cos, relu], [vi("X", F32, [1])], [vi("Y", F32, None)], inits={"S": np.array([HUGE, HUGE], np.int64)})
    return mk("huge_constant_of_shape_constant", m, {"X": randn(1)}, expect="error")


@case
def huge_expand_int_constant():
    """An int64 Expand of constants: the planner's constant folding must not build 1e12
    values."""
    exp = helper.make_node("Expand", ["V", "S"], ["E"], name="bad_Expand")
    add = helper.make_node("Add", ["E", "X"], ["Y"], name="after_Expand")
    m = model([exp, add], [vi("X", I64, [1])], [vi("Y", I64, None)], inits={"V": np.array([3], np.int64), "S": np.array([HUGE, HUGE], np.int64)})
    return mk("huge_expand_int_constant", m, {"X": np.array([1], np.int64)}, expect="error")


@case
def huge_tile_runtime():
    m = one("Tile", [vi("X", F32, [2, 2]), vi("R", I64, [2])], vi("Y", F32, None))
    return big_error("huge_tile_runtime", m, {"X": randn(2, 2), "R": np.array([HUGE, HUGE], np.int64)}, {"X": randn(2, 2), "R": np.array([2, 1], np.int64)})


@case
def huge_range_runtime():
    m = one("Range", [vi("a", I64, []), vi("b", I64, []), vi("d", I64, [])], vi("Y", I64, None), opset=11)
    s = lambda v: np.array(v, np.int64)  # noqa: E731
    return big_error("huge_range_runtime", m, {"a": s(0), "b": s(10**12), "d": s(1)}, {"a": s(0), "b": s(5), "d": s(2)})


@case
def range_delta_zero():
    m = one("Range", [vi("a", F32, []), vi("b", F32, []), vi("d", F32, [])], vi("Y", F32, None), opset=11)
    s = lambda v: np.array(v, np.float32)  # noqa: E731
    return mk("range_delta_zero", m, [{"a": s(0), "b": s(10), "d": s(0)}, {"a": s(0), "b": s(3), "d": s(0.5)}])


@case
def range_nan_limit():
    m = one("Range", [vi("a", F32, []), vi("b", F32, []), vi("d", F32, [])], vi("Y", F32, None), opset=11)
    s = lambda v: np.array(v, np.float32)  # noqa: E731
    return mk("range_nan_limit", m, [{"a": s(0), "b": s(np.nan), "d": s(1)}, {"a": s(0), "b": s(np.inf), "d": s(1)}, {"a": s(0), "b": s(3), "d": s(1)}], free_runs=frozenset({0, 1}))


@case
def huge_pad_runtime():
    m = one("Pad", [vi("X", F32, [2, 2]), vi("P", I64, [4])], vi("Y", F32, None))
    return big_error("huge_pad_runtime", m, {"X": randn(2, 2), "P": np.array([HUGE, HUGE, 0, 0], np.int64)}, {"X": randn(2, 2), "P": np.array([1, 0, 0, 1], np.int64)})


@case
def huge_resize_scales():
    m = one("Resize", [vi("X", F32, [1, 1, 2, 2]), vi("R", F32, [0]), vi("Sc", F32, [4])], vi("Y", F32, None), node_inputs=["X", "R", "Sc"], mode="nearest", opset=13)
    bad = {"X": randn(1, 1, 2, 2), "R": np.zeros(0, np.float32), "Sc": np.array([1, 1, 1e6, 1e6], np.float32)}
    good = {"X": randn(1, 1, 2, 2), "R": np.zeros(0, np.float32), "Sc": np.array([1, 1, 2, 2], np.float32)}
    return big_error("huge_resize_scales", m, bad, good)


@case
def huge_broadcast_add():
    m = one("Add", [vi("A", F32, ["n", 1]), vi("B", F32, [1, "m"])], vi("Y", F32, None))
    bad = {"A": np.zeros((HUGE, 1), np.float32), "B": np.zeros((1, HUGE), np.float32)}
    good = {"A": randn(2, 1), "B": randn(1, 3)}
    return big_error("huge_broadcast_add", m, bad, good)


@case
def constant_of_shape_negative():
    m = one("ConstantOfShape", [vi("S", I64, [2])], vi("Y", F32, None), value=helper.make_tensor("v", F32, [1], [1.0]))
    return mk("constant_of_shape_negative", m, [{"S": np.array([-3, 2], np.int64)}, {"S": np.array([2, 2], np.int64)}])


# ---------------------------------------------------------------------------
# out-of-range indices and integer traps


@case
def gather_index_oob_runtime():
    m = one("Gather", [vi("X", F32, [3, 2]), vi("I", I64, [2])], vi("Y", F32, [2, 2]))
    x = randn(3, 2)
    return mk("gather_index_oob_runtime", m, [{"X": x, "I": np.array([1, 100000000], np.int64)}, {"X": x, "I": np.array([2, -3], np.int64)}])


@case
def gather_index_negative_oob_runtime():
    m = one("Gather", [vi("X", F32, [3, 2]), vi("I", I64, [2])], vi("Y", F32, [2, 2]))
    x = randn(3, 2)
    return mk("gather_index_negative_oob_runtime", m, [{"X": x, "I": np.array([-4, 0], np.int64)}, {"X": x, "I": np.array([-1, 0], np.int64)}])


@case
def gather_index_int32_oob():
    m = one("Gather", [vi("X", F32, [3, 2]), vi("I", I32, [2])], vi("Y", F32, [2, 2]), axis=0)
    x = randn(3, 2)
    return mk("gather_index_int32_oob", m, [{"X": x, "I": np.array([3, 0], np.int32)}, {"X": x, "I": np.array([2, 1], np.int32)}])


@case
def gather_index_oob_computed():
    """The indices are computed (Add), so no host copy of them exists before the run."""
    add = helper.make_node("Add", ["I", "J"], ["K"], name="compute_indices")
    g = helper.make_node("Gather", ["X", "K"], ["Y"], name="bad_Gather", axis=1)
    m = model([add, g], [vi("X", F32, [2, 3]), vi("I", I64, [2]), vi("J", I64, [2])], [vi("Y", F32, [2, 2])])
    x = randn(2, 3)
    return mk("gather_index_oob_computed", m, [{"X": x, "I": np.array([1, 2], np.int64), "J": np.array([0, 5], np.int64)}, {"X": x, "I": np.array([1, 2], np.int64), "J": np.array([0, -5], np.int64)}])


@case
def gather_index_oob_constant():
    m = one("Gather", [vi("X", F32, [3, 2])], vi("Y", F32, None), inits={"I": np.array([0, 7], np.int64)}, node_inputs=["X", "I"])
    return mk("gather_index_oob_constant", m, {"X": randn(3, 2)})


@case
def gather_elements_index_oob():
    m = one("GatherElements", [vi("X", F32, [2, 3]), vi("I", I64, [2, 2])], vi("Y", F32, [2, 2]), axis=1)
    x = randn(2, 3)
    return mk("gather_elements_index_oob", m, [{"X": x, "I": np.array([[0, 3], [1, 2]], np.int64)}, {"X": x, "I": np.array([[0, -3], [1, 2]], np.int64)}])


@case
def scatter_elements_index_oob():
    m = one("ScatterElements", [vi("X", F32, [3, 3]), vi("I", I64, [1, 2]), vi("U", F32, [1, 2])], vi("Y", F32, [3, 3]), axis=1)
    x, u = randn(3, 3), randn(1, 2, seed=1)
    return mk("scatter_elements_index_oob", m, [{"X": x, "I": np.array([[1, 3]], np.int64), "U": u}, {"X": x, "I": np.array([[1, -4]], np.int64), "U": u}, {"X": x, "I": np.array([[1, -3]], np.int64), "U": u}])


@case
def scatter_nd_index_oob():
    m = one("ScatterND", [vi("X", F32, [4, 2]), vi("I", I64, [2, 1]), vi("U", F32, [2, 2])], vi("Y", F32, [4, 2]))
    x, u = randn(4, 2), randn(2, 2, seed=1)
    return mk("scatter_nd_index_oob", m, [{"X": x, "I": np.array([[0], [100]], np.int64), "U": u}, {"X": x, "I": np.array([[0], [-5]], np.int64), "U": u}, {"X": x, "I": np.array([[0], [-1]], np.int64), "U": u}])


@case
def gather_nd_index_oob():
    m = one("GatherND", [vi("X", F32, [3, 2]), vi("I", I64, [2, 1])], vi("Y", F32, [2, 2]))
    x = randn(3, 2)
    return mk("gather_nd_index_oob", m, [{"X": x, "I": np.array([[0], [3]], np.int64)}, {"X": x, "I": np.array([[0], [-4]], np.int64)}, {"X": x, "I": np.array([[2], [-3]], np.int64)}])


@case
def topk_k_out_of_range():
    m = one("TopK", [vi("X", F32, [2, 5]), vi("K", I64, [1])], vi("V", F32, None), node_inputs=["X", "K"])
    m.graph.node[0].output.append("Ix")
    m.graph.output.append(vi("Ix", I64, None))
    x = randn(2, 5)
    return mk("topk_k_out_of_range", m, [{"X": x, "K": np.array([7], np.int64)}, {"X": x, "K": np.array([-1], np.int64)}, {"X": x, "K": np.array([0], np.int64)}, {"X": x, "K": np.array([3], np.int64)}])


@case
def onehot_bad_depth():
    m = one("OneHot", [vi("I", I64, [3]), vi("D", I64, []), vi("V", F32, [2])], vi("Y", F32, None), axis=-1)
    v = np.array([0, 1], np.float32)
    i = np.array([0, 2, -1], np.int64)
    return mk("onehot_bad_depth", m, [{"I": i, "D": np.array(-3, np.int64), "V": v}, {"I": i, "D": np.array(10**12, np.int64), "V": v}, {"I": i, "D": np.array(4, np.int64), "V": v}], bad_runs=frozenset({1}))


@case
def compress_condition_too_long():
    m = one("Compress", [vi("X", F32, [3, 2]), vi("C", BOOL, [None])], vi("Y", F32, None), axis=0)
    x = randn(3, 2)
    return mk("compress_condition_too_long", m, [{"X": x, "C": np.array([True, False, True, True, True])}, {"X": x, "C": np.array([True, False, True])}, {"X": x, "C": np.array([False])}])


@case
def reverse_sequence_lengths_oob():
    m = one("ReverseSequence", [vi("X", F32, [4, 2]), vi("L", I64, [2])], vi("Y", F32, [4, 2]), batch_axis=1, time_axis=0)
    x = randn(4, 2)
    return mk("reverse_sequence_lengths_oob", m, [{"X": x, "L": np.array([9, 1], np.int64)}, {"X": x, "L": np.array([-2, 1], np.int64)}, {"X": x, "L": np.array([4, 2], np.int64)}])


@case
def bitshift_by_64_and_more():
    m = one("BitShift", [vi("A", T.UINT64, [4]), vi("B", T.UINT64, [4])], vi("Y", T.UINT64, [4]), direction="LEFT", opset=11)
    a = np.array([1, 3, 5, 7], np.uint64)
    b = np.array([1, 63, 64, 1000], np.uint64)

    def check(i, outs):
        np.testing.assert_array_equal(outs[0][:2], np.array([2, np.uint64(1) << np.uint64(63)], np.uint64))

    return mk("bitshift_by_64_and_more", m, {"A": a, "B": b}, expect="any", check=check)


@case
def depth_to_space_bad_blocksize():
    m = one("DepthToSpace", [vi("X", F32, [1, 8, 2, 2])], vi("Y", F32, None), blocksize=3)
    return mk("depth_to_space_bad_blocksize", m, {"X": randn(1, 8, 2, 2)})


@case
def cumsum_axis_oob_runtime():
    m = one("CumSum", [vi("X", F32, [2, 3]), vi("A", I64, [])], vi("Y", F32, [2, 3]), node_inputs=["X", "A"])
    x = randn(2, 3)
    return mk("cumsum_axis_oob_runtime", m, [{"X": x, "A": np.array(5, np.int64)}, {"X": x, "A": np.array(-3, np.int64)}, {"X": x, "A": np.array(-1, np.int64)}])


@case
def eyelike_huge():
    m = one("EyeLike", [vi("X", F32, ["n", "m"])], vi("Y", F32, None), k=INT64_MAX)
    return mk("eyelike_huge", m, [{"X": randn(3, 4)}, {"X": np.zeros((0, 4), np.float32)}])


@case
def upsample_huge_scales():
    m = one("Upsample", [vi("X", F32, [1, 1, 2, 2]), vi("S", F32, [4])], vi("Y", F32, None), mode="nearest", opset=9)
    bad = {"X": randn(1, 1, 2, 2), "S": np.array([1, 1, 1e6, 1e6], np.float32)}
    good = {"X": randn(1, 1, 2, 2), "S": np.array([1, 1, 2, 3], np.float32)}
    return big_error("upsample_huge_scales", m, bad, good)


@case
def conv_transpose_huge_output_shape():
    m = one("ConvTranspose", [vi("X", F32, [1, 1, 2, 2])], vi("Y", F32, None), inits={"W": randn(1, 1, 2, 2)}, output_shape=[HUGE, HUGE])
    return mk("conv_transpose_huge_output_shape", m, {"X": randn(1, 1, 2, 2)})


@case
def nonzero_of_zero_size():
    m = one("NonZero", [vi("X", F32, ["a", "b"])], vi("Y", I64, None))
    return mk("nonzero_of_zero_size", m, [{"X": np.zeros((0, 3), np.float32)}, {"X": np.array([[0, 1], [np.nan, 0]], np.float32)}])


def int_binary(op: str, dt=I32, **attrs) -> onnx.ModelProto:
    return one(op, [vi("A", dt, [4]), vi("B", dt, [4])], vi("Y", dt, [4]), **attrs)


def safe_lanes(expected: Callable[[np.ndarray, np.ndarray], np.ndarray], a: np.ndarray, b: np.ndarray, lanes: Sequence[int]):
    def check(i: int, outs: list[np.ndarray]) -> None:
        if i == 0:
            got = outs[0][list(lanes)]
            want = expected(a, b)[list(lanes)]
            np.testing.assert_array_equal(got, want)

    return check


@case
def int_div_by_zero():
    """ORT's CPU EP dies of SIGFPE here; the MLX EP must not. The result of x/0 is undefined,
    the other lanes must be right."""
    a = np.array([7, -7, 9, 5], np.int32)
    b = np.array([2, 0, -4, 0], np.int32)
    trunc = lambda x, y: (np.trunc(x / np.where(y == 0, 1, y))).astype(x.dtype)  # noqa: E731
    return mk("int_div_by_zero", int_binary("Div"), [{"A": a, "B": b}, {"A": a, "B": np.array([1, 2, 3, 4], np.int32)}], free_runs=frozenset({0}), check=safe_lanes(trunc, a, b, [0, 2]))


@case
def int_div_int_min_by_minus_one():
    mn = np.iinfo(np.int32).min
    a = np.array([mn, mn, 8, -8], np.int32)
    b = np.array([-1, 1, -1, 3], np.int32)

    def check(i, outs):
        np.testing.assert_array_equal(outs[0][1:], np.array([mn, -8, -2], np.int32))

    return mk("int_div_int_min_by_minus_one", int_binary("Div"), {"A": a, "B": b}, expect="any", check=check)


@case
def int64_div_by_zero():
    a = np.array([7, -7, 9, 5], np.int64)
    b = np.array([2, 0, -4, 0], np.int64)
    trunc = lambda x, y: (np.trunc(x / np.where(y == 0, 1, y))).astype(x.dtype)  # noqa: E731
    return mk("int64_div_by_zero", int_binary("Div", I64), {"A": a, "B": b}, expect="any", check=safe_lanes(trunc, a, b, [0, 2]))


@case
def uint_div_by_zero():
    a = np.array([7, 7, 9, 5], np.uint32)
    b = np.array([2, 0, 4, 0], np.uint32)
    return mk("uint_div_by_zero", int_binary("Div", T.UINT32), {"A": a, "B": b}, expect="any", check=safe_lanes(lambda x, y: x // np.where(y == 0, 1, y), a, b, [0, 2]))


@case
def int_mod_by_zero():
    a = np.array([7, -7, 9, 5], np.int32)
    b = np.array([2, 0, -4, 0], np.int32)
    return mk("int_mod_by_zero", int_binary("Mod"), {"A": a, "B": b}, expect="any", check=safe_lanes(lambda x, y: np.mod(x, np.where(y == 0, 1, y)), a, b, [0, 2]))


@case
def int_fmod_by_zero_and_min():
    mn = np.iinfo(np.int32).min
    a = np.array([7, -7, mn, 5], np.int32)
    b = np.array([2, 0, -1, 0], np.int32)
    return mk("int_fmod_by_zero_and_min", int_binary("Mod", fmod=1), {"A": a, "B": b}, expect="any", check=safe_lanes(lambda x, y: np.fmod(x, np.where(y == 0, 1, y)), a, b, [0, 2]))


@case
def int_div_by_zero_constant():
    m = one("Div", [vi("A", I32, [3])], vi("Y", I32, [3]), inits={"B": np.array([0, 1, 0], np.int32)}, node_inputs=["A", "B"])
    return mk("int_div_by_zero_constant", m, {"A": np.array([4, 5, 6], np.int32)}, expect="any")


# ---------------------------------------------------------------------------
# NaN and Inf in feeds


NAN_X = np.array([[np.nan, 1.0, -np.inf], [np.inf, np.nan, 0.0], [-1.0, 2.0, 3.0]], np.float32)


def nan_case(name: str, op: str, out_elem=F32, out_shape=None, **attrs) -> Case:
    m = one(op, [vi("X", F32, [3, 3])], vi("Y", out_elem, out_shape), **attrs)
    return mk(name, m, {"X": NAN_X})


@case
def nan_relu():
    return nan_case("nan_relu", "Relu")


@case
def nan_softmax():
    return nan_case("nan_softmax", "Softmax", axis=1)


@case
def nan_sigmoid_tanh_exp():
    nodes = [helper.make_node(op, ["X"], [f"Y{i}"], name=f"nan_{op}") for i, op in enumerate(["Sigmoid", "Tanh", "Exp", "Log", "Sqrt"])]
    m = model(nodes, [vi("X", F32, [3, 3])], [vi(f"Y{i}", F32, [3, 3]) for i in range(5)])
    return mk("nan_sigmoid_tanh_exp", m, {"X": NAN_X})


@case
def nan_erf():
    """ORT 1.23's CPU Erf gives 1 for NaN; the reference here is math.erf."""
    import math

    m = one("Erf", [vi("X", F32, [3, 3])], vi("Y", F32, [3, 3]))

    def check(i, outs):
        want = np.array([[math.erf(v) for v in row] for row in NAN_X.astype(np.float64)], np.float32)
        np.testing.assert_allclose(outs[0], want, rtol=1e-5, atol=1e-6)

    return mk("nan_erf", m, {"X": NAN_X}, expect="any", check=check)


@case
def nan_reduce_max_min():
    """ORT's ReduceMax/Min keep or drop a NaN depending on where it is in the row (row 1:
    inf); ONNX doesn't say. The MLX EP propagates NaN as NumPy does; Sum must agree with NumPy
    exactly, Mean to one float32 rounding step (MLX's CUDA mean rounds 4/3 the other way)."""
    nodes = [helper.make_node(op, ["X"], [f"Y{i}"], name=f"nan_{op}", axes=[1], keepdims=0) for i, op in enumerate(["ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean"])]
    m = model(nodes, [vi("X", F32, [3, 3])], [vi(f"Y{i}", F32, [3]) for i in range(4)], opset=11)

    def check(i, outs):
        for got, ref in zip(outs, (np.max, np.min, np.sum, np.mean)):
            if ref is np.mean:
                np.testing.assert_allclose(got, ref(NAN_X, axis=1), rtol=2.4e-7, atol=0)
            else:
                np.testing.assert_array_equal(got, ref(NAN_X, axis=1))

    return mk("nan_reduce_max_min", m, {"X": NAN_X}, expect="any", check=check)


@case
def nan_argmax_argmin():
    nodes = [helper.make_node(op, ["X"], [f"Y{i}"], name=f"nan_{op}", axis=1, keepdims=0) for i, op in enumerate(["ArgMax", "ArgMin"])]
    m = model(nodes, [vi("X", F32, [3, 3])], [vi(f"Y{i}", I64, [3]) for i in range(2)])
    return mk("nan_argmax_argmin", m, {"X": NAN_X})


@case
def nan_max_min_variadic():
    nodes = [helper.make_node(op, ["X", "Z"], [f"Y{i}"], name=f"nan_{op}") for i, op in enumerate(["Max", "Min"])]
    m = model(nodes, [vi("X", F32, [3, 3]), vi("Z", F32, [3, 3])], [vi(f"Y{i}", F32, [3, 3]) for i in range(2)])
    return mk("nan_max_min_variadic", m, {"X": NAN_X, "Z": np.zeros((3, 3), np.float32)})


@case
def nan_clip():
    m = one("Clip", [vi("X", F32, [3, 3])], vi("Y", F32, [3, 3]), inits={"lo": np.array(-0.5, np.float32), "hi": np.array(0.5, np.float32)}, node_inputs=["X", "lo", "hi"])
    return mk("nan_clip", m, {"X": NAN_X})


@case
def nan_matmul_gemm():
    mm = helper.make_node("MatMul", ["X", "X"], ["Y0"], name="nan_MatMul")
    gm = helper.make_node("Gemm", ["X", "X"], ["Y1"], name="nan_Gemm", transB=1)
    m = model([mm, gm], [vi("X", F32, [3, 3])], [vi("Y0", F32, [3, 3]), vi("Y1", F32, [3, 3])])
    return mk("nan_matmul_gemm", m, {"X": NAN_X})


@case
def nan_comparisons():
    nodes = [helper.make_node(op, ["X", "Z"], [f"Y{i}"], name=f"nan_{op}") for i, op in enumerate(["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])]
    m = model(nodes, [vi("X", F32, [3, 3]), vi("Z", F32, [3, 3])], [vi(f"Y{i}", BOOL, [3, 3]) for i in range(5)], opset=16)
    return mk("nan_comparisons", m, {"X": NAN_X, "Z": NAN_X.T.copy()})


@case
def nan_isnan_isinf_where():
    isnan = helper.make_node("IsNaN", ["X"], ["C"], name="nan_IsNaN")
    where = helper.make_node("Where", ["C", "Z", "X"], ["Y0"], name="nan_Where")
    isinf = helper.make_node("IsInf", ["X"], ["Y1"], name="nan_IsInf")
    m = model([isnan, where, isinf], [vi("X", F32, [3, 3]), vi("Z", F32, [3, 3])], [vi("Y0", F32, [3, 3]), vi("Y1", BOOL, [3, 3])])
    return mk("nan_isnan_isinf_where", m, {"X": NAN_X, "Z": np.zeros((3, 3), np.float32)})


@case
def nan_layernorm():
    m = one("LayerNormalization", [vi("X", F32, [3, 3])], vi("Y", F32, [3, 3]), inits={"g": np.ones(3, np.float32)}, node_inputs=["X", "g"])
    return mk("nan_layernorm", m, {"X": NAN_X})


@case
def nan_maxpool():
    """ONNX leaves NaN in MaxPool unspecified and ORT's answer depends on its kernel (SIMD max
    drops NaN or not). Windows without NaN must be exact; the MLX EP propagates NaN."""
    x = randn(1, 1, 4, 4)
    x[0, 0, 0, 0] = np.nan
    x[0, 0, 3, 3] = np.inf
    x[0, 0, 2, 0] = -np.inf
    m = one("MaxPool", [vi("X", F32, [1, 1, 4, 4])], vi("Y", F32, None), kernel_shape=[2, 2])

    def check(i, outs):
        y = outs[0][0, 0]
        assert y.shape == (3, 3), y.shape
        for r in range(3):
            for c in range(3):
                w = x[0, 0, r : r + 2, c : c + 2]
                if np.isnan(w).any():
                    assert np.isnan(y[r, c]), (r, c, y[r, c])
                else:
                    assert y[r, c] == w.max(), (r, c, y[r, c], w)

    return mk("nan_maxpool", m, {"X": x}, expect="any", check=check)


@case
def inf_float16_overflow():
    a = np.array([60000, -60000, 1], np.float16)
    m = one("Add", [vi("A", F16, [3]), vi("B", F16, [3])], vi("Y", F16, [3]))
    return mk("inf_float16_overflow", m, {"A": a, "B": a})


@case
def nan_cast_to_int():
    """NaN/Inf to int32 is undefined in C; only the finite lanes are compared."""
    m = one("Cast", [vi("X", F32, [3, 3])], vi("Y", I32, [3, 3]), to=I32)

    def check(i, outs):
        finite = np.isfinite(NAN_X)
        np.testing.assert_array_equal(outs[0][finite], NAN_X[finite].astype(np.int32))

    return mk("nan_cast_to_int", m, {"X": NAN_X}, expect="any", check=check)


@case
def double_inputs():
    m = one("MatMul", [vi("A", F64, [2, 3]), vi("B", F64, [3, 2])], vi("Y", F64, [2, 2]))
    return mk("double_inputs", m, {"A": randn(2, 3).astype(np.float64), "B": randn(3, 2).astype(np.float64)})


# ---------------------------------------------------------------------------
# domains and opsets


@case
def unknown_domain():
    node = helper.make_node("Frobnicate", ["X"], ["Y"], name="bad_Frobnicate", domain="com.example.nothing")
    m = model([node], [X23], [vi("Y", F32, [2, 3])], opsets={"com.example.nothing": 1})
    return mk("unknown_domain", m, x23())


@case
def unknown_domain_no_opset_import():
    node = helper.make_node("Relu", ["X"], ["Y"], name="bad_Relu", domain="com.example.undeclared")
    m = model([node], [X23], [vi("Y", F32, [2, 3])])
    return mk("unknown_domain_no_opset_import", m, x23())


@case
def opset_from_the_future():
    return mk("opset_from_the_future", one("Relu", [X23], vi("Y", F32, [2, 3]), opset=99), x23())


@case
def opset_too_old():
    return mk("opset_too_old", one("Relu", [X23], vi("Y", F32, [2, 3]), opset=1), x23())


@case
def explicit_ai_onnx_domain():
    node = helper.make_node("Relu", ["X"], ["Y"], name="relu_ai_onnx", domain="ai.onnx")
    m = model([node], [X23], [vi("Y", F32, [2, 3])], opsets={"ai.onnx": 17})
    return mk("explicit_ai_onnx_domain", m, x23())


@case
def com_microsoft_wrong_version():
    node = helper.make_node("FastGelu", ["X"], ["Y"], name="bad_FastGelu", domain="com.microsoft")
    m = model([node], [X23], [vi("Y", F32, [2, 3])], opsets={"com.microsoft": 999})
    return mk("com_microsoft_wrong_version", m, x23())


@case
def ir_version_from_the_future():
    m = one("Relu", [X23], vi("Y", F32, [2, 3]))
    m.ir_version = 99
    return mk("ir_version_from_the_future", m, x23())


# ---------------------------------------------------------------------------
# names and graph structure


@case
def duplicate_producer():
    a = helper.make_node("Relu", ["X"], ["Y"], name="dup_a")
    b = helper.make_node("Neg", ["X"], ["Y"], name="dup_b")
    m = model([a, b], [X23], [vi("Y", F32, [2, 3])])
    return mk("duplicate_producer", m, x23())


@case
def node_overwrites_graph_input():
    a = helper.make_node("Relu", ["X"], ["X"], name="overwrite_input")
    m = model([a], [X23], [vi("X", F32, [2, 3])])
    return mk("node_overwrites_graph_input", m, x23())


@case
def dangling_input():
    a = helper.make_node("Add", ["X", "nowhere"], ["Y"], name="dangling_Add")
    return mk("dangling_input", model([a], [X23], [vi("Y", F32, [2, 3])]), x23())


@case
def dangling_graph_output():
    a = helper.make_node("Relu", ["X"], ["Y"], name="ok_Relu")
    return mk("dangling_graph_output", model([a], [X23], [vi("Y", F32, [2, 3]), vi("Z", F32, [2, 3])]), x23())


@case
def cycle():
    a = helper.make_node("Relu", ["B"], ["A"], name="cycle_a")
    b = helper.make_node("Add", ["A", "X"], ["B"], name="cycle_b")
    c = helper.make_node("Neg", ["B"], ["Y"], name="cycle_c")
    return mk("cycle", model([a, b, c], [X23], [vi("Y", F32, [2, 3])]), x23())


@case
def empty_graph_identity():
    """No nodes: the output is the input."""
    return mk("empty_graph_identity", model([], [X23], [vi("X", F32, [2, 3])]), x23())


@case
def graph_without_outputs():
    a = helper.make_node("Relu", ["X"], ["Y"], name="no_output_Relu")
    return mk("graph_without_outputs", model([a], [X23], []), x23())


@case
def graph_without_nodes_or_inputs():
    return mk("graph_without_nodes_or_inputs", model([], [], [vi("C", F32, [2])], inits={"C": np.array([1.0, 2.0], np.float32)}), {})


@case
def output_listed_twice():
    a = helper.make_node("Relu", ["X"], ["Y"], name="twice_Relu")
    return mk("output_listed_twice", model([a], [X23], [vi("Y", F32, [2, 3]), vi("Y", F32, [2, 3])]), x23())


@case
def outputs_input_initializer_and_node():
    a = helper.make_node("Relu", ["X"], ["R"], name="mixed_Relu")
    b = helper.make_node("Add", ["R", "W"], ["Y"], name="mixed_Add")
    m = model([a, b], [X23], [vi("X", F32, [2, 3]), vi("W", F32, [3]), vi("R", F32, [2, 3]), vi("Y", F32, [2, 3])], inits={"W": np.array([1, 2, 3], np.float32)})
    return mk("outputs_input_initializer_and_node", m, x23())


@case
def empty_and_duplicate_node_names():
    nodes = [helper.make_node("Relu", ["X"], ["A"], name=""), helper.make_node("Neg", ["A"], ["B"], name="same"), helper.make_node("Abs", ["B"], ["Y"], name="same")]
    return mk("empty_and_duplicate_node_names", model(nodes, [X23], [vi("Y", F32, [2, 3])]), x23())


@case
def very_long_names():
    long = "v" * 20000
    nodes = [helper.make_node("Relu", ["X"], [long], name="n" * 20000), helper.make_node("Neg", [long], ["Y"], name="neg_after_long")]
    return mk("very_long_names", model(nodes, [X23], [vi("Y", F32, [2, 3])]), x23())


@case
def odd_bytes_in_names():
    """Names with quotes, NUL-free control characters and non-ASCII text."""
    odd = "we'ird \"name\"\t\u00e9\u4e2d\U0001f600/..%s%n"
    nodes = [helper.make_node("Relu", ["X"], [odd], name=odd), helper.make_node("Neg", [odd], ["Y"], name=odd + "2")]
    return mk("odd_bytes_in_names", model(nodes, [X23], [vi("Y", F32, [2, 3])]), x23())


@case
def invalid_utf8_name():
    """A value name that is not UTF-8 (protobuf edit at the byte level)."""
    nodes = [helper.make_node("Relu", ["X"], ["AAAA"], name="utf8_relu"), helper.make_node("Neg", ["AAAA"], ["Y"], name="utf8_neg")]
    data = model(nodes, [X23], [vi("Y", F32, [2, 3])]).SerializeToString()
    assert data.count(b"AAAA") == 2
    return mk("invalid_utf8_name", data.replace(b"AAAA", b"\xff\xfe\xc3\x28"), x23())


@case
def empty_value_name_as_output():
    a = helper.make_node("Relu", ["X"], [""], name="empty_out_Relu")
    b = helper.make_node("Neg", ["X"], ["Y"], name="empty_out_Neg")
    return mk("empty_value_name_as_output", model([a, b], [X23], [vi("Y", F32, [2, 3])]), x23())


@case
def deep_chain():
    n = 3000
    nodes = [helper.make_node("Neg" if i % 2 else "Relu", [f"v{i}" if i else "X"], [f"v{i + 1}" if i < n - 1 else "Y"], name=f"chain{i}") for i in range(n)]
    return mk("deep_chain", model(nodes, [X23], [vi("Y", F32, [2, 3])]), x23())


@case
def wide_concat_and_sum():
    k = 400
    ins = [vi(f"x{i}", F32, [1, 2]) for i in range(k)]
    cat = helper.make_node("Concat", [f"x{i}" for i in range(k)], ["Y0"], name="wide_Concat", axis=0)
    sm = helper.make_node("Sum", [f"x{i}" for i in range(k)], ["Y1"], name="wide_Sum")
    m = model([cat, sm], ins, [vi("Y0", F32, [k, 2]), vi("Y1", F32, [1, 2])])
    return mk("wide_concat_and_sum", m, {f"x{i}": randn(1, 2, seed=i) for i in range(k)})


# ---------------------------------------------------------------------------
# initializers


def raw_init(name: str, elem: int, dims: Sequence[int], raw: bytes) -> onnx.TensorProto:
    t = onnx.TensorProto(name=name, data_type=elem)
    t.dims.extend(dims)
    t.raw_data = raw
    return t


def init_add(t: onnx.TensorProto, shape=(2, 3)) -> onnx.ModelProto:
    a = helper.make_node("Add", ["X", t.name], ["Y"], name="init_Add")
    return model([a], [vi("X", F32, list(shape))], [vi("Y", F32, None)], inits=[t])


@case
def initializer_bytes_short():
    return mk("initializer_bytes_short", init_add(raw_init("W", F32, [2, 3], b"\0" * 20)), x23())


@case
def initializer_bytes_long():
    return mk("initializer_bytes_long", init_add(raw_init("W", F32, [2, 3], b"\0" * 40)), x23())


@case
def initializer_negative_dim():
    return mk("initializer_negative_dim", init_add(raw_init("W", F32, [-2, 3], b"\0" * 24)), x23())


@case
def initializer_undefined_dtype():
    return mk("initializer_undefined_dtype", init_add(raw_init("W", 0, [2, 3], b"\0" * 24)), x23())


@case
def initializer_typed_data_short():
    t = onnx.TensorProto(name="W", data_type=F32)
    t.dims.extend([2, 3])
    t.float_data.extend([1.0, 2.0])
    return mk("initializer_typed_data_short", init_add(t), x23())


@case
def initializer_huge_dims_small_data():
    return mk("initializer_huge_dims_small_data", init_add(raw_init("W", F32, [HUGE, HUGE], b"\0" * 24)), x23())


@case
def initializer_missing_external_file():
    t = raw_init("W", F32, [2, 3], b"")
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    for k, v in (("location", "definitely_missing.bin"), ("offset", "0"), ("length", "24")):
        e = t.external_data.add()
        e.key, e.value = k, v
    return mk("initializer_missing_external_file", init_add(t), x23())


@case
def initializer_overridable_by_feed():
    """An initializer that is also a graph input is a default, not a constant: a feed
    replaces it."""
    t = numpy_helper.from_array(np.array([1, 2, 3], np.float32), "W")
    a = helper.make_node("Add", ["X", "W"], ["Y"], name="override_Add")
    m = model([a], [X23, vi("W", F32, [3])], [vi("Y", F32, [2, 3])], inits=[t])
    x = randn(2, 3)
    return mk("initializer_overridable_by_feed", m, [{"X": x}, {"X": x, "W": np.array([10, 20, 30], np.float32)}, {"X": x}])


@case
def constant_node_bad_tensor():
    c = helper.make_node("Constant", [], ["C"], name="bad_Constant", value=raw_init("v", F32, [3], b"\0" * 5))
    a = helper.make_node("Add", ["X", "C"], ["Y"], name="after_Constant")
    return mk("constant_node_bad_tensor", model([c, a], [X23], [vi("Y", F32, None)]), x23())


@case
def constant_node_two_values():
    c = helper.make_node("Constant", [], ["C"], name="bad_Constant2", value_float=1.0, value_int=2)
    a = helper.make_node("Add", ["X", "C"], ["Y"], name="after_Constant2")
    return mk("constant_node_two_values", model([c, a], [X23], [vi("Y", F32, None)]), x23())


# ---------------------------------------------------------------------------
# subgraphs


@case
def if_branches_read_outer_values():
    """If branches read values produced outside (by nodes the EP may claim)."""
    then_add = helper.make_node("Add", ["R", "X"], ["t_out"], name="then_Add")
    else_mul = helper.make_node("Mul", ["R", "R"], ["e_out"], name="else_Mul")
    then_g = helper.make_graph([then_add], "then", [], [vi("t_out", F32, [2, 3])])
    else_g = helper.make_graph([else_mul], "else", [], [vi("e_out", F32, [2, 3])])
    relu = helper.make_node("Relu", ["X"], ["R"], name="outer_Relu")
    iff = helper.make_node("If", ["C"], ["I"], name="the_If", then_branch=then_g, else_branch=else_g)
    neg = helper.make_node("Neg", ["I"], ["Y"], name="after_If")
    m = model([relu, iff, neg], [X23, vi("C", BOOL, [])], [vi("Y", F32, [2, 3])])
    x = randn(2, 3)
    return mk("if_branches_read_outer_values", m, [{"X": x, "C": np.array(True)}, {"X": x, "C": np.array(False)}])


@case
def loop_body_reads_outer_value():
    body_add = helper.make_node("Add", ["acc_in", "R"], ["acc_out"], name="body_Add")
    body_id = helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond")
    body = helper.make_graph(
        [body_add, body_id], "body", [vi("i", I64, []), vi("cond_in", BOOL, []), vi("acc_in", F32, [2, 3])], [vi("cond_out", BOOL, []), vi("acc_out", F32, [2, 3])]
    )
    relu = helper.make_node("Relu", ["X"], ["R"], name="outer_Relu")
    loop = helper.make_node("Loop", ["N", "", "X"], ["Y"], name="the_Loop", body=body)
    m = model([relu, loop], [X23, vi("N", I64, [])], [vi("Y", F32, [2, 3])])
    return mk("loop_body_reads_outer_value", m, [{"X": randn(2, 3), "N": np.array(5, np.int64)}, {"X": randn(2, 3), "N": np.array(0, np.int64)}])


@case
def if_branch_reads_missing_outer():
    then_add = helper.make_node("Add", ["nowhere", "X"], ["t_out"], name="then_bad_Add")
    then_g = helper.make_graph([then_add], "then", [], [vi("t_out", F32, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Identity", ["X"], ["e_out"], name="else_id")], "else", [], [vi("e_out", F32, [2, 3])])
    iff = helper.make_node("If", ["C"], ["Y"], name="bad_If", then_branch=then_g, else_branch=else_g)
    m = model([iff], [X23, vi("C", BOOL, [])], [vi("Y", F32, [2, 3])])
    return mk("if_branch_reads_missing_outer", m, {"X": randn(2, 3), "C": np.array(True)})


@case
def if_branches_disagree_on_shape():
    then_g = helper.make_graph([helper.make_node("Relu", ["X"], ["t_out"], name="then_Relu")], "then", [], [vi("t_out", F32, None)])
    else_g = helper.make_graph([helper.make_node("Transpose", ["X"], ["e_out"], name="else_T")], "else", [], [vi("e_out", F32, None)])
    iff = helper.make_node("If", ["C"], ["I"], name="shape_If", then_branch=then_g, else_branch=else_g)
    neg = helper.make_node("Neg", ["I"], ["Y"], name="after_shape_If")
    m = model([iff, neg], [X23, vi("C", BOOL, [])], [vi("Y", F32, None)])
    return mk("if_branches_disagree_on_shape", m, [{"X": randn(2, 3), "C": np.array(True)}, {"X": randn(2, 3), "C": np.array(False)}])


# ---------------------------------------------------------------------------
# process safety: a run that fails inside MLX leaves the session usable


@case
def mlx_failure_midway_then_good():
    """A chain whose middle node fails in MLX for one feed (a run-time shape): the failed run
    leaves nothing behind, and good feeds before and after give the right results."""
    relu = helper.make_node("Relu", ["X"], ["R"], name="pre_Relu")
    rs = helper.make_node("Reshape", ["R", "S"], ["Q"], name="mid_Reshape")
    mm = helper.make_node("MatMul", ["Q", "W"], ["Y"], name="post_MatMul")
    m = model([relu, rs, mm], [vi("X", F32, [4, 6]), vi("S", I64, [2]), vi("W", F32, ["k", 2])], [vi("Y", F32, None)])
    x, w = randn(4, 6), randn(8, 2, seed=2)
    good = {"X": x, "S": np.array([3, 8], np.int64), "W": w}
    bad_reshape = {"X": x, "S": np.array([5, 5], np.int64), "W": w}
    bad_matmul = {"X": x, "S": np.array([3, 8], np.int64), "W": randn(7, 2)}
    return mk("mlx_failure_midway_then_good", m, [good, bad_reshape, good, bad_matmul, good])
