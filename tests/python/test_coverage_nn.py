"""Coverage of nn / text / signal forms: TfIdfVectorizer, MelWeightMatrix, BatchNormalization in
training mode, Dropout in training (exact with a ratio of 0, drawn at random otherwise), RNN /
GRU / LSTM with layout=1, MaxUnpool with output_shape and Resize align_corners downsampling.
Each case runs on the MLX EP (its nodes asserted on MLX) and is compared to ORT's CPU EP, or,
where ORT has no kernel for the form (recurrent layout=1) or disagrees with the ONNX reference
(Resize align_corners with scales), to a reference stated in the test; random drops are
checked statistically.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from conftest import assert_on_cpu, assert_on_mlx, assert_outputs_match, check_against_cpu, check_node, make_session, run
from models import graph_model

ORT_VERSION = tuple(int(v) for v in ort.__version__.split(".")[:2])


def randn(*shape, seed: int = 0) -> np.ndarray:
    return np.asarray(np.random.default_rng(seed).standard_normal(shape), np.float32)


# ---------------------------------------------------------------------------
# TfIdfVectorizer

# 1-grams, 2-grams and 3-grams in one pool (ngram_counts: where each size starts).
POOL = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 3, 3, 2, 5, 5, 2]
COUNTS = [0, 4, 10]
INDEXES = [0, 1, 2, 3, 4, 5, 6, 7, 8]
WEIGHTS = [0.5, 1.0, 2.0, 0.25, 3.0, 1.5, 0.75, 4.0, 2.5]


def tfidf_attrs(mode, lo, hi, skip, weights):
    attrs = dict(
        mode=mode,
        min_gram_length=lo,
        max_gram_length=hi,
        max_skip_count=skip,
        ngram_counts=COUNTS,
        ngram_indexes=INDEXES,
        pool_int64s=POOL,
    )
    if weights:
        attrs["weights"] = WEIGHTS
    return attrs


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("weights", [False, True], ids=["no-weights", "weights"])
@pytest.mark.parametrize("grams", [(1, 1, 0), (1, 2, 0), (2, 2, 3), (1, 3, 2), (3, 3, 5)], ids=lambda g: "min%d-max%d-skip%d" % g)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape", [(16,), (3, 12)], ids=["1d", "2d"])
def test_tfidf_vectorizer(mode, weights, grams, dtype, shape):
    x = np.random.default_rng(sum(shape) + grams[2]).integers(2, 9, size=shape).astype(dtype)
    check_node("TfIdfVectorizer", {"X": x}, attrs=tfidf_attrs(mode, *grams, weights), opset=9)


def test_tfidf_vectorizer_no_hits_and_symbolic_shape():
    # Tokens outside the pool, of a symbolic shape: a zero row per batch entry.
    x = np.array([[100, 101, 102], [2, 3, 2]], np.int64)
    check_node("TfIdfVectorizer", {"X": x}, attrs=tfidf_attrs("TF", 1, 2, 1, False), opset=9, symbolic=True)


def test_tfidf_vectorizer_string_pool_is_declined():
    x = np.array(["a", "b", "a"], dtype=object)
    graph = helper.make_graph(
        [
            helper.make_node(
                "TfIdfVectorizer", ["X"], ["Y"], mode="TF", min_gram_length=1, max_gram_length=1,
                max_skip_count=0, ngram_counts=[0], ngram_indexes=[0, 1], pool_strings=["a", "b"],
            )
        ],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.STRING, [3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 7
    session = make_session(model)
    np.testing.assert_array_equal(run(session, {"X": x})[0], [2.0, 1.0])
    assert_on_cpu(session, ["TfIdfVectorizer"])


# ---------------------------------------------------------------------------
# MelWeightMatrix


def mel_model(feeds, out_type):
    # Shape inference can't give the output's dims (they are input values): declared here.
    node = helper.make_node("MelWeightMatrix", list(feeds), ["Y"], name="mel", output_datatype=out_type)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), []) for n, a in feeds.items()],
        [helper.make_tensor_value_info("Y", out_type, ["bins", "mels"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(
    "params",
    [(8, 16, 8192, 0.0, 4096.0), (10, 64, 16000, 20.0, 7600.0), (4, 31, 8000, 100.0, 3000.0), (20, 128, 22050, 0.0, 11025.0)],
    ids=["onnx-example", "speech", "odd-dft", "dense"],
)
@pytest.mark.parametrize("out_type", [TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8])
@pytest.mark.parametrize("int_type", [np.int32, np.int64])
def test_mel_weight_matrix(params, out_type, int_type):
    bins, dft, rate, lo, hi = params
    feeds = {
        "num_mel_bins": np.array(bins, int_type),
        "dft_length": np.array(dft, int_type),
        "sample_rate": np.array(rate, int_type),
        "lower_edge_hertz": np.array(lo, np.float32),
        "upper_edge_hertz": np.array(hi, np.float32),
    }
    model = mel_model(feeds, out_type)
    check_against_cpu(model, feeds, ["MelWeightMatrix"], rtol=1e-6, atol=1e-6)


def test_mel_weight_matrix_of_constants_with_a_consumer():
    # Constant scalars: the matrix is made at plan time; a MatMul consumes it on MLX.
    consts = {
        "num_mel_bins": np.array(6, np.int64),
        "dft_length": np.array(32, np.int64),
        "sample_rate": np.array(16000, np.int64),
        "lower_edge_hertz": np.array(50.0, np.float32),
        "upper_edge_hertz": np.array(7000.0, np.float32),
    }
    spec = np.abs(randn(4, 17, seed=16))
    mel = helper.make_node("MelWeightMatrix", list(consts), ["M"], name="mel")
    mm = helper.make_node("MatMul", ["S", "M"], ["Y"], name="mm")
    model = graph_model([mel, mm], {"S": spec}, ["Y"], consts=consts, opset=17)
    check_against_cpu(model, {"S": spec}, ["MatMul"], rtol=1e-5, atol=1e-5)


def test_tfidf_vectorizer_then_matmul():
    # The counts feed an MLX MatMul (symbolic batch: computed per run on the host).
    x = np.random.default_rng(17).integers(2, 9, size=(5, 10)).astype(np.int64)
    w = randn(9, 3, seed=18)
    tfidf = helper.make_node("TfIdfVectorizer", ["X"], ["T"], name="tfidf", **tfidf_attrs("TFIDF", 1, 2, 1, True))
    mm = helper.make_node("MatMul", ["T", "W"], ["Y"], name="mm")
    model = graph_model([tfidf, mm], {"X": x}, ["Y"], consts={"W": w}, opset=13, symbolic=True)
    check_against_cpu(model, {"X": x}, ["TfIdfVectorizer", "MatMul"], rtol=1e-5, atol=1e-5)


def test_mel_weight_matrix_out_of_range_fails():
    # An upper edge above the Nyquist frequency: ORT's kernel refuses it, and so does the EP.
    feeds = {
        "num_mel_bins": np.array(8, np.int64),
        "dft_length": np.array(16, np.int64),
        "sample_rate": np.array(8000, np.int64),
        "lower_edge_hertz": np.array(0.0, np.float32),
        "upper_edge_hertz": np.array(8000.0, np.float32),
    }
    model = mel_model(feeds, TensorProto.FLOAT)
    session = make_session(model)
    with pytest.raises(Exception, match="upper_edge_hertz"):
        run(session, feeds)
    if ORT_VERSION >= (1, 24):
        # (ORT 1.23 reports placement from the profile of a run that succeeded.)
        assert_on_mlx(session, ["MelWeightMatrix"])


# ---------------------------------------------------------------------------
# BatchNormalization, training mode


@pytest.mark.parametrize("opset", [14, 15])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 7), (2, 3, 4, 5), (1, 2, 3, 2, 2)], ids=["rank2", "rank3", "rank4", "rank5"])
@pytest.mark.parametrize("momentum", [None, 0.7])
@pytest.mark.parametrize("outputs", [3, 2], ids=["all-outputs", "no-var-output"])
def test_batch_norm_training(opset, shape, momentum, outputs):
    c = shape[1]
    feeds = {
        "X": randn(*shape, seed=1) * 2 + 0.5,
        "scale": randn(c, seed=2),
        "B": randn(c, seed=3),
        "mean": randn(c, seed=4),
        "var": np.abs(randn(c, seed=5)) + 0.1,
    }
    attrs = {"training_mode": 1, "epsilon": 1e-3}
    if momentum is not None:
        attrs["momentum"] = momentum
    full = ["Y", "running_mean", "running_var"]
    names = full if outputs == 3 else ["Y", "running_mean", ""]
    node = helper.make_node("BatchNormalization", list(feeds), names, name="bn", **attrs)
    model = graph_model([node], feeds, [n for n in names if n], opset=opset)
    if outputs == 3:
        check_against_cpu(model, feeds, ["BatchNormalization"], rtol=1e-4, atol=1e-5)
        return
    # ORT's CPU kernel dereferences the omitted running_var output (a segfault): the
    # reference is the three-output node on the CPU EP, its first two outputs.
    session = make_session(model)
    actual = run(session, feeds)
    assert_on_mlx(session, ["BatchNormalization"])
    ref = graph_model([helper.make_node("BatchNormalization", list(feeds), full, name="bn", **attrs)], feeds, full, opset=opset)
    expected = run(make_session(ref, mlx=False), feeds)[:2]
    assert_outputs_match(actual, expected, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------
# Dropout in training with a ratio of 0


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("mask", [False, True], ids=["no-mask", "mask"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_dropout_training_zero_ratio(training, mask, dtype):
    x = (randn(3, 4, 5, seed=6) * 10).astype(dtype)
    feeds = {"x": x, "t": np.array(training)}
    consts = {"r": np.array(0.0, np.float32)}
    outputs = ["y", "m"] if mask else ["y"]
    node = helper.make_node("Dropout", ["x", "r", "t"], outputs, name="dropout", seed=0)
    model = graph_model([node], feeds, outputs, consts=consts, opset=13)
    out = check_against_cpu(model, feeds, ["Dropout"], rtol=0, atol=0)
    np.testing.assert_array_equal(out[0], x)
    if mask:
        assert out[1].dtype == np.bool_ and out[1].all()


def test_dropout_training_runtime_ratio_zero_is_exact():
    """A ratio known only at run time: drawn on MLX; with the value 0 nothing is dropped."""
    x = randn(3, 4, 5, seed=7)
    feeds = {"x": x, "r": np.array(0.0, np.float32), "t": np.array(True)}
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "m"], name="dropout", seed=0)
    model = graph_model([node], feeds, ["y", "m"], opset=13)
    out = check_against_cpu(model, feeds, ["Dropout"], rtol=0, atol=0)
    np.testing.assert_array_equal(out[0], x)
    assert out[1].all()


@pytest.mark.parametrize("ratio", [0.25, 0.5, None], ids=["r0.25", "r0.5", "default"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_dropout_training_drops_at_random(ratio, dtype):
    """mask = uniform >= ratio, y = mask ? x / (1 - ratio) : 0; a new mask each run; with a
    run-time training_mode of false, y = x and the mask is all true."""
    x = (randn(64, 128, seed=8) + 3.0).astype(dtype)
    feeds = {"x": x, "t": np.array(True)}
    inputs = ["x", "r", "t"] if ratio is not None else ["x", "", "t"]
    if ratio is not None:
        feeds["r"] = np.array(ratio, np.float32)
    node = helper.make_node("Dropout", inputs, ["y", "m"], name="dropout", seed=3)
    model = graph_model([node], feeds, ["y", "m"], opset=13)
    session = make_session(model)
    y, m = run(session, feeds)
    assert_on_mlx(session, ["Dropout"])
    r = 0.5 if ratio is None else ratio
    assert y.dtype == dtype and m.dtype == np.bool_ and y.shape == x.shape == m.shape
    kept = m.mean()
    assert abs(kept - (1 - r)) < 0.02, kept
    scale = dtype(1.0) / (dtype(1.0) - dtype(r))
    np.testing.assert_allclose(y[m], (x[m].astype(np.float32) * np.float32(scale)).astype(dtype), rtol=1e-3)
    assert (y[~m] == 0).all()
    y2, m2 = run(session, feeds)
    assert (m2 != m).any(), "the mask repeated across runs"
    off = dict(feeds, t=np.array(False))
    y3, m3 = run(session, off)
    np.testing.assert_array_equal(y3, x)
    assert m3.all()


# ---------------------------------------------------------------------------
# RNN / GRU / LSTM, layout=1 (batch-major)
#
# ORT's CPU EP rejects layout=1, so the reference is the same layer with layout=0 on ORT's CPU
# EP, fed the transposed X / initial states, its outputs transposed back.


def recurrent_case(op, direction, with_state, with_lens, seed):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    dirs = 2 if direction == "bidirectional" else 1
    batch, seq, inp, hidden = 3, 5, 4, 6
    r = np.random.default_rng(seed)
    f = lambda *s: np.asarray(r.standard_normal(s) * 0.4, np.float32)  # noqa: E731
    x = f(batch, seq, inp)
    inputs = {"W": f(dirs, gates * hidden, inp), "R": f(dirs, gates * hidden, hidden), "B": f(dirs, 2 * gates * hidden)}
    lens = np.array([5, 3, 1], np.int32) if with_lens else None
    h0 = f(batch, dirs, hidden) if with_state else None
    c0 = f(batch, dirs, hidden) if with_state and op == "LSTM" else None
    return x, inputs, lens, h0, c0, dirs, hidden


def recurrent_model(op, layout, direction, x, inputs, lens, h0, c0, hidden):
    feeds = {"X": x, **inputs}
    names = ["X", "W", "R", "B"]
    consts = {}
    if lens is not None:
        consts["L"] = lens
    names.append("L" if lens is not None else "")
    names.append("H0" if h0 is not None else "")
    if h0 is not None:
        feeds["H0"] = h0
    if op == "LSTM":
        names.append("C0" if c0 is not None else "")
        if c0 is not None:
            feeds["C0"] = c0
    while names[-1] == "":
        names.pop()
    outputs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outputs, name="rnn", hidden_size=hidden, direction=direction, layout=layout)
    return graph_model([node], feeds, outputs, consts=consts, opset=14), feeds


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("with_state", [False, True], ids=["no-state", "initial-state"])
@pytest.mark.parametrize("with_lens", [False, True], ids=["full", "sequence-lens"])
def test_recurrent_batch_major(op, direction, with_state, with_lens):
    x, inputs, lens, h0, c0, dirs, hidden = recurrent_case(op, direction, with_state, with_lens, seed=11)
    model, feeds = recurrent_model(op, 1, direction, x, inputs, lens, h0, c0, hidden)
    session = make_session(model)
    actual = run(session, feeds)
    assert_on_mlx(session, [op])
    t = lambda a: None if a is None else np.ascontiguousarray(a.transpose(1, 0, 2))  # noqa: E731
    ref_model, ref_feeds = recurrent_model(op, 0, direction, t(x), inputs, lens, t(h0), t(c0), hidden)
    expected = run(make_session(ref_model, mlx=False), ref_feeds)
    # Y [seq, dirs, batch, hidden] -> [batch, seq, dirs, hidden]; states [dirs, batch, hidden]
    # -> [batch, dirs, hidden].
    expected = [expected[0].transpose(2, 0, 1, 3)] + [e.transpose(1, 0, 2) for e in expected[1:]]
    assert_outputs_match(actual, expected, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------
# MaxUnpool with output_shape
#
# The indices are MaxPool's flat indices into its input, whose shape `output_shape` restores
# (the spec's "partial inverse of MaxPool"; ORT's CPU EP scatters into output_shape since
# microsoft/onnxruntime#2193, after onnx/onnx#2398). The ONNX 1.21 reference implementation
# (and so the backend case test_maxunpool_export_with_output_shape) instead scatters into the
# shape inferred from the attributes and then pads with zeros, which puts every pooled value of
# a 5x5 input's MaxPool in the wrong place (its data, indices 5, 7, 13, 15, are 4x4 indices,
# not what MaxPool gives for a 5x5 input: 6, 8, 16, 18). The EP follows MaxPool's indexing,
# agreeing with ORT; that conformance case fails on both in the same way.


@pytest.mark.parametrize("size", [(5, 5), (5, 7), (4, 6)])
def test_max_unpool_output_shape_inverts_max_pool(size):
    x = randn(2, 3, *size, seed=12)
    pool = helper.make_node("MaxPool", ["X"], ["P", "I"], kernel_shape=[2, 2], strides=[2, 2], name="pool")
    shape = helper.make_node("Shape", ["X"], ["S"], name="shape")
    unpool = helper.make_node("MaxUnpool", ["P", "I", "S"], ["Y"], kernel_shape=[2, 2], strides=[2, 2], name="unpool")
    graph = helper.make_graph(
        [pool, shape, unpool],
        "g",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["n", "c", "h", "w"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (y,) = check_against_cpu(model, {"X": x}, ["MaxUnpool"])
    # Each window's maximum comes back at its own position; everything else is zero.
    h, w = (size[0] // 2) * 2, (size[1] // 2) * 2
    windows = x[:, :, :h, :w].reshape(2, 3, h // 2, 2, w // 2, 2)
    is_max = windows == windows.max(axis=(3, 5), keepdims=True)
    expected = np.zeros_like(x)
    expected[:, :, :h, :w] = np.where(is_max, windows, 0).reshape(2, 3, h, w)
    np.testing.assert_array_equal(y, expected)


# ---------------------------------------------------------------------------
# Resize align_corners downsampling
#
# With `scales`, the ONNX reference divides by the fractional resized length `in * scale`
# (`x_resized * (in - 1) / (in * scale - 1)`, onnx/onnx#2462: intended), ORT's CPU EP by the
# integer output length; for linear and cubic the EP follows the reference (the backend cases
# test_resize_downsample_scales_{linear,cubic}_align_corners). Nearest and antialiased resize
# keep ORT's integer length (no backend case covers them). With `sizes` all agree.


def resize_model(mode, x, scales=None, sizes=None, **extra):
    feeds = {"X": x}
    consts = {}
    if scales is not None:
        consts["scales"] = np.array(scales, np.float32)
        inputs = ["X", "", "scales"]
    else:
        consts["sizes"] = np.array(sizes, np.int64)
        inputs = ["X", "", "", "sizes"]
    node = helper.make_node("Resize", inputs, ["Y"], name="resize", mode=mode, coordinate_transformation_mode="align_corners", **extra)
    return graph_model([node], feeds, ["Y"], consts=consts, opset=19), feeds


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize(
    "shape,scales",
    [((1, 1, 2, 4), [1, 1, 0.6, 0.6]), ((1, 1, 4, 4), [1, 1, 0.8, 0.8]), ((2, 3, 7, 9), [1, 1, 0.7, 0.45]), ((1, 2, 5, 6), [1, 1, 1.3, 0.75])],
    ids=["onnx-linear", "onnx-cubic", "batch", "mixed"],
)
def test_resize_align_corners_scales_matches_onnx_reference(mode, shape, scales):
    x = randn(*shape, seed=13)
    model, feeds = resize_model(mode, x, scales=scales)
    session = make_session(model)
    actual = run(session, feeds)
    assert_on_mlx(session, ["Resize"])
    expected = ReferenceEvaluator(model).run(None, feeds)
    assert_outputs_match(actual, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "shape,scales",
    [((1, 1, 2, 5), [1, 1, 0.5, 0.5]), ((2, 3, 7, 9), [1, 1, 0.7, 0.45])],
    ids=["ties", "batch"],
)
def test_resize_align_corners_scales_nearest_matches_cpu(shape, scales):
    x = randn(*shape, seed=15)
    model, feeds = resize_model("nearest", x, scales=scales)
    check_against_cpu(model, feeds, ["Resize"], rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["linear", "cubic", "nearest"])
def test_resize_align_corners_sizes_matches_cpu(mode):
    x = randn(1, 2, 7, 9, seed=14)
    model, feeds = resize_model(mode, x, sizes=[1, 2, 4, 5])
    check_against_cpu(model, feeds, ["Resize"], rtol=1e-4, atol=1e-5)
