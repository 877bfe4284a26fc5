"""Llama-style decoders with random weights, in ONNX Runtime GenAI's layout, and a greedy
generation loop that runs them on any ORT session.

The model (built with onnx.helper and numpy, fixed seed, nothing downloaded):

* inputs ``input_ids`` [batch, sequence] int64, ``attention_mask`` [batch, total] int64 and
  ``past_key_values.N.key`` / ``.value`` [batch, kv_heads, past, head] per layer;
* outputs ``logits`` [batch, sequence, vocab] and ``present.N.key`` / ``.value``
  [batch, kv_heads, total, head];
* embedding Gather; per layer SimplifiedLayerNormalization (the first) or
  SkipSimplifiedLayerNormalization (residual add + RMSNorm), Q/K/V projections, com.microsoft
  GroupQueryAttention with rotary embedding (cos/sin caches) and the KV cache, ``seqlens_k``
  = ReduceSum(attention_mask) - 1 and ``total_sequence_length`` = attention_mask's length, an
  output projection and a SiLU-gated MLP; final norm and LM head;
* projections as float32 MatMul, or as 4-bit com.microsoft MatMulNBits (block 32, with zero
  points) in the quantized variant.

``python llm.py --bench`` (what ``cargo xtask bench llm`` runs) times a prefill and greedy
decode steps on ORT's CPU EP and on the MLX EP, checks that the tokens agree, and writes a
JSON report.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Shape of the decoder."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    max_positions: int = 512
    rope_theta: float = 10000.0
    eps: float = 1e-5
    #: None: float32 projections; 4: MatMulNBits with 4-bit weights.
    quant_bits: int | None = None
    block_size: int = 32

    @property
    def head(self) -> int:
        return self.hidden // self.heads

    def quantized(self, bits: int = 4) -> "LlamaConfig":
        return dataclasses.replace(self, name=f"{self.name}-int{bits}", quant_bits=bits)


TINY = LlamaConfig("tiny", layers=4, hidden=256, heads=8, kv_heads=2, intermediate=512, vocab=1024)
LARGER = LlamaConfig("larger", layers=8, hidden=1024, heads=16, kv_heads=4, intermediate=2816, vocab=4096)


def pack_bits(q: np.ndarray, bits: int) -> np.ndarray:
    """Packs integers in [0, 2^bits) along the last axis into bytes, low bits first (ORT's
    MatMulNBits / QMoE layout)."""
    per = 8 // bits
    q = q.reshape(*q.shape[:-1], -1, per).astype(np.uint8)
    out = np.zeros(q.shape[:-1], np.uint8)
    for i in range(per):
        out |= (q[..., i] << (bits * i)).astype(np.uint8)
    return out


def quantize_nbits(w: np.ndarray, bits: int, block: int):
    """MatMulNBits operands for a float weight ``w`` [K, N]: asymmetric min/max quantization
    per block of ``block`` along K. Returns (B, scales, zero_points)."""
    k, n = w.shape
    assert k % block == 0, "K must be a multiple of the block size"
    nb = k // block
    wt = w.T.reshape(n, nb, block).astype(np.float32)
    lo = np.minimum(wt.min(-1), 0.0)
    hi = np.maximum(wt.max(-1), 0.0)
    qmax = 2**bits - 1
    scales = np.maximum((hi - lo) / qmax, 1e-8).astype(np.float32)
    zp = np.clip(np.round(-lo / scales), 0, qmax).astype(np.int64)
    q = np.clip(np.round(wt / scales[..., None]) + zp[..., None], 0, qmax).astype(np.int64)
    b = pack_bits(q.reshape(n, nb * block), bits).reshape(n, nb, block * bits // 8)
    per = 8 // bits
    padded = np.zeros((n, (nb + per - 1) // per * per), np.int64)
    padded[:, :nb] = zp
    zps = pack_bits(padded, bits).reshape(-1)
    return b, scales.reshape(-1), zps


def build_llama(cfg: LlamaConfig, seed: int = 0) -> onnx.ModelProto:
    """The decoder as an ONNX model (opset 21 + com.microsoft 1)."""
    r = np.random.default_rng(seed)
    h, d = cfg.hidden, cfg.head
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []

    def init(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(name: str, k: int, n: int, std: float) -> np.ndarray:
        return (r.standard_normal((k, n)) * std).astype(np.float32)

    def linear(x: str, name: str, k: int, n: int, std: float) -> str:
        w = weight(name, k, n, std)
        out = f"{name}_out"
        if cfg.quant_bits:
            b, s, z = quantize_nbits(w, cfg.quant_bits, cfg.block_size)
            nodes.append(
                helper.make_node(
                    "MatMulNBits",
                    [x, init(f"{name}.qweight", b), init(f"{name}.scales", s), init(f"{name}.qzeros", z)],
                    [out],
                    name=name,
                    domain=MS,
                    K=k,
                    N=n,
                    bits=cfg.quant_bits,
                    block_size=cfg.block_size,
                )
            )
        else:
            nodes.append(helper.make_node("MatMul", [x, init(f"{name}.weight", w)], [out], name=name))
        return out

    def norm_weight(name: str) -> str:
        return init(name, (1.0 + 0.1 * r.standard_normal(h)).astype(np.float32))

    # Attention bookkeeping shared by every layer.
    init("one_i64", np.array([1], np.int64))
    nodes += [
        helper.make_node("ReduceSum", ["attention_mask", "one_i64"], ["mask_sum"], keepdims=0, name="seqlens_sum"),
        helper.make_node("Sub", ["mask_sum", "one_i64"], ["seqlens_i64"], name="seqlens_sub"),
        helper.make_node("Cast", ["seqlens_i64"], ["seqlens_k"], to=TensorProto.INT32, name="seqlens_cast"),
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"], name="total_shape"),
        helper.make_node("Gather", ["mask_shape", init("one_scalar", np.array(1, np.int64))], ["total_i64"], axis=0, name="total_gather"),
        helper.make_node("Cast", ["total_i64"], ["total_seq_len"], to=TensorProto.INT32, name="total_cast"),
    ]
    inv_freq = 1.0 / (cfg.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    angles = np.outer(np.arange(cfg.max_positions, dtype=np.float64), inv_freq)
    init("cos_cache", np.cos(angles).astype(np.float32))
    init("sin_cache", np.sin(angles).astype(np.float32))

    emb = init("embed_tokens.weight", (r.standard_normal((cfg.vocab, h)) * 1.0).astype(np.float32))
    nodes.append(helper.make_node("Gather", [emb, "input_ids"], ["embeds"], axis=0, name="embed"))
    std = 1.0 / np.sqrt(h)
    residual = "embeds"
    down = None
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total_sequence"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", cfg.vocab])]
    for i in range(cfg.layers):
        p = f"layers.{i}"
        ln1 = norm_weight(f"{p}.input_layernorm.weight")
        if down is None:
            nodes.append(helper.make_node("SimplifiedLayerNormalization", [residual, ln1], [f"{p}.ln1"], epsilon=cfg.eps, axis=-1, name=f"{p}.ln1"))
        else:
            nodes.append(helper.make_node("SkipSimplifiedLayerNormalization", [down, residual, ln1], [f"{p}.ln1", "", "", f"{p}.res1"], domain=MS, epsilon=cfg.eps, name=f"{p}.ln1"))
            residual = f"{p}.res1"
        q = linear(f"{p}.ln1", f"{p}.q_proj", h, cfg.heads * d, std)
        k = linear(f"{p}.ln1", f"{p}.k_proj", h, cfg.kv_heads * d, std)
        v = linear(f"{p}.ln1", f"{p}.v_proj", h, cfg.kv_heads * d, std)
        past_k, past_v = f"past_key_values.{i}.key", f"past_key_values.{i}.value"
        present_k, present_v = f"present.{i}.key", f"present.{i}.value"
        for n in (past_k, past_v):
            inputs.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", cfg.kv_heads, "past_sequence", d]))
        for n in (present_k, present_v):
            outputs.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", cfg.kv_heads, "total_sequence", d]))
        nodes.append(
            helper.make_node(
                "GroupQueryAttention",
                [q, k, v, past_k, past_v, "seqlens_k", "total_seq_len", "cos_cache", "sin_cache"],
                [f"{p}.attn", present_k, present_v],
                domain=MS,
                num_heads=cfg.heads,
                kv_num_heads=cfg.kv_heads,
                do_rotary=1,
                name=f"{p}.attn",
            )
        )
        o = linear(f"{p}.attn", f"{p}.o_proj", cfg.heads * d, h, std)
        ln2 = norm_weight(f"{p}.post_attention_layernorm.weight")
        nodes.append(helper.make_node("SkipSimplifiedLayerNormalization", [o, residual, ln2], [f"{p}.ln2", "", "", f"{p}.res2"], domain=MS, epsilon=cfg.eps, name=f"{p}.ln2"))
        residual = f"{p}.res2"
        gate = linear(f"{p}.ln2", f"{p}.gate_proj", h, cfg.intermediate, std)
        up = linear(f"{p}.ln2", f"{p}.up_proj", h, cfg.intermediate, std)
        nodes += [
            helper.make_node("Sigmoid", [gate], [f"{p}.gate_sig"], name=f"{p}.sig"),
            helper.make_node("Mul", [gate, f"{p}.gate_sig"], [f"{p}.silu"], name=f"{p}.silu"),
            helper.make_node("Mul", [f"{p}.silu", up], [f"{p}.gated"], name=f"{p}.gated"),
        ]
        down = linear(f"{p}.gated", f"{p}.down_proj", cfg.intermediate, h, 1.0 / np.sqrt(cfg.intermediate))
    final = norm_weight("norm.weight")
    nodes.append(helper.make_node("SkipSimplifiedLayerNormalization", [down, residual, final], ["final_norm"], domain=MS, epsilon=cfg.eps, name="final_norm"))
    linear_out = linear("final_norm", "lm_head", h, cfg.vocab, 1.0)
    nodes.append(helper.make_node("Identity", [linear_out], ["logits"], name="logits"))
    graph = helper.make_graph(nodes, f"llama_{cfg.name}", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)], producer_name="ortmlx-llm")
    model.ir_version = 10
    return model


def build_torch_style_llama(cfg: LlamaConfig, seed: int = 0) -> onnx.ModelProto:
    """The decoder of ``tests/gpu/bench_gpu.py`` (``Llama``) as PyTorch's TorchScript exporter
    writes it, without torch: plain ONNX ops only (RMSNorm as Pow/ReduceMean/Sqrt/Div, rotary
    embedding as Slice/Neg/Concat, ``repeat_interleave`` of the KV heads as
    Unsqueeze/Expand/Reshape), and positions and the causal mask computed in the graph from the
    past length by Shape -> Gather -> Add -> Range -> Greater -> Where chains. Reshape targets
    are built from ``Shape`` of the (computed) activations, as ``x.view(b, s, ...)`` exports.
    Inputs ``input_ids`` and ``past_key_values.{i}.key/value``; outputs ``logits`` and
    ``present.{i}.key/value``. Float32."""
    r = np.random.default_rng(seed)
    h, d, kv = cfg.hidden, cfg.head, cfg.kv_heads
    rep = cfg.heads // kv
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    counter = [0]
    named: set[str] = set()

    def init(name: str, value) -> str:
        if name not in named:  # shared constants are added once
            named.add(name)
            inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op: str, inputs: Sequence[str], **attrs) -> str:
        counter[0] += 1
        out = f"/{op}_{counter[0]}_output_0"
        nodes.append(helper.make_node(op, list(inputs), [out], name=f"/{op}_{counter[0]}", **attrs))
        return out

    def i64(name: str, values) -> str:
        return init(name, np.array(values, np.int64))

    def dim(x: str, i: int) -> str:
        """``x.shape[i]`` as torch exports it: Shape -> Gather (a 0-d int64)."""
        return node("Gather", [node("Shape", [x]), i64(f"dim_{i}", i)], axis=0)

    def unsq0(x: str) -> str:
        return node("Unsqueeze", [x, i64("axes_0", [0])])

    def linear(x: str, k: int, n: int, std: float) -> str:
        # torch's Linear: MatMul with the transposed weight folded into an initializer.
        return node("MatMul", [x, init(f"w{counter[0]}", (r.standard_normal((k, n)) * std).astype(np.float32))])

    def rms_norm(x: str) -> str:
        w = init(f"norm{counter[0]}", (1.0 + 0.1 * r.standard_normal(h)).astype(np.float32))
        ms = node("ReduceMean", [node("Pow", [x, init("two", np.array(2.0, np.float32))])], axes=[-1], keepdims=1)
        inv = node("Div", [init("one_f", np.array(1.0, np.float32)), node("Sqrt", [node("Add", [ms, init("eps", np.array(1e-6, np.float32))])])])
        return node("Mul", [node("Mul", [x, inv]), w])

    def rotate_half(x: str) -> str:
        half = node("Div", [dim(x, 3), i64("two_i", 2)])
        hi = node("Slice", [x, unsq0(half), i64("big", [2**62]), i64("axes_m1", [-1])])
        lo = node("Slice", [x, i64("zero_1d", [0]), unsq0(half), i64("axes_m1", [-1])])
        return node("Concat", [node("Neg", [hi]), lo], axis=-1)

    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "sequence", cfg.vocab])]
    for i in range(cfg.layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT, ["batch", kv, "past_sequence", d]))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", TensorProto.FLOAT, ["batch", kv, "total_sequence", d]))

    inv = 1.0 / (cfg.rope_theta ** (np.arange(0, d, 2, dtype=np.float64) / d))
    freqs = np.outer(np.arange(cfg.max_positions, dtype=np.float64), inv)
    table = np.concatenate([freqs, freqs], axis=-1)
    # positions and mask from the past length (forward() of bench_gpu.py's Llama)
    p = dim("past_key_values.0.key", 2)
    s = dim("input_ids", 1)
    ps = node("Add", [p, s])
    pos = node("Range", [p, ps, i64("one_scalar", 1)])
    cos = node("Unsqueeze", [node("Gather", [init("cos_table", np.cos(table).astype(np.float32)), pos], axis=0), i64("axes_01", [0, 1])])
    sin = node("Unsqueeze", [node("Gather", [init("sin_table", np.sin(table).astype(np.float32)), pos], axis=0), i64("axes_01", [0, 1])])
    ii = node("Unsqueeze", [node("Range", [i64("zero", 0), s, "one_scalar"]), i64("axes_1", [1])])
    jj = node("Unsqueeze", [node("Range", [i64("zero", 0), ps, "one_scalar"]), "axes_0"])
    mask = node("Where", [node("Greater", [jj, node("Add", [ii, p])]), init("neg_inf", np.array(-np.inf, np.float32)), init("zero_f", np.array(0.0, np.float32))])

    x = node("Gather", [init("emb", r.standard_normal((cfg.vocab, h)).astype(np.float32)), "input_ids"], axis=0)
    std = 1.0 / np.sqrt(h)
    for i in range(cfg.layers):
        b_, s_ = dim(x, 0), dim(x, 1)
        hn = rms_norm(x)

        def heads(t: str, n: int) -> str:
            shape = node("Concat", [unsq0(b_), unsq0(s_), i64(f"c{n}", [n]), i64("c_hd", [d])], axis=0)
            return node("Transpose", [node("Reshape", [t, shape])], perm=[0, 2, 1, 3])

        q = heads(linear(hn, h, cfg.heads * d, std), cfg.heads)
        k = heads(linear(hn, h, kv * d, std), kv)
        v = heads(linear(hn, h, kv * d, std), kv)
        q = node("Add", [node("Mul", [q, cos]), node("Mul", [rotate_half(q), sin])])
        k = node("Add", [node("Mul", [k, cos]), node("Mul", [rotate_half(k), sin])])
        nodes.append(helper.make_node("Concat", [f"past_key_values.{i}.key", k], [f"present.{i}.key"], name=f"/present_key_{i}", axis=2))
        nodes.append(helper.make_node("Concat", [f"past_key_values.{i}.value", v], [f"present.{i}.value"], name=f"/present_value_{i}", axis=2))

        def repeat_kv(t: str) -> str:
            # repeat_interleave(rep, dim=1): Unsqueeze, Expand and Reshape with targets from Shape(t)
            b2, h2, t2, d2 = (dim(t, j) for j in range(4))
            big = node("Concat", [unsq0(b2), unsq0(h2), i64("c_rep", [rep]), unsq0(t2), unsq0(d2)], axis=0)
            e = node("Expand", [node("Unsqueeze", [t, i64("axes_2", [2])]), big])
            merged = node("Concat", [unsq0(b2), node("Mul", [unsq0(h2), i64("c_rep", [rep])]), unsq0(t2), unsq0(d2)], axis=0)
            return node("Reshape", [e, merged])

        kk, vv = repeat_kv(f"present.{i}.key"), repeat_kv(f"present.{i}.value")
        att = node("Div", [node("MatMul", [q, node("Transpose", [kk], perm=[0, 1, 3, 2])]), init("sqrt_hd", np.array(np.sqrt(d), np.float32))])
        att = node("Softmax", [node("Add", [att, mask])], axis=-1)
        ctx = node("Transpose", [node("MatMul", [att, vv])], perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, node("Concat", [unsq0(b_), unsq0(s_), i64("c_m1", [-1])], axis=0)])
        x = node("Add", [x, linear(ctx, h, h, std)])
        hn = rms_norm(x)
        gate = linear(hn, h, cfg.intermediate, std)
        silu = node("Mul", [gate, node("Sigmoid", [gate])])
        x = node("Add", [x, linear(node("Mul", [silu, linear(hn, h, cfg.intermediate, std)]), cfg.intermediate, h, 1.0 / np.sqrt(cfg.intermediate))])
    logits = linear(rms_norm(x), h, cfg.vocab, 1.0)
    nodes.append(helper.make_node("Identity", [logits], ["logits"], name="/logits"))
    graph = helper.make_graph(nodes, f"torch_llama_{cfg.name}", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ortmlx-llm-torch-style")
    model.ir_version = 8
    return model


def torch_style_feeds(cfg: LlamaConfig, past: int, token: int = 17, seed: int = 2) -> dict[str, np.ndarray]:
    """Inputs of one decode step of :func:`build_torch_style_llama` after ``past`` tokens."""
    r = np.random.default_rng(seed)
    feeds = {"input_ids": np.array([[token]], np.int64)}
    for i in range(cfg.layers):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = r.standard_normal((1, cfg.kv_heads, past, cfg.head)).astype(np.float32)
    return feeds


def empty_past(cfg: LlamaConfig, batch: int = 1) -> dict[str, np.ndarray]:
    past = {}
    for i in range(cfg.layers):
        for kind in ("key", "value"):
            past[f"past_key_values.{i}.{kind}"] = np.zeros((batch, cfg.kv_heads, 0, cfg.head), np.float32)
    return past


@dataclasses.dataclass
class Generation:
    """What a greedy run produced and how long it took."""

    tokens: list[int]
    logits: list[np.ndarray]
    prefill_s: float
    decode_s: list[float]


def generate(session, cfg: LlamaConfig, prompt: Sequence[int], steps: int) -> Generation:
    """Prefill ``prompt`` (batch 1), then ``steps`` greedy decode steps, feeding each step's
    present KV cache back as the next step's past (GenAI's non-shared cache)."""
    out_names = [o.name for o in session.get_outputs()]
    ids = np.array([list(prompt)], np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), **empty_past(cfg)}
    t0 = time.perf_counter()
    outs = dict(zip(out_names, session.run(None, feeds)))
    prefill_s = time.perf_counter() - t0
    logits = [outs["logits"][0, -1].copy()]
    tokens = [int(np.argmax(logits[-1]))]
    total = ids.shape[1]
    decode_s = []
    for _ in range(steps - 1 if steps else 0):
        total += 1
        feeds = {"input_ids": np.array([[tokens[-1]]], np.int64), "attention_mask": np.ones((1, total), np.int64)}
        for i in range(cfg.layers):
            feeds[f"past_key_values.{i}.key"] = outs[f"present.{i}.key"]
            feeds[f"past_key_values.{i}.value"] = outs[f"present.{i}.value"]
        t0 = time.perf_counter()
        outs = dict(zip(out_names, session.run(None, feeds)))
        decode_s.append(time.perf_counter() - t0)
        logits.append(outs["logits"][0, -1].copy())
        tokens.append(int(np.argmax(logits[-1])))
    return Generation(tokens, logits, prefill_s, decode_s)


#: The vendor id of the MLX EP's memory device: values bound to
#: ``OrtDevice(cpu, default memory, MLX_VENDOR_ID, 0)`` live in MLX's own buffers.
MLX_VENDOR_ID = 0x4D4C


def mlx_device():
    """The MLX EP's memory device, as the C-level ``OrtDevice`` IOBinding takes."""
    import onnxruntime as ort

    return ort.OrtDevice.make("cpu", 0, MLX_VENDOR_ID)._get_c_device()


