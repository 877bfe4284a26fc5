"""Small models written the way exporters write them (held-out style), with onnx.helper and
numpy: nothing is downloaded, every weight comes from a fixed seed.

Each builder returns ``(model, feeds)``; :data:`MODELS` names them. Batch (and sequence or
cache lengths) are symbolic dims, as a torch export with dynamic axes declares them, so the
shape arithmetic the exporter writes (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``,
``Constant`` nodes for axes and scalars) stays in the graph instead of being folded away.

* ``gru-step``: one frame of an RNNoise-style streaming denoiser: a dense layer, three GRUs
  (``linear_before_reset=1``, as torch exports ``nn.GRU``) fed by concatenations of the earlier
  ones, voice-activity and band-gain heads; the three hidden states are inputs and outputs.
* ``lstm-step``: one step of a 2-layer LSTM language model (embedding, per-layer state slices,
  two LSTM nodes, LogSoftmax head); h and c of both layers in and out.
* ``vad``: a voice-activity detector in the style of small streaming VADs: the previous
  chunk's tail as context, reflect padding, an STFT as a strided Conv1d with a fixed basis, log
  magnitude, six depthwise-separable Conv1d blocks (BatchNormalization, residual projections),
  an LSTM over the frames with its state carried across calls, a 1x1 Conv1d and Sigmoid, the
  mean over frames; state and context in and out.
* ``seq2seq-decoder``: one decoder step of a 2-layer pre-LN transformer seq2seq model (self
  attention with the past keys/values concatenated, cross attention over the encoder output with
  its padding mask, GELU MLP, tied-free LM head); the present keys/values are outputs.
* ``classifier``: a small image classifier (Conv/BatchNormalization/Relu residual blocks,
  MaxPool, GlobalAveragePool, a torch-style flatten, Gemm, Softmax).

``tests/python/test_small_graphs.py`` runs them on the MLX EP against the CPU EP; ``cargo xtask
bench small`` (``small_bench.py``) times them. ``python small_graphs.py`` prints their node
counts.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Builder:
    """Nodes, initializers and the graph interface of one model, with the helpers an exporter's
    output is made of."""

    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[str] = []
        self.count = 0

    # -- values

    def input(self, name: str, elem: int, shape: Sequence[int | str]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        return name

    def init(self, name: str, value) -> str:
        self.inits[name] = np.asarray(value)
        return name

    def weight(self, name: str, shape, std: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0])
        std = std if std is not None else 1.0 / math.sqrt(max(fan_in, 1))
        return self.init(name, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def node(self, op: str, inputs: Sequence[str], n_out: int = 1, name: str | None = None, **attrs) -> str | list[str]:
        """One node named like torch's exporter (``/<op>_<k>``) unless ``name`` is given; returns
        its output (or outputs)."""
        self.count += 1
        name = name or f"/{op}_{self.count}"
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def constant(self, value, dtype=np.int64) -> str:
        """A ``Constant`` node, as torch's exporter writes axes and scalars."""
        t = numpy_helper.from_array(np.asarray(value, dtype), f"const_{self.count + 1}")
        return self.node("Constant", [], value=t)

    # -- exporter idioms

    def dim(self, x: str, axis: int) -> str:
        """``x.shape[axis]`` as a 1-D int64 tensor: Shape, Gather of a scalar index, Unsqueeze."""
        shape = self.node("Shape", [x])
        d = self.node("Gather", [shape, self.constant(axis)], axis=0)
        return self.node("Unsqueeze", [d, self.constant([0])])

    def view(self, x: str, dims: Sequence[str | int]) -> str:
        """``x.view(*dims)``: each dim a 1-D tensor from :meth:`dim` or a fixed int."""
        parts = [d if isinstance(d, str) else self.constant([d]) for d in dims]
        return self.node("Reshape", [x, self.node("Concat", parts, axis=0)])

    def linear(self, x: str, prefix: str, fan_in: int, fan_out: int, bias: bool = True) -> str:
        w = self.weight(f"{prefix}.weight", (fan_in, fan_out))
        y = self.node("MatMul", [x, w], name=f"{prefix}/MatMul")
        if bias:
            y = self.node("Add", [self.weight(f"{prefix}.bias", (fan_out,), 0.1), y], name=f"{prefix}/Add")
        return y

    def layer_norm(self, x: str, prefix: str, width: int) -> str:
        gamma = self.init(f"{prefix}.weight", (1.0 + 0.1 * self.rng.standard_normal(width)).astype(np.float32))
        beta = self.weight(f"{prefix}.bias", (width,), 0.1)
        return self.node("LayerNormalization", [x, gamma, beta], name=f"{prefix}/LayerNormalization", axis=-1, epsilon=1e-5)

    def gelu(self, x: str) -> str:
        """GELU as torch exports it below opset 20: ``x * 0.5 * (1 + erf(x / sqrt 2))``."""
        e = self.node("Erf", [self.node("Div", [x, self.constant(math.sqrt(2.0), np.float32)])])
        e = self.node("Add", [e, self.constant(1.0, np.float32)])
        return self.node("Mul", [self.node("Mul", [x, e]), self.constant(0.5, np.float32)])

    def conv1d(self, x: str, prefix: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, bias: bool = True) -> str:
        ins = [x, self.weight(f"{prefix}.weight", (cout, cin // groups, k))]
        if bias:
            ins.append(self.weight(f"{prefix}.bias", (cout,), 0.1))
        return self.node("Conv", ins, name=f"{prefix}/Conv", kernel_shape=[k], strides=[stride], pads=[k // 2, k // 2], group=groups)

    def bn(self, x: str, prefix: str, width: int) -> str:
        scale = self.init(f"{prefix}.weight", (1.0 + 0.1 * self.rng.standard_normal(width)).astype(np.float32))
        shift = self.init(f"{prefix}.bias", (0.1 * self.rng.standard_normal(width)).astype(np.float32))
        mean = self.init(f"{prefix}.running_mean", (0.1 * self.rng.standard_normal(width)).astype(np.float32))
        var = self.init(f"{prefix}.running_var", self.rng.uniform(0.5, 1.5, width).astype(np.float32))
        return self.node("BatchNormalization", [x, scale, shift, mean, var], name=f"{prefix}/BatchNormalization", epsilon=1e-5)

    def conv_bn(self, x: str, prefix: str, cin: int, cout: int, k: int, stride: int) -> str:
        w = self.init(f"{prefix}.weight", (self.rng.standard_normal((cout, cin, k, k)) * math.sqrt(2.0 / (cin * k * k))).astype(np.float32))
        y = self.node("Conv", [x, w], name=f"{prefix}/Conv", kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        return self.bn(y, f"{prefix}.bn", cout)

    def branch(self, name: str, build: Callable[[], Sequence[str]]) -> onnx.GraphProto:
        """A subgraph (an ``If`` branch) of the nodes ``build`` adds, reading outer-scope values
        by name; its outputs are the float values ``build`` returns."""
        outer, self.nodes = self.nodes, []
        outs = build()
        nodes, self.nodes = self.nodes, outer
        types = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
        return helper.make_graph(nodes, name, [], types)

    # -- the model

    def output(self, value: str, name: str) -> str:
        """Makes ``value`` the graph output ``name`` (renaming the producing node's output)."""
        for n in self.nodes:
            for i, o in enumerate(n.output):
                if o == value:
                    n.output[i] = name
            for i, o in enumerate(n.input):
                if o == value:
                    n.input[i] = name
        self.outputs.append(name)
        return name

    def model(self) -> onnx.ModelProto:
        inits = [numpy_helper.from_array(v, k) for k, v in self.inits.items()]
        outs = [onnx.ValueInfoProto(name=o) for o in self.outputs]
        graph = helper.make_graph(self.nodes, self.name, self.inputs, outs, initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ortmlx-small-graphs")
        model.ir_version = 8
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        types = {v.name: v.type for v in inferred.graph.output}
        for out in model.graph.output:
            out.type.CopyFrom(types[out.name])
        onnx.checker.check_model(model, full_check=True)
        return model


def randn(rng, *shape, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# ---------------------------------------------------------------------------
# GRU step


def gru_step(batch: int = 2, features: int = 42, bands: int = 22, sizes: Sequence[int] = (24, 48, 96)) -> tuple[onnx.ModelProto, dict]:
    b = Builder("gru_step", seed=1)
    x = b.input("features", TensorProto.FLOAT, ["batch", features])
    states = [b.input(f"h_{i}", TensorProto.FLOAT, [1, "batch", n]) for i, n in enumerate(sizes)]

    def gru(x: str, cin: int, i: int) -> tuple[str, str]:
        """One GRU step as torch exports nn.GRU (linear_before_reset=1), [batch, cin] in."""
        n = sizes[i]
        w = b.weight(f"gru{i}.weight_ih", (1, 3 * n, cin))
        r = b.weight(f"gru{i}.weight_hh", (1, 3 * n, n))
        bias = b.weight(f"gru{i}.bias", (1, 6 * n), 0.1)
        y = b.node("Unsqueeze", [x, b.constant([0])])
        seq, h = b.node("GRU", [y, w, r, bias, "", states[i]], n_out=2, name=f"/gru{i}/GRU", hidden_size=n, linear_before_reset=1)
        return b.node("Squeeze", [seq, b.constant([0, 1])]), h

    # an RNNoise-style denoiser: dense -> GRU (voice activity) -> GRU (noise) -> GRU (gains)
    dense = b.node("Tanh", [b.linear(x, "input_dense", features, sizes[0])])
    vad_out, h0 = gru(dense, sizes[0], 0)
    vad = b.node("Sigmoid", [b.linear(vad_out, "vad_dense", sizes[0], 1)])
    noise_in = b.node("Concat", [dense, vad_out, x], axis=1)
    noise_out, h1 = gru(noise_in, sizes[0] * 2 + features, 1)
    gains_in = b.node("Concat", [vad_out, noise_out, x], axis=1)
    gains_out, h2 = gru(gains_in, sizes[0] + sizes[1] + features, 2)
    gains = b.node("Sigmoid", [b.linear(gains_out, "gains_dense", sizes[2], bands)])
    b.output(gains, "gains")
    b.output(vad, "vad")
    for i, h in enumerate((h0, h1, h2)):
        b.output(h, f"h_{i}_out")
    rng = np.random.default_rng(11)
    feeds = {"features": randn(rng, batch, features)}
    for i, n in enumerate(sizes):
        feeds[f"h_{i}"] = randn(rng, 1, batch, n, scale=0.5)
    return b.model(), feeds


# ---------------------------------------------------------------------------
# LSTM step (2 layers)


def lstm_step(batch: int = 2, vocab: int = 500, embed: int = 64, hidden: int = 128) -> tuple[onnx.ModelProto, dict]:
    b = Builder("lstm_step", seed=2)
    ids = b.input("token", TensorProto.INT64, ["batch", 1])
    h = b.input("h_in", TensorProto.FLOAT, [2, "batch", hidden])
    c = b.input("c_in", TensorProto.FLOAT, [2, "batch", hidden])
    x = b.node("Gather", [b.weight("embedding.weight", (vocab, embed), 1.0), ids], axis=0)
    x = b.node("Transpose", [x], perm=[1, 0, 2])
    hs, cs = [], []
    cin = embed
    for layer in range(2):
        # torch slices the stacked states per layer: h0[layer:layer + 1]
        starts, ends, axes = b.constant([layer]), b.constant([layer + 1]), b.constant([0])
        h_l = b.node("Slice", [h, starts, ends, axes])
        c_l = b.node("Slice", [c, starts, ends, axes])
        w = b.weight(f"lstm.weight_ih_l{layer}", (1, 4 * hidden, cin))
        r = b.weight(f"lstm.weight_hh_l{layer}", (1, 4 * hidden, hidden))
        bias = b.weight(f"lstm.bias_l{layer}", (1, 8 * hidden), 0.1)
        y, y_h, y_c = b.node("LSTM", [x, w, r, bias, "", h_l, c_l], n_out=3, name=f"/lstm/LSTM_{layer}", hidden_size=hidden)
        x = b.node("Squeeze", [y, b.constant([1])])
        hs.append(y_h)
        cs.append(y_c)
        cin = hidden
    x = b.node("Transpose", [x], perm=[1, 0, 2])
    logits = b.linear(x, "decoder", hidden, vocab)
    b.output(b.node("LogSoftmax", [logits], axis=-1), "log_probs")
    b.output(b.node("Concat", hs, axis=0), "h_out")
    b.output(b.node("Concat", cs, axis=0), "c_out")
    rng = np.random.default_rng(12)
    feeds = {
        "token": rng.integers(0, vocab, (batch, 1), dtype=np.int64),
        "h_in": randn(rng, 2, batch, hidden, scale=0.5),
        "c_in": randn(rng, 2, batch, hidden, scale=0.5),
    }
    return b.model(), feeds


# ---------------------------------------------------------------------------
# VAD: STFT conv, conv1d encoder, LSTM, sigmoid


def vad(batch: int = 1, samples: int = 512, context: int = 64, n_fft: int = 128, hop: int = 64, hidden: int = 64, gated: bool = False) -> tuple[onnx.ModelProto, dict]:
    """A streaming VAD step. ``gated``: an ``If`` on the audio chunk's energy runs the LSTM and
    the head only for sound and keeps the state for silence (as VAD exporters write branches)."""
    b = Builder("vad_if" if gated else "vad", seed=3)
    audio = b.input("input", TensorProto.FLOAT, ["batch", samples])
    state = b.input("state", TensorProto.FLOAT, [2, "batch", hidden])
    ctx = b.input("context", TensorProto.FLOAT, ["batch", context])
    bins = n_fft // 2 + 1
    # the last samples of the previous chunk lead this one; the next call gets this chunk's
    x = b.node("Concat", [ctx, audio], axis=1)
    new_ctx = b.node("Slice", [x, b.constant([-context]), b.constant([np.iinfo(np.int64).max]), b.constant([1])])
    # x.unsqueeze(1), reflect padding of the chunk's edges
    x = b.node("Unsqueeze", [x, b.constant([1])])
    pads = b.constant([0, 0, n_fft // 4, 0, 0, n_fft // 4])
    x = b.node("Pad", [x, pads], mode="reflect")
    # STFT as Conv1d with a fixed (windowed DFT) basis: [2 * bins, 1, n_fft]
    t = np.arange(n_fft)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * t / n_fft)
    k = np.arange(bins)[:, None]
    basis = np.concatenate([np.cos(2 * np.pi * k * t / n_fft), -np.sin(2 * np.pi * k * t / n_fft)]) * window
    basis = b.init("stft.forward_basis", basis[:, None, :].astype(np.float32))
    spec = b.node("Conv", [x, basis], name="/stft/Conv", kernel_shape=[n_fft], strides=[hop])
    # real = spec[:, :bins], imag = spec[:, bins:]; log magnitude
    real = b.node("Slice", [spec, b.constant([0]), b.constant([bins]), b.constant([1])])
    imag = b.node("Slice", [spec, b.constant([bins]), b.constant([2 * bins]), b.constant([1])])
    power = b.node("Add", [b.node("Pow", [real, b.constant(2.0, np.float32)]), b.node("Pow", [imag, b.constant(2.0, np.float32)])])
    x = b.node("Sqrt", [power])
    x = b.node("Log", [b.node("Add", [x, b.constant(1e-3, np.float32)])])
    # encoder: depthwise-separable Conv1d blocks (BatchNorm after the pointwise conv) with
    # residual projections; two of them downsample
    cin = bins
    for i, (cout, stride) in enumerate([(64, 1), (64, 2), (64, 1), (64, 2), (64, 1), (hidden, 1)]):
        p = f"encoder.{i}"
        y = b.conv1d(x, f"{p}.dw", cin, cin, 5, groups=cin)
        y = b.node("Relu", [y])
        y = b.bn(b.conv1d(y, f"{p}.pw", cin, cout, 1), f"{p}.bn", cout)
        proj = x if cin == cout else b.conv1d(x, f"{p}.proj", cin, cout, 1, bias=False)
        y = b.node("Relu", [b.node("Add", [y, proj])])
        if stride > 1:
            y = b.node("Relu", [b.conv1d(y, f"{p}.down", cout, cout, 3, stride=stride)])
        x = y
        cin = cout
    # [batch, hidden, frames] -> [frames, batch, hidden], written as torch's permute + view
    frames = b.dim(x, 2)
    batch_dim = b.dim(x, 0)
    x = b.node("Transpose", [x], perm=[2, 0, 1])
    x = b.view(x, [frames, batch_dim, hidden])
    # the LSTM's state: state[0:1] is h, state[1:2] is c
    h0 = b.node("Slice", [state, b.constant([0]), b.constant([1]), b.constant([0])])
    c0 = b.node("Slice", [state, b.constant([1]), b.constant([2]), b.constant([0])])
    w = b.weight("decoder.rnn.weight_ih", (1, 4 * hidden, hidden))
    r = b.weight("decoder.rnn.weight_hh", (1, 4 * hidden, hidden))
    bias = b.weight("decoder.rnn.bias", (1, 8 * hidden), 0.1)

    def decoder() -> list[str]:
        y, y_h, y_c = b.node("LSTM", [x, w, r, bias, "", h0, c0], n_out=3, name="/decoder/rnn/LSTM", hidden_size=hidden)
        # [frames, 1, batch, hidden] -> [batch, hidden, frames]
        y = b.node("Squeeze", [y, b.constant([1])])
        y = b.node("Relu", [b.node("Transpose", [y], perm=[1, 2, 0])])
        y = b.conv1d(y, "decoder.head", hidden, 1, 1)
        y = b.node("Sigmoid", [y])
        return [b.node("ReduceMean", [b.view(y, [batch_dim, -1])], axes=[1], keepdims=1), y_h, y_c]

    def silence() -> list[str]:
        # probability 0 per batch row, the state as it was
        zero = b.node("Mul", [b.node("ReduceMean", [x], axes=[0, 2], keepdims=0), b.constant(0.0, np.float32)])
        return [b.node("Unsqueeze", [zero, b.constant([1])]), b.node("Identity", [h0]), b.node("Identity", [c0])]

    if gated:
        energy = b.node("ReduceMean", [b.node("Mul", [audio, audio])], keepdims=0)
        speech = b.node("Greater", [energy, b.constant(1e-4, np.float32)])
        prob, y_h, y_c = b.node("If", [speech], n_out=3, then_branch=b.branch("speech", decoder), else_branch=b.branch("silence", silence))
    else:
        prob, y_h, y_c = decoder()
    b.output(prob, "output")
    b.output(b.node("Concat", [y_h, y_c], axis=0), "state_out")
    b.output(new_ctx, "context_out")
    rng = np.random.default_rng(13)
    feeds = {
        "input": randn(rng, batch, samples, scale=0.3),
        "state": randn(rng, 2, batch, hidden, scale=0.3),
        "context": randn(rng, batch, context, scale=0.3),
    }
    return b.model(), feeds


# ---------------------------------------------------------------------------
# seq2seq decoder step (2 layers)


def seq2seq_decoder(batch: int = 1, past: int = 16, enc_len: int = 48, d: int = 256, heads: int = 4, ffn: int = 1024, vocab: int = 1000) -> tuple[onnx.ModelProto, dict]:
    layers = 2
    hd = d // heads
    b = Builder("seq2seq_decoder", seed=4)
    ids = b.input("input_ids", TensorProto.INT64, ["batch", 1])
    enc = b.input("encoder_hidden_states", TensorProto.FLOAT, ["batch", "encoder_sequence_length", d])
    enc_mask = b.input("encoder_attention_mask", TensorProto.INT64, ["batch", "encoder_sequence_length"])
    pasts = []
    for i in range(layers):
        k = b.input(f"past_key_values.{i}.key", TensorProto.FLOAT, ["batch", heads, "past_sequence_length", hd])
        v = b.input(f"past_key_values.{i}.value", TensorProto.FLOAT, ["batch", heads, "past_sequence_length", hd])
        pasts.append((k, v))

    # token embedding * sqrt(d) + the position after the past
    x = b.node("Gather", [b.weight("embed_tokens.weight", (vocab, d), 1.0 / math.sqrt(d)), ids], axis=0)
    x = b.node("Mul", [x, b.constant(math.sqrt(d), np.float32)])
    past_len = b.node("Gather", [b.node("Shape", [pasts[0][0]]), b.constant(2)], axis=0)
    positions = b.node("Range", [past_len, b.node("Add", [past_len, b.constant(1)]), b.constant(1)])
    pos = b.node("Gather", [b.weight("embed_positions.weight", (512, d), 0.02), b.node("Unsqueeze", [positions, b.constant([0])])], axis=0)
    x = b.node("Add", [x, pos])

    # encoder padding mask -> additive [batch, 1, 1, enc_len]
    m = b.node("Cast", [b.node("Unsqueeze", [enc_mask, b.constant([1, 2])])], to=TensorProto.FLOAT)
    m = b.node("Sub", [b.constant(1.0, np.float32), m])
    cross_mask = b.node("Mul", [m, b.constant(float(np.finfo(np.float32).min), np.float32)])

    def heads_of(t: str, length_axis: int = 1) -> str:
        """[batch, len, d] -> [batch, heads, len, hd], as the exporter writes view + transpose."""
        bsz, ln = b.dim(t, 0), b.dim(t, length_axis)
        t = b.view(t, [bsz, ln, heads, hd])
        return b.node("Transpose", [t], perm=[0, 2, 1, 3])

    def merge(t: str) -> str:
        """[batch, heads, len, hd] -> [batch, len, d]."""
        t = b.node("Transpose", [t], perm=[0, 2, 1, 3])
        return b.view(t, [b.dim(t, 0), b.dim(t, 1), d])

    def attention(q: str, k: str, v: str, mask: str | None) -> str:
        q = b.node("Mul", [q, b.constant(1.0 / math.sqrt(hd), np.float32)])
        scores = b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])])
        if mask is not None:
            scores = b.node("Add", [scores, mask])
        return b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])

    presents = []
    for i in range(layers):
        p = f"layers.{i}"
        # self attention over the past + this token
        h = b.layer_norm(x, f"{p}.self_attn_layer_norm", d)
        q = heads_of(b.linear(h, f"{p}.self_attn.q_proj", d, d))
        k = heads_of(b.linear(h, f"{p}.self_attn.k_proj", d, d))
        v = heads_of(b.linear(h, f"{p}.self_attn.v_proj", d, d))
        k = b.node("Concat", [pasts[i][0], k], axis=2)
        v = b.node("Concat", [pasts[i][1], v], axis=2)
        presents += [k, v]
        a = merge(attention(q, k, v, None))
        x = b.node("Add", [x, b.linear(a, f"{p}.self_attn.out_proj", d, d)])
        # cross attention over the encoder output
        h = b.layer_norm(x, f"{p}.encoder_attn_layer_norm", d)
        q = heads_of(b.linear(h, f"{p}.encoder_attn.q_proj", d, d))
        k = heads_of(b.linear(enc, f"{p}.encoder_attn.k_proj", d, d))
        v = heads_of(b.linear(enc, f"{p}.encoder_attn.v_proj", d, d))
        a = merge(attention(q, k, v, cross_mask))
        x = b.node("Add", [x, b.linear(a, f"{p}.encoder_attn.out_proj", d, d)])
        # MLP
        h = b.layer_norm(x, f"{p}.final_layer_norm", d)
        h = b.linear(b.gelu(b.linear(h, f"{p}.fc1", d, ffn)), f"{p}.fc2", ffn, d)
        x = b.node("Add", [x, h])
    x = b.layer_norm(x, "layer_norm", d)
    b.output(b.linear(x, "lm_head", d, vocab, bias=False), "logits")
    for i in range(layers):
        b.output(presents[2 * i], f"present.{i}.key")
        b.output(presents[2 * i + 1], f"present.{i}.value")

    rng = np.random.default_rng(14)
    mask = np.ones((batch, enc_len), np.int64)
    mask[:, enc_len - enc_len // 4 :] = 0
    feeds = {
        "input_ids": rng.integers(0, vocab, (batch, 1), dtype=np.int64),
        "encoder_hidden_states": randn(rng, batch, enc_len, d),
        "encoder_attention_mask": mask,
    }
    for i in range(layers):
        feeds[f"past_key_values.{i}.key"] = randn(rng, batch, heads, past, hd)
        feeds[f"past_key_values.{i}.value"] = randn(rng, batch, heads, past, hd)
    return b.model(), feeds


# ---------------------------------------------------------------------------
# tiny image classifier


def classifier(batch: int = 1, image: int = 32, widths: Sequence[int] = (16, 32, 64), classes: int = 10) -> tuple[onnx.ModelProto, dict]:
    b = Builder("classifier", seed=5)
    x = b.input("pixel_values", TensorProto.FLOAT, ["batch", 3, image, image])
    x = b.node("Relu", [b.conv_bn(x, "stem", 3, widths[0], 3, 1)])
    cin = widths[0]
    for s, width in enumerate(widths):
        if s > 0:
            x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        for blk in range(2):
            p = f"stage{s}.block{blk}"
            y = b.node("Relu", [b.conv_bn(x, f"{p}.conv1", cin, width, 3, 1)])
            y = b.conv_bn(y, f"{p}.conv2", width, width, 3, 1)
            shortcut = x if cin == width else b.conv_bn(x, f"{p}.shortcut", cin, width, 1, 1)
            x = b.node("Relu", [b.node("Add", [y, shortcut])])
            cin = width
    x = b.node("GlobalAveragePool", [x])
    # torch's x.view(x.size(0), -1)
    x = b.view(x, [b.dim(x, 0), -1])
    w = b.weight("fc.weight", (classes, cin))
    logits = b.node("Gemm", [x, w, b.weight("fc.bias", (classes,), 0.1)], transB=1)
    b.output(b.node("Softmax", [logits], axis=-1), "probs")
    rng = np.random.default_rng(15)
    return b.model(), {"pixel_values": randn(rng, batch, 3, image, image)}


MODELS: dict[str, Callable[[], tuple[onnx.ModelProto, dict]]] = {
    "gru-step": gru_step,
    "lstm-step": lstm_step,
    "vad": vad,
    "vad-if": lambda: vad(gated=True),
    "seq2seq-decoder": seq2seq_decoder,
    "classifier": classifier,
}


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    for name, make in MODELS.items():
        model, _ = make()
        print(f"{name:<18}{len(model.graph.node):>5} nodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
