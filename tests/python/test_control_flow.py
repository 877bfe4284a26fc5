"""Control flow on MLX: If, Loop and Scan with their bodies lowered as plans.

Every test checks placement (the control-flow node and its bodies ran on MLX) and compares
with ORT's CPU EP.

ORT 1.23 gives a fused node no inputs for the values a body reads from the enclosing graph
(implicit inputs) unless another fused node reads them too, so there the EP leaves such a
control-flow node to ORT's CPU EP (and 1.23.0 then runs the whole graph there); models marked
``reads_outer_values`` are checked for that decline on 1.23 instead."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import (
    CPU_EP,
    HAS_ASSIGNMENT_INFO,
    assert_all_on_mlx,
    assert_outputs_match,
    make_session,
    mlx_ep_devices,
    placements,
    run,
)

F = TensorProto.FLOAT
I64 = TensorProto.INT64
B = TensorProto.BOOL
OPSET = 17
ORT_1_23 = ort.__version__.startswith("1.23")


def model(nodes, inputs, outputs, initializers=(), opset=OPSET):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def check(m, feeds, *, rtol=1e-5, atol=1e-5, reads_outer_values=False):
    """Runs on MLX and on the CPU EP; every node must be on MLX and outputs must match (on
    ORT 1.23, a model whose bodies read runtime values of the enclosing graph that no other
    node reads must instead keep its control-flow nodes off MLX)."""
    expected = run(make_session(m, mlx=False), feeds)
    session = make_session(m)
    actual = run(session, feeds)
    assert_outputs_match(actual, expected, rtol=rtol, atol=atol, names=[o.name for o in session.get_outputs()])
    if ORT_1_23 and reads_outer_values:
        control = [p for p in placements(session) if p.op_type in ("If", "Loop", "Scan")]
        assert control and all(p.ep == CPU_EP for p in control), control
    else:
        assert_all_on_mlx(session)
    return session, actual


def const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value)))


# ---------------------------------------------------------------------------------------------
# If


def if_model(then_shape_differs=False):
    """y = If(sum(x) > 0) then (x * w + b) else (x - b), reading x, w, b from the outer scope;
    with ``then_shape_differs`` the then-branch returns a flattened result."""
    then_nodes = [helper.make_node("Mul", ["x", "w"], ["t0"]), helper.make_node("Add", ["t0", "b"], ["t1"])]
    then_out = "t1"
    if then_shape_differs:
        then_nodes.append(helper.make_node("Flatten", ["t1"], ["t2"], axis=0))
        then_out = "t2"
    then_g = helper.make_graph(then_nodes, "then", [], [vi(then_out, F, None)])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "b"], ["e0"])], "else", [], [vi("e0", F, None)])
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        const("zero", np.float32(0)),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Relu", ["y"], ["z"]),
    ]
    w = numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "w")
    return model(nodes, [vi("x", F, [3, 4]), vi("b", F, [4])], [vi("z", F, None)], [w])


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_host_condition_both_branches(sign):
    rng = np.random.default_rng(0)
    x = (np.abs(rng.standard_normal((3, 4))) * sign).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    check(if_model(), {"x": x, "b": b}, reads_outer_values=True)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_branch_output_shapes_differ(sign):
    x = (np.arange(12, dtype=np.float32).reshape(3, 4) + 1) * sign
    b = np.ones(4, np.float32)
    _, (z,) = check(if_model(then_shape_differs=True), {"x": x, "b": b}, reads_outer_values=True)
    assert z.shape == ((1, 12) if sign > 0 else (3, 4))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_device_condition_selects_with_where(sign):
    """A condition computed on the device with two cheap elementwise branches of the same
    declared shape: both are computed and `where` selects (no host read); NaNs of the branch
    not taken don't leak."""
    then_g = helper.make_graph([helper.make_node("Log", ["x"], ["t"])], "then", [], [vi("t", F, [2, 3])])
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e0"]), helper.make_node("Exp", ["e0"], ["e"])], "else", [], [vi("e", F, [2, 3])]
    )
    m = model(
        [
            helper.make_node("ReduceMin", ["x"], ["lo"], keepdims=0),
            const("zero", np.float32(0)),
            helper.make_node("Greater", ["lo", "zero"], ["c"]),
            helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
        ],
        [vi("x", F, [2, 3])],
        [vi("y", F, [2, 3])],
    )
    x = (np.arange(6, dtype=np.float32).reshape(2, 3) + 0.5) * sign
    check(m, {"x": x})


