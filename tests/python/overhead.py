"""The ORT side of ``cargo xtask bench overhead``: the bench's workloads through ONNX Runtime with
the MLX EP (``session.run`` with numpy inputs and outputs), in one process, merged into the JSON
that ``crates/runtime/examples/overhead_bench.rs`` wrote.

That Rust bench times the EP's runtime (plan + ``Executable::run``: the EP minus ORT's shell)
against the same computation written directly against MLX ("raw"). This adds ``ort_ms``: the
same kind of graph through a real ORT session, so ``ort_ms - ep_ms`` is what ORT's shell (kernel
context, input and output copies, ORT's own executor) adds per run. Graphs: ``1-node`` and
``llama-decode`` are the same graphs as on the Rust side (the latter ``llm.build_llama`` with the
"tiny" config, one decode step after 128 tokens, the same past fed every run); the encoders are
``models.minilm_encoder`` with 1 and 6 layers, which also carry the embeddings and the attention
mask (a few dozen small nodes more than the Rust side's). The last line is
``overhead: ep/raw=<r> fixed_us=<us>`` for the decode step (runtime level), as the Rust bench
prints it, preceded by the ORT-level line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import llm  # noqa: E402
import models  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402


def median_s(fn, budget_s: float, warmup: int = 10) -> float:
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < 5 or (len(times) < 1000 and time.perf_counter() - start < budget_s):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


def one_node():
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    node = helper.make_node("Add", ["x", "b"], ["y"], name="add0")
    graph = helper.make_graph([node], "one_node", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])], initializer=[helper.make_tensor("b", TensorProto.FLOAT, [64], b)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": x}


def encoder(layers: int):
    return models.minilm_encoder(layers=layers, seq=128, batch=1), models.encoder_inputs(batch=1, seq=128)


def llama_decode(past: int = 128):
    cfg = llm.TINY
    rng = np.random.default_rng(3)
    feeds = {"input_ids": np.array([[17]], np.int64), "attention_mask": np.ones((1, past + 1), np.int64)}
    for i in range(cfg.layers):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = rng.standard_normal((1, cfg.kv_heads, past, cfg.head)).astype(np.float32)
    return llm.build_llama(cfg), feeds


WORKLOADS = {
    "1-node": one_node,
    "encoder-layer": lambda: encoder(1),
    "encoder-6l": lambda: encoder(6),
    "llama-decode": llama_decode,
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", default=os.environ.get("ORTMLX_EP_LIBRARY"))
    parser.add_argument("--json", required=True, help="the Rust bench's JSON, updated in place")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--budget-ms", type=float, default=2000.0)
    args = parser.parse_args(argv)
    with open(args.json) as f:
        result = json.load(f)
    ort.register_execution_provider_library("ortmlx", os.path.abspath(args.library))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
    print(f"{'workload':<15}{'ort_ms':>10}{'ep_ms':>10}{'raw_ms':>10}{'ort/raw':>9}{'ort-ep us':>11}   (through ONNX Runtime {ort.__version__})")
    for w in result["workloads"]:
        make = WORKLOADS.get(w["name"])
        if make is None:
            continue
        model, feeds = make()
        options = ort.SessionOptions()
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        options.add_provider_for_devices(devices, {"device": args.device})
        session = ort.InferenceSession(model.SerializeToString(), sess_options=options)
        w["ort_ms"] = 1e3 * median_s(lambda: session.run(None, feeds), args.budget_ms / 1e3)
        w["ort_over_raw"] = w["ort_ms"] / w["raw_ms"]
        w["ort_shell_us"] = 1e3 * (w["ort_ms"] - w["ep_ms"])
        w["ort_graph"] = "same as ep" if w["name"] in ("1-node", "llama-decode") else "models.minilm_encoder (with embeddings and mask)"
        print(f"{w['name']:<15}{w['ort_ms']:>10.3f}{w['ep_ms']:>10.3f}{w['raw_ms']:>10.3f}{w['ort_over_raw']:>9.2f}{w['ort_shell_us']:>11.1f}", flush=True)
        del session
    result["onnxruntime"] = ort.__version__
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.json}")
    decode = next((w for w in result["workloads"] if w["name"] == "llama-decode"), None)
    if decode is not None:
        if "ort_ms" in decode:
            print(f"through ORT: ort/raw={decode['ort_over_raw']:.2f} fixed_us={1e3 * (decode['ort_ms'] - decode['raw_ms']):.0f}")
        print(f"overhead: ep/raw={decode['ep_over_raw']:.2f} fixed_us={decode['fixed_us']:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
