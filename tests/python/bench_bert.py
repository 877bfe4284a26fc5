"""``cargo xtask bench bert``: a BERT fused by ORT's transformer optimizer
(:mod:`bert_model`: EmbedLayerNormalization, Attention, SkipLayerNormalization, BiasGelu)
on ORT's CPU EP and on the MLX EP, one process, outputs checked to agree (1e-3), medians of
``session.run`` written to a JSON file. Checks that the MLX session runs every node on MLX."""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bert_model import bert, bert_inputs, optimized_bert  # noqa: E402
from conftest import DEFAULT_EP_OPTIONS, make_session, placement_counts, run  # noqa: E402


def median_s(fn, budget_s: float, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while len(times) < 5 or (len(times) < 500 and time.perf_counter() - start < budget_s):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--shapes", default="1x128,8x128", help="batch x seq, comma separated")
    parser.add_argument("--budget-ms", type=float, default=3000)
    parser.add_argument("--device", default=None, help="the MLX EP's device option (cpu or gpu)")
    args = parser.parse_args(argv)
    if args.device:
        DEFAULT_EP_OPTIONS["device"] = args.device
    model = optimized_bert(bert(layers=args.layers, hidden=args.hidden, heads=args.heads, max_positions=512, vocab=1000), args.heads, args.hidden)
    fused = collections.Counter(n.op_type for n in model.graph.node if n.domain == "com.microsoft")
    cpu = make_session(model, mlx=False)
    mlx = make_session(model, mlx=True)
    results = []
    for shape in args.shapes.split(","):
        batch, seq = (int(v) for v in shape.split("x"))
        feeds = bert_inputs(batch, seq, vocab=1000)
        expected, actual = run(cpu, feeds), run(mlx, feeds)
        err = max(float(np.max(np.abs(a - e))) for a, e in zip(actual, expected))
        if err > 1e-3:
            raise SystemExit(f"{shape}: MLX differs from the CPU EP by {err}")
        budget = args.budget_ms / 1000
        cpu_ms = median_s(lambda: cpu.run(None, feeds), budget) * 1e3
        mlx_ms = median_s(lambda: mlx.run(None, feeds), budget) * 1e3
        row = {"batch": batch, "seq": seq, "cpu_ep_ms": round(cpu_ms, 3), "mlx_ep_ms": round(mlx_ms, 3), "speedup": round(cpu_ms / mlx_ms, 3), "max_abs_diff": err}
        results.append(row)
        print(f"bert {args.layers}L h{args.hidden} {batch}x{seq}: CPU EP {cpu_ms:.2f} ms, MLX EP {mlx_ms:.2f} ms ({cpu_ms / mlx_ms:.2f}x), max diff {err:.1e}")
    counts = placement_counts(mlx)
    off = {ep: n for ep, n in counts.items() if ep != "MLXExecutionProvider"}
    if off:
        raise SystemExit(f"nodes left the MLX EP: {counts}")
    report = {
        "model": {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "fused_ops": dict(fused)},
        "device": DEFAULT_EP_OPTIONS.get("device", "default"),
        "placement": counts,
        "results": results,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