def test_nested_if():
    """An If inside a branch of an If; the inner branch reads a value of the outermost scope."""
    inner_then = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["it"])], "it", [], [vi("it", F, None)])
    inner_else = helper.make_graph([helper.make_node("Neg", ["x"], ["ie"])], "ie", [], [vi("ie", F, None)])
    outer_then = helper.make_graph(
        [
            helper.make_node("If", ["c2"], ["r"], then_branch=inner_then, else_branch=inner_else),
            helper.make_node("Add", ["r", "x"], ["ot"]),
        ],
        "ot",
        [],
        [vi("ot", F, None)],
    )
    outer_else = helper.make_graph([helper.make_node("Identity", ["x"], ["oe"])], "oe", [], [vi("oe", F, None)])
    m = model(
        [helper.make_node("If", ["c1"], ["y"], then_branch=outer_then, else_branch=outer_else)],
        [vi("c1", B, []), vi("c2", B, []), vi("x", F, [2, 3])],
        [vi("y", F, None)],
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    for c1 in (True, False):
        for c2 in (True, False):
            check(m, {"c1": np.array(c1), "c2": np.array(c2), "x": x}, reads_outer_values=True)


# ---------------------------------------------------------------------------------------------
# Loop


def loop_model(with_m: bool, with_cond: bool):
    """Loop carrying (acc, step) with a scan output; the body reads the outer initializers
    `scale` and `limit` and stops once acc's sum reaches `limit`."""
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Mul", ["i_f", "scale"], ["inc"]),
            helper.make_node("Add", ["acc_in", "inc"], ["acc_out"]),
            helper.make_node("Add", ["step_in", "one"], ["step_out"]),
            helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["cond_out"]),
            helper.make_node("Identity", ["acc_out"], ["scan"]),
        ],
        "body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("acc_in", F, [2]), vi("step_in", I64, [])],
        [vi("cond_out", B, []), vi("acc_out", F, [2]), vi("step_out", I64, []), vi("scan", F, [2])],
        initializer=[numpy_helper.from_array(np.int64(1), "one")],
    )
    inputs = [vi("acc0", F, [2])]
    inits = [
        numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "scale"),
        numpy_helper.from_array(np.float32(30.0), "limit"),
    ]
    loop_inputs = ["", "", "acc0", "step0"]
    if with_m:
        inputs.append(vi("M", I64, []))
        loop_inputs[0] = "M"
    if with_cond:
        inputs.append(vi("c0", B, []))
        loop_inputs[1] = "c0"
    nodes = [
        const("step0", np.int64(0)),
        helper.make_node("Loop", loop_inputs, ["acc", "steps", "scans"], body=body),
    ]
    return model(nodes, inputs, [vi("acc", F, [2]), vi("steps", I64, []), vi("scans", F, None)], inits)


@pytest.mark.parametrize(
    "with_m,with_cond,m,c0",
    [(True, False, 5, None), (False, True, None, True), (True, True, 20, True), (True, True, 6, False), (True, False, 0, None)],
)
def test_loop_forms(with_m, with_cond, m, c0):
    feeds = {"acc0": np.array([0.5, -1.0], np.float32)}
    if with_m:
        feeds["M"] = np.array(m, np.int64)
    if with_cond:
        feeds["c0"] = np.array(c0)
    check(loop_model(with_m, with_cond), feeds)


def test_loop_carried_shape_grows():
    """A carried value that grows every iteration (concatenation) stays on the device."""
    body = helper.make_graph(
        [
            helper.make_node("Concat", ["seq_in", "x"], ["seq_out"], axis=0),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("seq_in", F, [None, 3])],
        [vi("cond_out", B, []), vi("seq_out", F, [None, 3])],
    )
    m = model(
        [helper.make_node("Loop", ["M", "", "seq0"], ["seq"], body=body)],
        [vi("M", I64, []), vi("seq0", F, [1, 3]), vi("x", F, [1, 3])],
        [vi("seq", F, [None, 3])],
    )
    check(
        m,
        {"M": np.array(4, np.int64), "seq0": np.zeros((1, 3), np.float32), "x": np.ones((1, 3), np.float32)},
        reads_outer_values=True,
    )