def generate_iobinding(session, cfg: LlamaConfig, prompt: Sequence[int], steps: int) -> Generation:
    """``generate`` through IOBinding: every ``present.*`` is bound to the MLX EP's memory and
    fed back as the next step's ``past_key_values.*`` without leaving it; only the logits are
    bound to (and copied into) host memory."""
    device = mlx_device()
    out_names = [o.name for o in session.get_outputs()]
    ids = np.array([list(prompt)], np.int64)
    past = empty_past(cfg)
    logits: list[np.ndarray] = []
    tokens: list[int] = []
    decode_s: list[float] = []
    prefill_s = 0.0
    total = ids.shape[1]
    for step in range(steps):
        binding = session.io_binding()
        if step == 0:
            binding.bind_cpu_input("input_ids", ids)
            binding.bind_cpu_input("attention_mask", np.ones_like(ids))
        else:
            total += 1
            binding.bind_cpu_input("input_ids", np.array([[tokens[-1]]], np.int64))
            binding.bind_cpu_input("attention_mask", np.ones((1, total), np.int64))
        for name, value in past.items():
            if isinstance(value, np.ndarray):
                binding.bind_cpu_input(name, value)
            else:
                binding.bind_ortvalue_input(name, value)
        for name in out_names:
            if name == "logits":
                binding.bind_output(name, "cpu")
            else:
                binding._iobinding.bind_output(name, device)  # noqa: SLF001 - the public form takes no vendor id
        t0 = time.perf_counter()
        session.run_with_iobinding(binding)
        elapsed = time.perf_counter() - t0
        if step == 0:
            prefill_s = elapsed
        else:
            decode_s.append(elapsed)
        outs = dict(zip(out_names, binding.get_outputs()))
        logits.append(outs["logits"].numpy()[0, -1].copy())
        tokens.append(int(np.argmax(logits[-1])))
        past = {}
        for i in range(cfg.layers):
            past[f"past_key_values.{i}.key"] = outs[f"present.{i}.key"]
            past[f"past_key_values.{i}.value"] = outs[f"present.{i}.value"]
    return Generation(tokens, logits, prefill_s, decode_s)


