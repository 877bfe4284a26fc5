"""Demo: a small MiniLM-style encoder through ONNX Runtime, MLX EP vs CPU EP.

Builds the model here (onnx.helper + numpy, fixed seed, random weights: embeddings Gather,
LayerNormalization, 2 self-attention layers with MatMul/Add/Reshape/Transpose/Softmax/Div,
an Erf-GELU FFN), runs it with the MLX EP and with ORT's CPU EP and prints how far the
outputs differ, how many nodes ran on MLX, and both latencies.

    ORTMLX_EP_LIBRARY=target/release/libonnxruntime_mlx_ep.so python tests/python/demo.py [--runs N]

``cargo xtask demo`` builds the library and runs this with the pinned ORT.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import encoder_inputs, minilm_encoder  # noqa: E402

MLX_EP = "MLXExecutionProvider"
RTOL = 1e-4


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", default=os.environ.get("ORTMLX_EP_LIBRARY"), help="EP library (default: $ORTMLX_EP_LIBRARY)")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per EP (median reported)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed runs first")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    args = parser.parse_args()
    if not args.library:
        print("demo: set ORTMLX_EP_LIBRARY (or --library) to the built EP library; `cargo xtask demo` does it", file=sys.stderr)
        return 2

    print(f"onnxruntime {ort.__version__}, EP library {args.library}")
    ort.register_execution_provider_library("ortmlx", args.library)
    devices = [d for d in ort.get_ep_devices() if d.ep_name == MLX_EP]
    if not devices:
        print(f"demo: the library registered but offers no {MLX_EP} device", file=sys.stderr)
        return 1

    model = minilm_encoder(layers=args.layers, hidden=384, heads=12, seq=args.seq, vocab=1000)
    feeds = encoder_inputs(seq=args.seq)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    print(
        f"model: MiniLM-style encoder, {args.layers} layers, hidden 384, 12 heads, seq {args.seq}: "
        f"{len(model.graph.node)} nodes, {params / 1e6:.1f} M parameters (random, seed 0)"
    )
    data = model.SerializeToString()

    def options() -> ort.SessionOptions:
        so = ort.SessionOptions()
        so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        return so

    cpu = ort.InferenceSession(data, sess_options=options(), providers=["CPUExecutionProvider"])
    mlx_options = options()
    mlx_options.add_provider_for_devices(devices, {})
    mlx = ort.InferenceSession(data, sess_options=mlx_options)

    expected = cpu.run(None, feeds)
    actual = mlx.run(None, feeds)
    ok = True
    print("\noutputs (MLX EP vs CPU EP):")
    for meta, a, e in zip(mlx.get_outputs(), actual, expected):
        diff = float(np.max(np.abs(a.astype(np.float64) - e.astype(np.float64))))
        atol = RTOL * max(float(np.max(np.abs(e))), 1.0)
        close = a.shape == e.shape and bool(np.allclose(a, e, rtol=RTOL, atol=atol))
        ok &= close
        print(f"  {meta.name:<18} shape {list(a.shape)}  max abs diff {diff:.3e}  {'ok' if close else 'MISMATCH'}")

    print("\nplacement:")
    if hasattr(mlx, "get_provider_graph_assignment_info"):
        per_ep: dict[str, list[str]] = {}
        for subgraph in mlx.get_provider_graph_assignment_info():
            per_ep.setdefault(subgraph.ep_name, []).extend(n.op_type for n in subgraph.get_nodes())
        total = sum(len(v) for v in per_ep.values())
        on_mlx = len(per_ep.get(MLX_EP, []))
        print(f"  {on_mlx} of {total} nodes on {MLX_EP} (graph after ORT's basic optimizations)")
        for ep, ops in sorted(per_ep.items()):
            if ep != MLX_EP:
                kinds = ", ".join(f"{op} x{ops.count(op)}" for op in sorted(set(ops)))
                print(f"  {len(ops)} on {ep}: {kinds}")
    else:
        print("  (this ORT has no get_provider_graph_assignment_info)")

    def median_ms(session: ort.InferenceSession) -> float:
        for _ in range(args.warmup):
            session.run(None, feeds)
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            session.run(None, feeds)
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3

    cpu_ms = median_ms(cpu)
    mlx_ms = median_ms(mlx)
    print(f"\nlatency (median of {args.runs} runs after {args.warmup} warm-up runs):")
    print(f"  CPU EP  {cpu_ms:9.3f} ms")
    print(f"  MLX EP  {mlx_ms:9.3f} ms")
    print(f"  MLX EP / CPU EP latency: {mlx_ms / cpu_ms:.2f} (MLX EP speed {cpu_ms / mlx_ms:.2f}x the CPU EP's)")

    if not ok:
        print("\ndemo: the MLX EP's outputs differ from the CPU EP's", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