def test_if_nested_in_loop():
    """An If inside a Loop body chooses per iteration (on the iteration number's parity) and
    reads the body's carried value and the outer initializer `k`."""
    then_g = helper.make_graph([helper.make_node("Mul", ["x_in", "k"], ["t"])], "then", [], [vi("t", F, None)])
    else_g = helper.make_graph([helper.make_node("Sub", ["x_in", "k"], ["e"])], "else", [], [vi("e", F, None)])
    body = helper.make_graph(
        [
            helper.make_node("Mod", ["i", "two"], ["parity"]),
            helper.make_node("Equal", ["parity", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["x_out"], then_branch=then_g, else_branch=else_g),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("x_in", F, [2])],
        [vi("cond_out", B, []), vi("x_out", F, [2]), ],
    )
    m = model(
        [helper.make_node("Loop", ["M", "", "x0"], ["x"], body=body)],
        [vi("M", I64, []), vi("x0", F, [2])],
        [vi("x", F, [2])],
        [
            numpy_helper.from_array(np.float32(1.5), "k"),
            numpy_helper.from_array(np.int64(2), "two"),
            numpy_helper.from_array(np.int64(0), "zero"),
        ],
    )
    for trips in (0, 1, 4, 7):
        check(m, {"M": np.array(trips, np.int64), "x0": np.array([1.0, -3.0], np.float32)})


@pytest.mark.parametrize("trips", [1, 5, 40])
def test_loop_constant_trip_count(trips):
    """A constant trip count with a pass-through condition: small counts are unrolled into the
    enclosing plan (one closure), larger ones run as a device loop; same results."""
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["i_f"], to=F),
            helper.make_node("Mul", ["acc_in", "decay"], ["scaled"]),
            helper.make_node("Add", ["scaled", "i_f"], ["acc_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
        ],
        "body",
        [vi("i", I64, []), vi("cond_in", B, []), vi("acc_in", F, [3])],
        [vi("cond_out", B, []), vi("acc_out", F, [3]), vi("total", F, [])],
    )
    m = model(
        [
            const("M", np.int64(trips)),
            helper.make_node("Loop", ["M", "", "acc0"], ["acc", "totals"], body=body),
            helper.make_node("Relu", ["acc"], ["y"]),
        ],
        [vi("acc0", F, [3])],
        [vi("y", F, [3]), vi("totals", F, [trips])],
        [numpy_helper.from_array(np.float32(0.9), "decay")],
    )
    check(m, {"acc0": np.array([1.0, -2.0, 3.0], np.float32)}, rtol=1e-5, atol=1e-4)