def prompt_ids(cfg: LlamaConfig, length: int, seed: int = 1) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, cfg.vocab, length)]


# ---------------------------------------------------------------------------
# the benchmark


def _sessions(model: onnx.ModelProto, library: str, threads: int | None, ep_options: dict[str, str] | None = None):
    import onnxruntime as ort

    data = model.SerializeToString()
    cpu_opts = ort.SessionOptions()
    if threads:
        cpu_opts.intra_op_num_threads = threads
    cpu = ort.InferenceSession(data, sess_options=cpu_opts, providers=["CPUExecutionProvider"])
    try:
        ort.register_execution_provider_library("ortmlx", os.path.abspath(library))
    except Exception as err:  # noqa: BLE001 - already registered in this process
        if "already" not in str(err).lower():
            raise
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
    if not devices:
        raise SystemExit("the MLX EP library registered but offers no device")
    mlx_opts = ort.SessionOptions()
    if threads:
        mlx_opts.intra_op_num_threads = threads
    mlx_opts.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    mlx_opts.add_provider_for_devices(devices, dict(ep_options or {}))
    mlx = ort.InferenceSession(data, sess_options=mlx_opts)
    placement: dict[str, int] = {}
    for sub in mlx.get_provider_graph_assignment_info():
        for _ in sub.get_nodes():
            placement[sub.ep_name] = placement.get(sub.ep_name, 0) + 1
    return cpu, mlx, placement


