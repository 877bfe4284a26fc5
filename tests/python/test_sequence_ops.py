"""Sequence and Optional ops on MLX, against ORT's CPU EP.

Sequences are plan-time lists of tensors inside one fused node, and optional tensors are a
tensor or None there: the models' graph outputs are tensors. An optional(tensor) graph input
is read by OptionalHasElement and OptionalGetElement (the EP asks ORT whether it holds a
tensor); other sequence or optional values that would cross the fused node's boundary stay
on ORT's CPU EP."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from conftest import assert_all_on_mlx, assert_on_cpu, check_against_cpu, make_session, run

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _model(nodes, inputs, outputs, initializers=(), opset=18):
    graph = helper.make_graph(nodes, "seq", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _i64(name, values):
    return helper.make_tensor(name, I64, [] if np.ndim(values) == 0 else [len(values)], np.atleast_1d(values).tolist())


def _all_on_mlx(model, feeds, **tol):
    # ORT's optimizer removes Identity nodes before partitioning.
    ops = sorted({n.op_type for n in model.graph.node} - {"Identity"})
    check_against_cpu(model, feeds, ops, all_on_mlx=True, **tol)


X = np.arange(2 * 6 * 3, dtype=np.float32).reshape(2, 6, 3)


def _split_model(split=None, axis=1, keepdims=None, at=None, concat_axis=None, new_axis=0, split_rank=1):
    attrs = {"axis": axis}
    if keepdims is not None:
        attrs["keepdims"] = keepdims
    inits = []
    ins = ["X"]
    if split is not None:
        inits.append(_i64("split", split if split_rank == 1 else int(split)))
        ins.append("split")
    nodes = [helper.make_node("SplitToSequence", ins, ["S"], **attrs)]
    outputs = []
    if at is not None:
        inits.append(_i64("pos", at))
        nodes.append(helper.make_node("SequenceAt", ["S", "pos"], ["Y"]))
        outputs.append(helper.make_tensor_value_info("Y", F, None))
    if concat_axis is not None:
        nodes.append(helper.make_node("ConcatFromSequence", ["S"], ["Z"], axis=concat_axis, new_axis=new_axis))
        outputs.append(helper.make_tensor_value_info("Z", F, None))
    nodes.append(helper.make_node("SequenceLength", ["S"], ["N"]))
    outputs.append(helper.make_tensor_value_info("N", I64, []))
    return _model(nodes, [helper.make_tensor_value_info("X", F, list(X.shape))], outputs, inits)


@pytest.mark.parametrize(
    "split,split_rank,axis,keepdims",
    [
        (None, 1, 1, None),  # size-1 chunks, keepdims default 1
        (None, 1, 1, 0),  # size-1 chunks squeezed
        (None, 1, -1, 0),  # negative axis
        (None, 1, 0, 1),
        (4, 0, 1, None),  # scalar split, last chunk smaller (4 + 2)
        (2, 0, -2, None),
        (1, 0, -2, 0),  # ORT squeezes scalar-split parts when keepdims=0 (they must be size 1)
        ([1, 2, 3], 1, 1, None),  # 1-D split
        ([3, 3], 1, -2, 0),
    ],
)
@pytest.mark.parametrize("at", [0, -1])
def test_split_to_sequence_at(split, split_rank, axis, keepdims, at):
    model = _split_model(split, axis, keepdims, at=at, split_rank=split_rank)
    _all_on_mlx(model, {"X": X})


@pytest.mark.parametrize("concat_axis,new_axis", [(1, 0), (-2, 0), (0, 0), (1, 1), (0, 1), (-1, 1), (3, 1)])
@pytest.mark.parametrize("keepdims", [None, 0])
def test_split_then_concat(concat_axis, new_axis, keepdims):
    if keepdims == 0 and new_axis == 1 and concat_axis == 3:
        concat_axis = 2
    model = _split_model(None, 1, keepdims, concat_axis=concat_axis, new_axis=new_axis)
    _all_on_mlx(model, {"X": X})


def _construct_model(extra_nodes, outputs, inits=(), n=3):
    inputs = [helper.make_tensor_value_info(f"X{i}", F, [2, 3]) for i in range(n)]
    nodes = [helper.make_node("SequenceConstruct", [f"X{i}" for i in range(n)], ["S"])] + extra_nodes
    return _model(nodes, inputs, outputs, inits)


def _feeds(n=3):
    rng = np.random.default_rng(0)
    return {f"X{i}": rng.standard_normal((2, 3)).astype(np.float32) for i in range(n)}


@pytest.mark.parametrize("axis,new_axis", [(0, 0), (1, 0), (-1, 0), (0, 1), (2, 1), (-3, 1)])
def test_construct_concat(axis, new_axis):
    model = _construct_model(
        [helper.make_node("ConcatFromSequence", ["S"], ["Y"], axis=axis, new_axis=new_axis),
         helper.make_node("SequenceLength", ["S"], ["N"])],
        [helper.make_tensor_value_info("Y", F, None), helper.make_tensor_value_info("N", I64, [])],
    )
    _all_on_mlx(model, _feeds())


@pytest.mark.parametrize("pos", [None, 0, 1, 3, -1, -3])
def test_insert(pos):
    ins = ["S", "T"] + ([] if pos is None else ["p"])
    inits = [] if pos is None else [_i64("p", pos)]
    model = _model(
        [helper.make_node("SequenceConstruct", ["X0", "X1", "X2"], ["S"]),
         helper.make_node("SequenceInsert", ins, ["S2"]),
         helper.make_node("ConcatFromSequence", ["S2"], ["Y"], axis=0, new_axis=1),
         helper.make_node("SequenceLength", ["S2"], ["N"])],
        [helper.make_tensor_value_info(n, F, [2, 3]) for n in ["X0", "X1", "X2", "T"]],
        [helper.make_tensor_value_info("Y", F, None), helper.make_tensor_value_info("N", I64, [])],
        inits,
    )
    feeds = _feeds()
    feeds["T"] = np.full((2, 3), 7.0, np.float32)
    _all_on_mlx(model, feeds)


@pytest.mark.parametrize("pos", [None, 0, 1, 2, -1, -3])
def test_erase(pos):
    ins = ["S"] + ([] if pos is None else ["p"])
    inits = [] if pos is None else [_i64("p", pos)]
    model = _construct_model(
        [helper.make_node("SequenceErase", ins, ["S2"]),
         helper.make_node("ConcatFromSequence", ["S2"], ["Y"], axis=1),
         helper.make_node("SequenceLength", ["S2"], ["N"])],
        [helper.make_tensor_value_info("Y", F, None), helper.make_tensor_value_info("N", I64, [])],
        inits,
    )
    _all_on_mlx(model, _feeds())


def test_empty_then_insert():
    model = _model(
        [helper.make_node("SequenceEmpty", [], ["E"], dtype=F),
         helper.make_node("SequenceInsert", ["E", "A"], ["S1"]),
         helper.make_node("SequenceInsert", ["S1", "B", "p"], ["S2"]),
         helper.make_node("Identity", ["S2"], ["S3"]),
         helper.make_node("SequenceAt", ["S3", "q"], ["Y"]),
         helper.make_node("ConcatFromSequence", ["S3"], ["Z"], axis=-1, new_axis=1)],
        [helper.make_tensor_value_info(n, F, [2, 3]) for n in ["A", "B"]],
        [helper.make_tensor_value_info("Y", F, None), helper.make_tensor_value_info("Z", F, None)],
        [_i64("p", 0), _i64("q", 1)],
    )
    rng = np.random.default_rng(1)
    _all_on_mlx(model, {"A": rng.standard_normal((2, 3)).astype(np.float32), "B": rng.standard_normal((2, 3)).astype(np.float32)})


def test_sequence_of_int64_and_computed_tensors():
    # Elements computed on MLX, then combined.
    model = _model(
        [helper.make_node("Add", ["A", "A"], ["A2"]),
         helper.make_node("SequenceConstruct", ["A", "A2"], ["S"]),
         helper.make_node("ConcatFromSequence", ["S"], ["Y"], axis=0),
         helper.make_node("Mul", ["Y", "Y"], ["Z"])],
        [helper.make_tensor_value_info("A", I64, [2, 2])],
        [helper.make_tensor_value_info("Z", I64, None)],
    )
    _all_on_mlx(model, {"A": np.arange(4, dtype=np.int64).reshape(2, 2)})


# --- Optional ------------------------------------------------------------------------------


def test_optional_present():
    model = _model(
        [helper.make_node("Optional", ["X"], ["O"]),
         helper.make_node("Identity", ["O"], ["O2"]),
         helper.make_node("OptionalHasElement", ["O2"], ["H"]),
         helper.make_node("OptionalGetElement", ["O2"], ["Y0"]),
         helper.make_node("Relu", ["Y0"], ["Y"])],
        [helper.make_tensor_value_info("X", F, [2, 3])],
        [helper.make_tensor_value_info("H", TensorProto.BOOL, []), helper.make_tensor_value_info("Y", F, None)],
    )
    _all_on_mlx(model, {"X": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)})


def test_optional_of_tensor_input_forms():
    # Opset 18: HasElement / GetElement of a plain tensor, and HasElement with no input.
    model = _model(
        [helper.make_node("OptionalHasElement", ["X"], ["H"]),
         helper.make_node("OptionalHasElement", [], ["E"]),
         helper.make_node("OptionalHasElement", [""], ["E2"]),
         helper.make_node("OptionalGetElement", ["X"], ["Y0"]),
         helper.make_node("Neg", ["Y0"], ["Y"])],
        [helper.make_tensor_value_info("X", F, [3])],
        [helper.make_tensor_value_info(n, TensorProto.BOOL, []) for n in ["H", "E", "E2"]]
        + [helper.make_tensor_value_info("Y", F, None)],
    )
    _all_on_mlx(model, {"X": np.array([1, 2, 3], np.float32)})


def test_optional_none_has_element():
    tp = helper.make_tensor_type_proto(F, [2])
    model = _model(
        [helper.make_node("Optional", [], ["O"], type=tp),
         helper.make_node("OptionalHasElement", ["O"], ["H"]),
         helper.make_node("Not", ["H"], ["NH"]),
         helper.make_node("Cast", ["NH"], ["C"], to=F),
         helper.make_node("Mul", ["X", "C"], ["Y"])],
        [helper.make_tensor_value_info("X", F, [2])],
        [helper.make_tensor_value_info("Y", F, None)],
    )
    _all_on_mlx(model, {"X": np.array([1.5, -2], np.float32)})


def _optional_input_model(elem=F, dims=(2,)):
    opt = helper.make_value_info("O", helper.make_optional_type_proto(helper.make_tensor_type_proto(elem, list(dims))))
    return _model(
        [helper.make_node("OptionalHasElement", ["O"], ["H"]),
         helper.make_node("Not", ["H"], ["NH"]),
         helper.make_node("Cast", ["NH"], ["C"], to=F),
         helper.make_node("Mul", ["X", "C"], ["Y"])],
        [opt, helper.make_tensor_value_info("X", F, [2])],
        [helper.make_tensor_value_info("H", TensorProto.BOOL, []), helper.make_tensor_value_info("Y", F, None)],
    )


@pytest.mark.parametrize("elem", [F, I64, TensorProto.INT32], ids=["f32", "i64", "i32"])
def test_optional_graph_input_has_element(elem):
    """The same session sees a present and an absent optional input; the bool result feeds MLX
    nodes of the same fused node."""
    model = _optional_input_model(elem)
    x = np.array([1.5, -2], np.float32)
    present = np.array([3, 4], helper.tensor_dtype_to_np_dtype(elem))
    session = make_session(model)
    for o in [present, None, present]:
        feeds = {"O": o, "X": x}
        expected = run(make_session(model, mlx=False), feeds)
        got = run(session, feeds)
        assert got[0] == expected[0] and bool(got[0]) == (o is not None)
        np.testing.assert_array_equal(got[1], expected[1])
    assert_all_on_mlx(session)


def test_optional_graph_input_get_element():
    opt = helper.make_value_info("O", helper.make_optional_type_proto(helper.make_tensor_type_proto(F, ["n"])))
    model = _model(
        [helper.make_node("OptionalGetElement", ["O"], ["E"]), helper.make_node("Relu", ["E"], ["Y"])],
        [opt],
        [helper.make_tensor_value_info("Y", F, None)],
    )
    feeds = {"O": np.array([-1, 0.5, 2], np.float32)}
    check_against_cpu(model, feeds, ["OptionalGetElement", "Relu"], all_on_mlx=True)
    # an absent input: both EPs fail the run cleanly, and the session stays usable
    session = make_session(model)
    with pytest.raises(Exception):
        run(make_session(model, mlx=False), {"O": None})
    with pytest.raises(Exception):
        run(session, {"O": None})
    np.testing.assert_array_equal(run(session, feeds)[0], [0, 0.5, 2])


def test_optional_graph_input_other_readers_declined():
    """Only the optional ops read an optional graph input (it may hold nothing)."""
    opt = helper.make_value_info("O", helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2])))
    opt_out = helper.make_value_info("P", helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2])))
    model = _model([helper.make_node("Identity", ["O"], ["P"])], [opt], [opt_out])
    session = make_session(model, opt_level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    out = run(session, {"O": np.array([1, 2], np.float32)})
    np.testing.assert_array_equal(out[0], [1, 2])
    assert_on_cpu(session, ["Identity"])


# --- declined ------------------------------------------------------------------------------


def test_sequence_graph_output_declined():
    seq_out = helper.make_tensor_sequence_value_info("S", F, None)
    model = _model(
        [helper.make_node("SplitToSequence", ["X"], ["S"], axis=0)],
        [helper.make_tensor_value_info("X", F, [2, 3])],
        [seq_out],
    )
    session = make_session(model)
    out = run(session, {"X": np.ones((2, 3), np.float32)})
    assert len(out[0]) == 2
    assert_on_cpu(session, ["SplitToSequence"])


def test_sequence_graph_input_declined():
    model = _model(
        [helper.make_node("ConcatFromSequence", ["S"], ["Y"], axis=0)],
        [helper.make_tensor_sequence_value_info("S", F, None)],
        [helper.make_tensor_value_info("Y", F, None)],
    )
    session = make_session(model)
    out = run(session, {"S": [np.ones((2, 3), np.float32), np.zeros((1, 3), np.float32)]})
    assert out[0].shape == (3, 3)
    assert_on_cpu(session, ["ConcatFromSequence"])


def test_runtime_position_declined():
    model = _construct_model(
        [helper.make_node("SequenceAt", ["S", "p"], ["Y"])],
        [helper.make_tensor_value_info("Y", F, None)],
        n=2,
    )
    model.graph.input.append(helper.make_tensor_value_info("p", I64, []))
    feeds = _feeds(2)
    feeds["p"] = np.array(1, np.int64)
    session = make_session(model)
    out = run(session, feeds)
    np.testing.assert_array_equal(out[0], feeds["X1"])
    assert_on_cpu(session, ["SequenceAt"])


def test_optional_graph_output_declined():
    opt_out = helper.make_value_info("O", helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2])))
    model = _model(
        [helper.make_node("Optional", ["X"], ["O"])],
        [helper.make_tensor_value_info("X", F, [2])],
        [opt_out],
    )
    session = make_session(model)
    out = run(session, {"X": np.array([1, 2], np.float32)})
    np.testing.assert_array_equal(out[0], [1, 2])
    assert_on_cpu(session, ["Optional"])