def test_if_constant_condition():
    """A condition known when the model loads: the chosen branch joins the enclosing plan."""
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [], [vi("t", F, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", F, None)])
    for c in (True, False):
        m = model(
            [
                const("c", np.array(c)),
                helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
                helper.make_node("Add", ["y", "x"], ["z"]),
            ],
            [vi("x", F, [4])],
            [vi("z", F, [4])],
        )
        check(m, {"x": np.array([1.0, -2.0, 3.0, 0.5], np.float32)})


# ---------------------------------------------------------------------------------------------
# Scan


def scan_model(in_axis=0, in_dir=0, out_axis=0, out_dir=0, opset=OPSET):
    """Scan with a running sum state over the rows (or columns) of x, emitting the running
    sum and x*2 per iteration."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "xi"], ["s_out"]),
            helper.make_node("Mul", ["xi", "two"], ["y"]),
        ],
        "body",
        [vi("s_in", F, [3]), vi("xi", F, [3])],
        [vi("s_out", F, [3]), vi("y", F, [3])],
    )
    nodes = [
        const("two", np.float32(2)),
        helper.make_node(
            "Scan",
            ["s0", "x"],
            ["s", "ys"],
            body=body,
            num_scan_inputs=1,
            scan_input_axes=[in_axis],
            scan_input_directions=[in_dir],
            scan_output_axes=[out_axis],
            scan_output_directions=[out_dir],
        ),
    ]
    x_shape = [4, 3] if in_axis in (0, -2) else [3, 4]
    return model(nodes, [vi("s0", F, [3]), vi("x", F, x_shape)], [vi("s", F, [3]), vi("ys", F, None)], opset=opset)


@pytest.mark.parametrize(
    "in_axis,in_dir,out_axis,out_dir",
    [(0, 0, 0, 0), (0, 1, 0, 0), (1, 0, 0, 0), (0, 0, 1, 0), (0, 0, 0, 1), (-1, 1, -1, 1)],
)
def test_scan_axes_and_directions(in_axis, in_dir, out_axis, out_dir):
    m = scan_model(in_axis, in_dir, out_axis, out_dir)
    shape = (4, 3) if in_axis == 0 else (3, 4)
    x = np.arange(12, dtype=np.float32).reshape(shape)
    check(m, {"s0": np.zeros(3, np.float32), "x": x})


def test_scan_opset9():
    m = scan_model(opset=9)
    check(m, {"s0": np.ones(3, np.float32), "x": np.arange(12, dtype=np.float32).reshape(4, 3)})


@pytest.mark.parametrize("directions", [[0], [1]])
def test_scan_opset8_batched(directions):
    """Scan-8: a batch axis first, time second; each batch element runs the body over time."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "xi"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "xi"], ["y"]),
        ],
        "body",
        [vi("s_in", F, [2]), vi("xi", F, [2])],
        [vi("s_out", F, [2]), vi("y", F, [2])],
    )
    m = model(
        [helper.make_node("Scan", ["", "s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1, directions=directions)],
        [vi("s0", F, [3, 2]), vi("x", F, [3, 4, 2])],
        [vi("s", F, [3, 2]), vi("ys", F, [3, 4, 2])],
        opset=8,
    )
    rng = np.random.default_rng(5)
    check(m, {"s0": rng.standard_normal((3, 2)).astype(np.float32), "x": rng.standard_normal((3, 4, 2)).astype(np.float32)})


# ---------------------------------------------------------------------------------------------
# Models


def vad_model():
    """A VAD-style model (as Silero's): one `state` input [2, 1, 1, hidden] is split into the
    LSTM's h and c; an energy gate chooses between running the LSTM over the frames (speech)
    and keeping the state (silence); the weights come from the outer scope; the new state is
    concatenated back."""
    hidden, feat, frames = 8, 5, 6
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array((rng.standard_normal((1, 4 * hidden, feat)) * 0.3).astype(np.float32), "W")
    r = numpy_helper.from_array((rng.standard_normal((1, 4 * hidden, hidden)) * 0.3).astype(np.float32), "R")
    bias = numpy_helper.from_array((rng.standard_normal((1, 8 * hidden)) * 0.1).astype(np.float32), "Bias")
    head = numpy_helper.from_array((rng.standard_normal((hidden, 1)) * 0.5).astype(np.float32), "Head")
    speech = helper.make_graph(
        [
            helper.make_node("LSTM", ["frames", "W", "R", "Bias", "", "h0", "c0"], ["Y", "Yh", "Yc"], hidden_size=hidden),
            helper.make_node("Squeeze", ["Yh", "ax0"], ["h"]),
            helper.make_node("MatMul", ["h", "Head"], ["logit"]),
            helper.make_node("Sigmoid", ["logit"], ["prob"]),
        ],
        "speech",
        [],
        [vi("prob", F, [1, 1]), vi("Yh", F, [1, 1, hidden]), vi("Yc", F, [1, 1, hidden])],
    )
    silence = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["h0", "ax12"], ["p0"], keepdims=0),
            helper.make_node("Mul", ["p0", "zero"], ["p"]),
            helper.make_node("Reshape", ["p", "shape11"], ["prob0"]),
            helper.make_node("Identity", ["h0"], ["h_same"]),
            helper.make_node("Identity", ["c0"], ["c_same"]),
        ],
        "silence",
        [],
        [vi("prob0", F, [1, 1]), vi("h_same", F, [1, 1, hidden]), vi("c_same", F, [1, 1, hidden])],
    )
    nodes = [
        helper.make_node("Split", ["state"], ["h0_", "c0_"], axis=0, num_outputs=2),
        helper.make_node("Squeeze", ["h0_", "ax0"], ["h0"]),
        helper.make_node("Squeeze", ["c0_", "ax0"], ["c0"]),
        helper.make_node("Mul", ["frames", "frames"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["energy"], keepdims=0),
        helper.make_node("Greater", ["energy", "threshold"], ["is_speech"]),
        helper.make_node("If", ["is_speech"], ["prob_out", "h_out", "c_out"], then_branch=speech, else_branch=silence),
        helper.make_node("Concat", ["h_out", "c_out"], ["hc"], axis=0),
        helper.make_node("Unsqueeze", ["hc", "ax1"], ["state_out"]),
    ]
    inits = [
        w, r, bias, head,
        numpy_helper.from_array(np.array([0], np.int64), "ax0"),
        numpy_helper.from_array(np.array([1], np.int64), "ax1"),
        numpy_helper.from_array(np.array([1, 2], np.int64), "ax12"),
        numpy_helper.from_array(np.array([1, 1], np.int64), "shape11"),
        numpy_helper.from_array(np.float32(0), "zero"),
        numpy_helper.from_array(np.float32(0.05), "threshold"),
    ]
    m = model(
        nodes,
        [vi("frames", F, [frames, 1, feat]), vi("state", F, [2, 1, 1, hidden])],
        [vi("prob_out", F, [1, 1]), vi("state_out", F, [2, 1, 1, hidden])],
        inits,
        opset=18,
    )
    return m, (frames, feat, hidden)


@pytest.mark.parametrize("loud", [True, False])
def test_vad_if_lstm(loud):
    m, (frames, feat, hidden) = vad_model()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((frames, 1, feat)).astype(np.float32) * (1.0 if loud else 0.01)
    state = rng.standard_normal((2, 1, 1, hidden)).astype(np.float32) * 0.1
    session = make_session(m)
    reference = make_session(m, mlx=False)
    for _ in range(3):  # the state carries over, as in a streaming VAD
        expected = run(reference, {"frames": x, "state": state})
        actual = run(session, {"frames": x, "state": state})
        assert_outputs_match(actual, expected, rtol=1e-4, atol=1e-5)
        state = actual[1]
    assert_all_on_mlx(session)


def greedy_decode_model(vocab=11, hidden=6, max_len=8, eos=3):
    """A greedy decoder: Loop over steps; each step embeds the last token, mixes it with the
    carried state (tanh RNN cell), projects to logits, takes the ArgMax, and stops at EOS.
    The tokens are the scan output."""
    rng = np.random.default_rng(3)
    emb = numpy_helper.from_array(rng.standard_normal((vocab, hidden)).astype(np.float32), "Emb")
    wh = numpy_helper.from_array((rng.standard_normal((hidden, hidden)) * 0.5).astype(np.float32), "Wh")
    wo = numpy_helper.from_array(rng.standard_normal((hidden, vocab)).astype(np.float32), "Wo")
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["Emb", "tok_in"], ["e"], axis=0),
            helper.make_node("MatMul", ["h_in", "Wh"], ["hh"]),
            helper.make_node("Add", ["hh", "e"], ["pre"]),
            helper.make_node("Tanh", ["pre"], ["h_out"]),
            helper.make_node("MatMul", ["h_out", "Wo"], ["logits"]),
            helper.make_node("ArgMax", ["logits"], ["tok_out"], axis=-1, keepdims=0),
            helper.make_node("Equal", ["tok_out", "eos"], ["is_eos"]),
            helper.make_node("Not", ["is_eos"], ["cont"]),
            helper.make_node("Cast", ["cont"], ["cont_i"], to=TensorProto.INT32),
            helper.make_node("ReduceMin", ["cont_i"], ["cont_any"], keepdims=0),
            helper.make_node("Cast", ["cont_any"], ["cond_out"], to=B),
            helper.make_node("Identity", ["tok_out"], ["tok_scan"]),
        ],
        "step",
        [vi("i", I64, []), vi("cond_in", B, []), vi("tok_in", I64, [1]), vi("h_in", F, [1, hidden])],
        [vi("cond_out", B, []), vi("tok_out", I64, [1]), vi("h_out", F, [1, hidden]), vi("tok_scan", I64, [1])],
    )
    m = model(
        [
            const("M", np.int64(max_len)),
            const("eos", np.array([eos], np.int64)),
            helper.make_node("Loop", ["M", "", "bos", "h0"], ["last", "h_last", "tokens"], body=body),
        ],
        [vi("bos", I64, [1]), vi("h0", F, [1, hidden])],
        [vi("last", I64, [1]), vi("h_last", F, [1, hidden]), vi("tokens", I64, [None, 1])],
        [emb, wh, wo],
    )
    return m, hidden