def _ep_runs(cursor, session_runs: int) -> dict | None:
    """The MLX EP's run counters since the last call (see trace_stats.py), per session run."""
    if cursor is None:
        return None
    s = cursor.since_last()
    if not s or not session_runs:
        return None
    return {
        "session_runs": session_runs,
        "paths": s["paths"],
        "fused_nodes": s["fused_nodes"],
        "host_syncs_per_run": s["host_syncs"] / session_runs,
        "host_reads_per_run": s["host_reads"] / session_runs,
        "kv_host_bytes_per_run": s.get("kv_copied_bytes", 0) / session_runs,
        "phase_us": s.get("phase_us", {}),
    }


def _bench_iobinding(model, cfg: LlamaConfig, library: str, prompt, steps: int, repeats: int, threads, ep_options, cursor) -> tuple[dict, Generation]:
    """The MLX EP with its KV cache bound to the EP's memory (``generate_iobinding``) on a
    session of its own; the KV bytes copied per step come from the EP's trace."""
    import gc

    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
    options.add_provider_for_devices(devices, dict(ep_options or {}))
    session = ort.InferenceSession(model.SerializeToString(), sess_options=options)
    generate_iobinding(session, cfg, prompt[:8], 3)  # warm-up
    best = None
    for _ in range(repeats):
        g = generate_iobinding(session, cfg, prompt, steps)
        if best is None or g.prefill_s + sum(g.decode_s) < best.prefill_s + sum(best.decode_s):
            best = g
    del session
    gc.collect()
    decode_time = sum(best.decode_s)
    stats = {
        "prefill_tok_s": len(prompt) / best.prefill_s,
        "decode_tok_s": len(best.decode_s) / decode_time if decode_time else 0.0,
        "decode_ms_per_token": 1000 * decode_time / max(len(best.decode_s), 1),
        "ep_runs": _ep_runs(cursor, 3 + repeats * max(steps, 1)),
    }
    return stats, best


