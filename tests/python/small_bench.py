"""The ORT side of ``cargo xtask bench small``: the held-out-style small models of
``small_graphs.py`` on ONNX Runtime's CPU EP and with the MLX EP, against the same plan run
through the runtime directly (``crates/runtime/examples/small_bench.rs``).

Two steps around the Rust bench:

* ``--prepare --dir DIR``: writes each model as ORT hands it to an execution provider, i.e. after
  ORT's basic graph rewrites (``ORT_ENABLE_BASIC``, saved with ``optimized_model_filepath``), as
  ``DIR/<name>/model.onnx`` (with ONNX's inferred types of the intermediate values), its inputs and the CPU EP's outputs as
  ``DIR/<name>/test_data_set_0/{input,output}_<i>.pb``, and the model order as
  ``DIR/models.txt``. The Rust bench plans and runs exactly that graph.
* ``--json JSON``: per model, the median ``session.run`` (numpy in and out) of
  the CPU EP and of the MLX EP (CPU fallback disabled: every node on MLX, else the session
  fails), outputs checked against the CPU EP; merged into the Rust bench's JSON, with
  ``ep/plan`` (what ORT's shell and the plugin add over the plan run directly) and ``ep/cpu``
  (the MLX EP's time over the CPU EP's). Prints a table, and ``--markdown FILE`` writes it for
  docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import small_graphs  # noqa: E402


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


def basic_rewrites(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model after ORT's basic (provider-independent) graph rewrites, the ones a session
    applies before it partitions the graph among execution providers."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "basic.onnx")
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = path
        ort.InferenceSession(model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"])
        # The saved file keeps no types of intermediate values; ORT infers them when it loads
        # a graph, and hands them to the EP: ONNX's shape inference gives the same here.
        return onnx.shape_inference.infer_shapes(onnx.load(path), strict_mode=True, data_prop=True)


def prepare(directory: str, names) -> None:
    os.makedirs(directory, exist_ok=True)
    for name in names:
        model, feeds = small_graphs.MODELS[name]()
        basic = basic_rewrites(model)
        folder = os.path.join(directory, name)
        data = os.path.join(folder, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        onnx.save(basic, os.path.join(folder, "model.onnx"))
        cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        outputs = cpu.run(None, feeds)
        for prefix, pairs in (("input", [(i.name, feeds[i.name]) for i in model.graph.input]), ("output", [(o.name, v) for o, v in zip(cpu.get_outputs(), outputs)])):
            for i, (n, v) in enumerate(pairs):
                with open(os.path.join(data, f"{prefix}_{i}.pb"), "wb") as f:
                    f.write(numpy_helper.from_array(np.asarray(v), n).SerializeToString())
        print(f"{name:<18}{len(model.graph.node):>5} nodes, {len(basic.graph.node):>5} after ORT's basic rewrites")
    with open(os.path.join(directory, "models.txt"), "w") as f:
        f.write("".join(f"{n}\n" for n in names))


def mlx_session(model: onnx.ModelProto, devices, device: str) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    options.add_provider_for_devices(devices, {"device": device})
    return ort.InferenceSession(model.SerializeToString(), sess_options=options)


def measure(args) -> int:
    with open(args.json) as f:
        result = json.load(f)
    ort.register_execution_provider_library("ortmlx", os.path.abspath(args.library))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
    budget = args.budget_ms / 1e3
    header = f"{'model':<18}{'nodes':>10}{'cpu_ms':>9}{'ep_ms':>9}{'plan_ms':>9}{'ep/plan':>9}{'ep/cpu':>8}   (ONNX Runtime {ort.__version__}, MLX EP on the {result['device']})"
    print(header)
    rows = []
    worst = 0.0
    for m in result["models"]:
        model, feeds = small_graphs.MODELS[m["name"]]()
        cpu = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        session = mlx_session(model, devices, result["device"])
        expected = cpu.run(None, feeds)
        actual = session.run(None, feeds)
        diff = max(float(np.max(np.abs(a.astype(np.float64) - e))) for a, e in zip(actual, expected) if e.dtype == np.float32)
        m["source_nodes"] = len(model.graph.node)
        m["cpu_ms"] = 1e3 * median_s(lambda: cpu.run(None, feeds), budget)
        m["ep_ms"] = 1e3 * median_s(lambda: session.run(None, feeds), budget)
        m["ep_over_plan"] = m["ep_ms"] / m["plan_ms"]
        m["ep_over_cpu"] = m["ep_ms"] / m["cpu_ms"]
        m["ep_max_abs_diff"] = diff
        worst = max(worst, m["ep_over_plan"])
        print(f"{m['name']:<18}{m['source_nodes']:>5}/{m['nodes']:<4}{m['cpu_ms']:>9.3f}{m['ep_ms']:>9.3f}{m['plan_ms']:>9.3f}{m['ep_over_plan']:>9.2f}{m['ep_over_cpu']:>8.2f}   max |ep - cpu| {diff:.1e}", flush=True)
        rows.append(m)
        del session, cpu
    result["onnxruntime"] = ort.__version__
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.json}")
    print(f"small: worst ep/plan={worst:.2f}")
    if args.markdown:
        lines = [
            "| model | nodes (file / after ORT's basic rewrites) | ORT CPU EP ms | ORT + MLX EP ms | plan direct ms | ep/plan | ep/cpu | plan path |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for m in rows:
            lines.append(f"| {m['name']} | {m['source_nodes']} / {m['nodes']} | {m['cpu_ms']:.3f} | {m['ep_ms']:.3f} | {m['plan_ms']:.3f} | {m['ep_over_plan']:.2f} | {m['ep_over_cpu']:.2f} | {m['plan_path']} ({m['compile_class']}) |")
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"wrote {args.markdown}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="with --prepare: where the models are written")
    parser.add_argument("--prepare", action="store_true", help="write the models as ORT hands them to an EP, with inputs and CPU outputs")
    parser.add_argument("--only", help="with --prepare: comma-separated model names")
    parser.add_argument("--json", help="the Rust bench's JSON: time the CPU EP and the MLX EP, merged into it")
    parser.add_argument("--library", default=os.environ.get("ORTMLX_EP_LIBRARY"))
    parser.add_argument("--budget-ms", type=float, default=2000.0)
    parser.add_argument("--markdown", help="also write the table as markdown here")
    args = parser.parse_args(argv)
    if args.prepare:
        if not args.dir:
            parser.error("--prepare needs --dir")
        names = args.only.split(",") if args.only else list(small_graphs.MODELS)
        unknown = [n for n in names if n not in small_graphs.MODELS]
        if unknown:
            parser.error(f"unknown model(s) {unknown}; known: {', '.join(small_graphs.MODELS)}")
        prepare(args.dir, names)
        return 0
    if not args.json or not args.library:
        parser.error("--json and --library (or ORTMLX_EP_LIBRARY) are required without --prepare")
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