def test_greedy_decode_loop():
    m, hidden = greedy_decode_model()
    rng = np.random.default_rng(4)
    for bos in range(4):
        h0 = rng.standard_normal((1, hidden)).astype(np.float32)
        check(m, {"bos": np.array([bos], np.int64), "h0": h0}, rtol=1e-4, atol=1e-5)


def test_greedy_decode_compiles_to_an_epcontext_model(tmp_path):
    """The plan with its loop body survives a compiled (EPContext) model round trip."""
    m, hidden = greedy_decode_model()
    source, compiled = tmp_path / "m.onnx", tmp_path / "m_ctx.onnx"
    onnx.save(m, source)
    options = ort.SessionOptions()
    options.add_session_config_entry("ep.context_enable", "1")
    options.add_session_config_entry("ep.context_file_path", str(compiled))
    options.add_provider_for_devices(mlx_ep_devices(), {})
    feeds = {"bos": np.array([2], np.int64), "h0": np.full((1, hidden), 0.5, np.float32)}
    first = run(ort.InferenceSession(str(source), sess_options=options), feeds)
    assert [n.op_type for n in onnx.load(str(compiled)).graph.node] == ["EPContext"]
    options = ort.SessionOptions()
    options.add_provider_for_devices(mlx_ep_devices(), {})
    again = run(ort.InferenceSession(str(compiled), sess_options=options), feeds)
    expected = run(make_session(m, mlx=False), feeds)
    assert_outputs_match(first, expected, rtol=1e-4, atol=1e-5)
    assert_outputs_match(again, expected, rtol=1e-4, atol=1e-5)