def bench_one(cfg: LlamaConfig, library: str, prefill: int, steps: int, repeats: int, threads: int | None, ep_options=None, cursor=None, iobinding: bool = False) -> dict:
    model = build_llama(cfg)
    cpu, mlx, placement = _sessions(model, library, threads, ep_options)
    prompt = prompt_ids(cfg, prefill)
    result: dict = {"model": cfg.name, "config": dataclasses.asdict(cfg), "prefill_tokens": prefill, "decode_steps": steps, "placement": placement}
    runs = {}
    for label, session in (("cpu", cpu), ("mlx", mlx)):
        generate(session, cfg, prompt[:8], 3)  # warm-up (first-run allocations, caches)
        best = None
        for _ in range(repeats):
            g = generate(session, cfg, prompt, steps)
            if best is None or g.prefill_s + sum(g.decode_s) < best.prefill_s + sum(best.decode_s):
                best = g
        runs[label] = best
        decode_time = sum(best.decode_s)
        result[label] = {
            "prefill_s": best.prefill_s,
            "prefill_tok_s": prefill / best.prefill_s,
            "decode_s": decode_time,
            "decode_tok_s": len(best.decode_s) / decode_time if decode_time else 0.0,
            "decode_ms_per_token": 1000 * decode_time / max(len(best.decode_s), 1),
        }
    # Release the MLX session: the EP writes its trace then (ORTMLX_TRACE), with the counters.
    del mlx, session
    import gc

    gc.collect()
    result["mlx"]["ep_runs"] = _ep_runs(cursor, 3 + repeats * max(steps, 1))  # warm-up: 3 runs
    a, b = runs["cpu"], runs["mlx"]
    diffs = [float(np.max(np.abs(x - y))) for x, y in zip(a.logits, b.logits)]
    scale = max(float(np.max(np.abs(x))) for x in a.logits)
    result["tokens_identical"] = a.tokens == b.tokens
    result["first_token_mismatch"] = next((i for i, (x, y) in enumerate(zip(a.tokens, b.tokens)) if x != y), None)
    result["logits_max_abs_diff"] = max(diffs) if diffs else 0.0
    result["logits_scale"] = scale
    result["prefill_ratio_mlx_cpu"] = result["mlx"]["prefill_tok_s"] / result["cpu"]["prefill_tok_s"]
    result["decode_ratio_mlx_cpu"] = result["mlx"]["decode_tok_s"] / result["cpu"]["decode_tok_s"]
    if iobinding:
        stats, g = _bench_iobinding(model, cfg, library, prompt, steps, repeats, threads, ep_options, cursor)
        stats["tokens_identical"] = g.tokens == a.tokens
        diffs = [float(np.max(np.abs(x - y))) for x, y in zip(a.logits, g.logits)]
        stats["logits_max_abs_diff"] = max(diffs) if diffs else 0.0
        result["iobinding"] = stats
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", action="store_true", help="run the benchmark")
    parser.add_argument("--library", default=os.environ.get("ORTMLX_EP_LIBRARY"), help="the MLX EP library")
    parser.add_argument("--out", default="target/bench/llm.json")
    parser.add_argument("--models", default="tiny,tiny-int4,larger,larger-int4")
    parser.add_argument("--prefill", type=int, default=128)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per EP (the fastest counts)")
    parser.add_argument("--threads", type=int, default=0, help="ORT intra-op threads (0: ORT's default)")
    parser.add_argument("--rtol", type=float, default=1e-3, help="logit tolerance relative to the logits' scale")
    parser.add_argument(
        "--iobinding",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also decode with the KV cache bound to the MLX EP's memory (IOBinding); prints 'iobinding: kv_host_bytes_per_step=<n> decode tok/s=<x>'",
    )
    parser.add_argument("--ep-option", action="append", default=[], metavar="KEY=VALUE", help="an MLX EP option, e.g. device=gpu (repeatable)")
    parser.add_argument("--max-positions", type=int, default=0, help="the models' rotary table length (0: each model's own, 512); raise it to decode after a longer prefill")
    args = parser.parse_args(argv)
    if not args.bench:
        parser.print_help()
        return 0
    if not args.library:
        raise SystemExit("--library or ORTMLX_EP_LIBRARY must name the MLX EP library")
    known = {"tiny": TINY, "tiny-int4": TINY.quantized(4), "larger": LARGER, "larger-int4": LARGER.quantized(4)}
    results = []
    ok = True
    cursor = None
    if os.environ.get("ORTMLX_TRACE"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from trace_stats import TraceCursor

        cursor = TraceCursor(os.environ["ORTMLX_TRACE"].replace("%p", str(os.getpid())))
    header = f"{'model':<14}{'EP':<5}{'prefill tok/s':>15}{'decode tok/s':>14}{'ms/token':>10}"
    for name in args.models.split(","):
        cfg = known[name.strip()]
        if args.max_positions:
            cfg = dataclasses.replace(cfg, max_positions=args.max_positions)
        t0 = time.perf_counter()
        ep_options = dict(o.split("=", 1) for o in args.ep_option)
        r = bench_one(cfg, args.library, args.prefill, args.steps, args.repeats, args.threads or None, ep_options, cursor, args.iobinding)
        r["ep_options"] = ep_options
        r["bench_s"] = time.perf_counter() - t0
        results.append(r)
        tol = args.rtol * r["logits_scale"]
        r["logits_within_tolerance"] = r["logits_max_abs_diff"] <= tol
        ok &= r["tokens_identical"] and r["logits_within_tolerance"]
        if "iobinding" in r:
            ok &= r["iobinding"]["tokens_identical"] and r["iobinding"]["logits_max_abs_diff"] <= tol
        print(header if len(results) == 1 else "", end="\n" if len(results) == 1 else "")
        for ep in ("cpu", "mlx"):
            m = r[ep]
            print(f"{cfg.name:<14}{ep:<5}{m['prefill_tok_s']:>15.1f}{m['decode_tok_s']:>14.1f}{m['decode_ms_per_token']:>10.2f}")
        print(
            f"{'':<14}mlx/cpu prefill {r['prefill_ratio_mlx_cpu']:.2f}x, decode {r['decode_ratio_mlx_cpu']:.2f}x; "
            f"tokens identical: {r['tokens_identical']}; max |logit diff| {r['logits_max_abs_diff']:.2e} "
            f"(scale {r['logits_scale']:.1f}); nodes {r['placement']}",
            flush=True,
        )
        ep_runs = r["mlx"].get("ep_runs")
        if ep_runs:
            print(
                f"{'':<14}mlx EP runs: paths {ep_runs['paths']}, {ep_runs['fused_nodes']} fused node(s), "
                f"host syncs {ep_runs['host_syncs_per_run']:.2f}/run, host reads {ep_runs['host_reads_per_run']:.2f}/run, "
                f"KV bytes copied {ep_runs['kv_host_bytes_per_run']:.0f}/run",
                flush=True,
            )
            for path, phases in sorted(ep_runs.get("phase_us", {}).items()):
                spent = ", ".join(f"{k.removesuffix('_us')} {v:.0f}" for k, v in phases.items())
                print(f"{'':<14}mlx EP {path} run, median us: {spent}", flush=True)
        io = r.get("iobinding")
        if io:
            kv = io["ep_runs"]["kv_host_bytes_per_run"] if io.get("ep_runs") else float("nan")
            print(
                f"{cfg.name:<14}iobinding: kv_host_bytes_per_step={kv:.0f} decode tok/s={io['decode_tok_s']:.1f} "
                f"(tokens identical: {io['tokens_identical']})",
                flush=True,
            )
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    summary = {
        "prefill_tokens": args.prefill,
        "decode_steps": args.steps,
        "results": results,
        "all_ok": ok,
    }
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=2)
    print(f"wrote {args.out}")
    if not ok:
        print("llm: MISMATCH between the CPU EP and the MLX EP (see above)", file=sys.stderr)
    main_model = next((r for r in results if r["model"] == "larger"), results[-1])
    print(f"llm: decode mlx/cpu={main_model['decode_ratio_mlx_cpu']:.2f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
