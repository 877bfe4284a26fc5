"""GPU benchmark of the MLX EP, run on the device machine by tests/gpu/device_run.sh.

Models are written in PyTorch with random weights (fixed seed) on the GPU and exported to ONNX
there. Each is run, in the same process: PyTorch eager on the GPU (TF32 off), ONNX Runtime's
CPU EP, and ONNX Runtime with the MLX EP on MLX's GPU stream. Prints a markdown table and writes
JSON to the path given as the first argument.

- encoder: a MiniLM-class encoder (6 layers, hidden 384, 12 heads, FFN 1536, GELU), batch 8,
  sequence 128.
- llama-tiny / llama-large: Llama-style decoders (RMSNorm, RoPE, grouped-query attention, SwiGLU)
  with an explicit KV cache; a 128-token prefill then greedy decode steps, tokens compared.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
DEV = torch.device("cuda")
EP = "MLXExecutionProvider"


def median_ms(fn, warmup=3, runs=20):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def export(model, args, names_in, names_out, dynamic_axes, path):
    kwargs = dict(input_names=names_in, output_names=names_out, dynamic_axes=dynamic_axes, opset_version=17)
    try:
        torch.onnx.export(model, args, path, dynamo=False, **kwargs)
    except TypeError:
        torch.onnx.export(model, args, path, **kwargs)


def sessions(path):
    cpu = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    devices = [d for d in ort.get_ep_devices() if d.ep_name == EP]
    so.add_provider_for_devices(devices, {"device": "gpu"})
    mlx = ort.InferenceSession(path, sess_options=so)
    return cpu, mlx


def mlx_share(sess):
    """Fraction of the optimized graph's nodes placed on the MLX EP (when ORT reports it)."""
    try:
        subgraphs = sess.get_provider_graph_assignment_info()
    except Exception:  # noqa: BLE001 - older ORT: not reported
        return None
    total = sum(len(s.get_nodes()) for s in subgraphs)
    on_mlx = sum(len(s.get_nodes()) for s in subgraphs if s.ep_name == EP)
    return f"{on_mlx}/{total}"


# ----------------------------------------------------------------------------------------------
# encoder


class EncoderLayer(nn.Module):
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)
        self.ln1 = nn.LayerNorm(hidden)
        self.ff1 = nn.Linear(hidden, ffn)
        self.ff2 = nn.Linear(ffn, hidden)
        self.ln2 = nn.LayerNorm(hidden)

    def forward(self, x, bias):
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        shape = (b, s, self.heads, h // self.heads)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads) + bias
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = self.ln1(x + self.out(ctx))
        return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))


class Encoder(nn.Module):
    def __init__(self, vocab=30522, hidden=384, layers=6, heads=12, ffn=1536, max_pos=512):
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(max_pos, hidden)
        self.ln = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList(EncoderLayer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, input_ids, attention_mask):
        s = input_ids.shape[1]
        pos = torch.arange(s, device=input_ids.device).unsqueeze(0)
        x = self.ln(self.tok(input_ids) + self.pos(pos))
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        return x


def bench_encoder(tmp):
    torch.manual_seed(0)
    model = Encoder().to(DEV).eval()
    ids = torch.randint(0, 30522, (8, 128), device=DEV)
    mask = torch.ones(8, 128, dtype=torch.int64, device=DEV)
    mask[1, 100:] = 0
    path = os.path.join(tmp, "encoder.onnx")
    with torch.no_grad():
        export(model, (ids, mask), ["input_ids", "attention_mask"], ["last_hidden_state"],
               {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}, path)
        ref = model(ids, mask).cpu().numpy()

        def torch_run():
            model(ids, mask)
            torch.cuda.synchronize()

        t_torch = median_ms(torch_run)
    cpu, mlx = sessions(path)
    feed = {"input_ids": ids.cpu().numpy(), "attention_mask": mask.cpu().numpy()}
    out_cpu = cpu.run(None, feed)[0]
    out_mlx = mlx.run(None, feed)[0]
    t_cpu = median_ms(lambda: cpu.run(None, feed), runs=10)
    t_mlx = median_ms(lambda: mlx.run(None, feed))
    return {
        "model": "MiniLM-class encoder (6x384, 12 heads), batch 8, seq 128",
        "torch_gpu_ms": t_torch,
        "ort_cpu_ms": t_cpu,
        "ort_mlx_gpu_ms": t_mlx,
        "max_abs_diff_mlx_vs_cpu": float(np.abs(out_mlx - out_cpu).max()),
        "max_abs_diff_torch_vs_cpu": float(np.abs(ref - out_cpu).max()),
        "nodes_on_mlx": mlx_share(mlx),
    }