def test_bodies_run_compiled_when_the_session_compiles():
    """With compile=1 the bodies run through their own compiled closures (per input shapes);
    results are the same."""
    m, hidden = greedy_decode_model()
    vad, (frames, feat, hidden_v) = vad_model()
    rng = np.random.default_rng(6)
    cases = [
        (m, {"bos": np.array([1], np.int64), "h0": rng.standard_normal((1, hidden)).astype(np.float32)}),
        (vad, {"frames": rng.standard_normal((frames, 1, feat)).astype(np.float32),
               "state": rng.standard_normal((2, 1, 1, hidden_v)).astype(np.float32) * 0.1}),
        (scan_model(0, 1, 0, 1), {"s0": np.zeros(3, np.float32), "x": np.arange(12, dtype=np.float32).reshape(4, 3)}),
        (loop_model(True, True), {"acc0": np.array([0.5, -1.0], np.float32), "M": np.array(20, np.int64), "c0": np.array(True)}),
    ]
    for model_, feeds in cases:
        expected = run(make_session(model_, mlx=False), feeds)
        session = make_session(model_, ep_options={"compile": "1"})
        for _ in range(2):
            assert_outputs_match(run(session, feeds), expected, rtol=1e-4, atol=1e-5)
        assert_all_on_mlx(session)


# ---------------------------------------------------------------------------------------------
# Declines


def test_unclaimable_body_declines_whole_node():
    """A branch with a node MLX does not run (a string op) leaves the If on ORT's CPU EP with
    a reason; the outputs are still right."""
    then_g = helper.make_graph(
        [
            helper.make_node("Cast", ["x"], ["xs"], to=TensorProto.STRING),
            helper.make_node("Cast", ["xs"], ["t"], to=F),
        ],
        "then",
        [],
        [vi("t", F, None)],
    )
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [vi("e", F, None)])
    m = model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        [vi("c", B, []), vi("x", F, [3])],
        [vi("y", F, None)],
    )
    x = np.array([1.5, -2.0, 3.0], np.float32)
    for c in (True, False):
        feeds = {"c": np.array(c), "x": x}
        expected = run(make_session(m, mlx=False), feeds)
        session = make_session(m)
        assert_outputs_match(run(session, feeds), expected)
        ifs = [p for p in placements(session) if p.op_type == "If"]
        if HAS_ASSIGNMENT_INFO:
            assert ifs and all(p.ep == CPU_EP for p in ifs), ifs


def test_sequence_carried_loop_declines():
    """A Loop carrying a sequence is declined (the node stays on ORT's CPU EP)."""
    body = helper.make_graph(
        [
            helper.make_node("SequenceInsert", ["seq_in", "x"], ["seq_out"]),
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
        ],
        "body",
        [vi("i", I64, []), vi("cond_in", B, []), helper.make_tensor_sequence_value_info("seq_in", F, None)],
        [vi("cond_out", B, []), helper.make_tensor_sequence_value_info("seq_out", F, None)],
    )
    m = model(
        [
            helper.make_node("SequenceEmpty", [], ["seq0"], dtype=F),
            helper.make_node("Loop", ["M", "", "seq0"], ["seq"], body=body),
            helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0),
        ],
        [vi("M", I64, []), vi("x", F, [2])],
        [vi("y", F, None)],
    )
    feeds = {"M": np.array(3, np.int64), "x": np.array([1.0, 2.0], np.float32)}
    expected = run(make_session(m, mlx=False), feeds)
    session = make_session(m)
    assert_outputs_match(run(session, feeds), expected)
    if HAS_ASSIGNMENT_INFO:
        loops = [p for p in placements(session) if p.op_type == "Loop"]
        assert loops and all(p.ep == CPU_EP for p in loops), loops