# ----------------------------------------------------------------------------------------------
# Llama-style decoder with an explicit KV cache


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim) + 0.1 * torch.randn(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class DecoderLayer(nn.Module):
    def __init__(self, hidden, heads, kv_heads, inter):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, hidden // heads
        self.q = nn.Linear(hidden, hidden, bias=False)
        self.k = nn.Linear(hidden, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(hidden, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.gate = nn.Linear(hidden, inter, bias=False)
        self.up = nn.Linear(hidden, inter, bias=False)
        self.down = nn.Linear(inter, hidden, bias=False)
        self.n1, self.n2 = RMSNorm(hidden), RMSNorm(hidden)

    def forward(self, x, cos, sin, mask, past_k, past_v):
        b, s, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, s, self.heads, self.hd).transpose(1, 2)
        k = self.k(h).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v(h).view(b, s, self.kv_heads, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        rep = self.heads // self.kv_heads
        kk = k.repeat_interleave(rep, dim=1)
        vv = v.repeat_interleave(rep, dim=1)
        att = (q @ kk.transpose(-1, -2)) / math.sqrt(self.hd) + mask
        ctx = (att.softmax(-1) @ vv).transpose(1, 2).reshape(b, s, -1)
        x = x + self.o(ctx)
        h = self.n2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h)), k, v


class Llama(nn.Module):
    def __init__(self, vocab, hidden, layers, heads, kv_heads, inter, max_pos=1024):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(DecoderLayer(hidden, heads, kv_heads, inter) for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.head = nn.Linear(hidden, vocab, bias=False)
        hd = hidden // heads
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(max_pos).float(), inv)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos_table", emb.cos())
        self.register_buffer("sin_table", emb.sin())

    def forward(self, input_ids, *past):
        b, s = input_ids.shape
        p = past[0].shape[2]
        pos = torch.arange(p, p + s, device=input_ids.device)
        cos = self.cos_table[pos][None, None]
        sin = self.sin_table[pos][None, None]
        i = torch.arange(s, device=input_ids.device)[:, None]
        j = torch.arange(p + s, device=input_ids.device)[None, :]
        mask = torch.where(j > i + p, torch.tensor(float("-inf"), device=input_ids.device), torch.tensor(0.0, device=input_ids.device))
        x = self.emb(input_ids)
        presents = []
        for n, layer in enumerate(self.layers):
            x, k, v = layer(x, cos, sin, mask, past[2 * n], past[2 * n + 1])
            presents += [k, v]
        return (self.head(self.norm(x)), *presents)


def bench_llama(tmp, name, layers, hidden, heads, kv_heads, inter, vocab=32000, prompt=128, steps=32):
    torch.manual_seed(1)
    model = Llama(vocab, hidden, layers, heads, kv_heads, inter).to(DEV).eval()
    hd = hidden // heads
    path = os.path.join(tmp, f"{name}.onnx")
    names_in = ["input_ids"] + [f"past.{n}.{kv}" for n in range(layers) for kv in ("key", "value")]
    names_out = ["logits"] + [f"present.{n}.{kv}" for n in range(layers) for kv in ("key", "value")]
    axes = {"input_ids": {0: "batch", 1: "seq"}}
    for nm in names_in[1:]:
        axes[nm] = {0: "batch", 2: "past"}
    for nm in names_out[1:]:
        axes[nm] = {0: "batch", 2: "total"}
    ids = torch.randint(0, vocab, (1, prompt), device=DEV)
    empty = [torch.zeros(1, kv_heads, 0, hd, device=DEV) for _ in range(2 * layers)]
    with torch.no_grad():
        export(model, (ids, *empty), names_in, names_out, axes, path)

    def generate_torch():
        past = empty
        toks = []
        cur = ids
        t0 = time.perf_counter()
        out = model(cur, *past)
        torch.cuda.synchronize()
        t_prefill = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(steps):
            nxt = out[0][:, -1].argmax(-1, keepdim=True)
            toks.append(int(nxt))
            out = model(nxt, *out[1:])
        torch.cuda.synchronize()
        return toks, t_prefill, time.perf_counter() - t0

    def generate_ort(sess):
        feed = {"input_ids": ids.cpu().numpy()}
        for nm in names_in[1:]:
            feed[nm] = np.zeros((1, kv_heads, 0, hd), np.float32)
        toks = []
        t0 = time.perf_counter()
        out = sess.run(None, feed)
        t_prefill = time.perf_counter() - t0
        first_logits = out[0]
        t0 = time.perf_counter()
        for _ in range(steps):
            nxt = out[0][:, -1].argmax(-1)[:, None].astype(np.int64)
            toks.append(int(nxt[0, 0]))
            feed = {"input_ids": nxt}
            feed.update({nm: out[i + 1] for i, nm in enumerate(names_in[1:])})
            out = sess.run(None, feed)
        return toks, t_prefill, time.perf_counter() - t0, first_logits

    with torch.no_grad():
        generate_torch()
        toks_t, pre_t, dec_t = generate_torch()
    cpu, mlx = sessions(path)
    generate_ort(mlx)
    toks_c, pre_c, dec_c, logits_c = generate_ort(cpu)
    toks_m, pre_m, dec_m, logits_m = generate_ort(mlx)
    return {
        "model": f"{name}: {layers} layers, hidden {hidden}, {heads}/{kv_heads} heads, prompt {prompt}, {steps} decode steps",
        "torch_gpu_prefill_tok_s": prompt / pre_t,
        "torch_gpu_decode_tok_s": steps / dec_t,
        "ort_cpu_prefill_tok_s": prompt / pre_c,
        "ort_cpu_decode_tok_s": steps / dec_c,
        "ort_mlx_gpu_prefill_tok_s": prompt / pre_m,
        "ort_mlx_gpu_decode_tok_s": steps / dec_m,
        "tokens_equal_mlx_cpu": toks_m == toks_c,
        "tokens_equal_torch_cpu": toks_t == toks_c,
        "max_abs_diff_prefill_logits_mlx_vs_cpu": float(np.abs(logits_m - logits_c).max()),
        "nodes_on_mlx": mlx_share(mlx),
    }


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "gpu_bench.json"
    which = sys.argv[2].split(",") if len(sys.argv) > 2 else ["encoder", "llama-tiny", "llama-large"]
    ort.register_execution_provider_library(EP, os.environ["ORTMLX_EP_LIBRARY"])
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in which:
            try:
                if name == "encoder":
                    r = bench_encoder(tmp)
                elif name == "llama-tiny":
                    r = bench_llama(tmp, name, 4, 256, 8, 2, 688)
                else:
                    r = bench_llama(tmp, name, 8, 1024, 16, 4, 2816)
            except Exception as err:  # noqa: BLE001 - reported in the results
                r = {"model": name, "error": f"{type(err).__name__}: {err}"}
            print(json.dumps(r), flush=True)
            results.append(r)
    with open(out_path, "w") as f:
        json.dump({"onnxruntime": ort.__version__, "torch": torch.__version__,
                   "gpu": torch.cuda.get_device_name(0), "results": results}, f, indent=2)


if __name__ == "__main__":
    main()
