"""Time from session creation to first output, with and without an EPContext model.

For each model the source ONNX file is compiled once (``ep.context_enable=1``) into an EPContext
model; then fresh processes each register the EP, create a session on one of the two files and
run it once, timing ``InferenceSession(...)`` and the first ``run`` separately. Each child also
reports how many plans the EP lowered (``OrtMlxEp_LoweringCount``) and loaded from EPContext
caches (``OrtMlxEp_ContextLoadCount``): loading the compiled model must lower none.

``cargo xtask bench startup`` runs it (``--repeats N``, ``--only name,...``, ``--json path``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

LIBRARY_VAR = "ORTMLX_EP_LIBRARY"

CHILD = r"""
import ctypes, json, os, sys, time
import numpy as np
import onnxruntime as ort
lib_path = os.environ["ORTMLX_EP_LIBRARY"]
ort.register_execution_provider_library("ortmlx", lib_path)
lib = ctypes.CDLL(lib_path)
for f in ("OrtMlxEp_LoweringCount", "OrtMlxEp_ContextLoadCount"):
    getattr(lib, f).restype = ctypes.c_uint64
devices = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
model, feeds_path, compile_to = sys.argv[1], sys.argv[2], sys.argv[3]
feeds = dict(np.load(feeds_path))
options = ort.SessionOptions()
if compile_to != "-":
    options.add_session_config_entry("ep.context_enable", "1")
    options.add_session_config_entry("ep.context_file_path", compile_to)
options.add_provider_for_devices(devices, {})
t0 = time.perf_counter()
session = ort.InferenceSession(model, sess_options=options)
t1 = time.perf_counter()
session.run(None, feeds)
t2 = time.perf_counter()
print(json.dumps({"create_s": t1 - t0, "first_run_s": t2 - t1, "lowerings": lib.OrtMlxEp_LoweringCount(), "context_loads": lib.OrtMlxEp_ContextLoadCount()}))
"""


def models() -> dict:
    import models as m
    from llm import LARGER, TINY, build_llama, empty_past

    def llama(cfg):
        feeds = {"input_ids": np.array([[17]], np.int64), "attention_mask": np.ones((1, 1), np.int64)}
        feeds.update(empty_past(cfg))
        return build_llama(cfg), feeds

    return {
        "minilm-6": lambda: (m.minilm_encoder(layers=6, seq=128, batch=1), m.encoder_inputs(batch=1, seq=128)),
        "resnet": lambda: (m.resnet_cnn(), {"input": m.cnn_input()}),
        "llama-tiny": lambda: llama(TINY),
        "llama-tiny-int4": lambda: llama(TINY.quantized(4)),
        "llama-larger": lambda: llama(LARGER),
    }


def child(library: str, model: str, feeds: str, compile_to: str = "-") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMLX_")}
    env[LIBRARY_VAR] = library
    result = subprocess.run([sys.executable, "-c", CHILD, model, feeds, compile_to], env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"child failed on {model}:\n{result.stdout}\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    import onnx

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    library = os.path.abspath(os.environ[LIBRARY_VAR])
    wanted = [n for n in args.only.split(",") if n] or list(models())
    results = []
    with tempfile.TemporaryDirectory(prefix="ortmlx-startup-") as tmp:
        for name in wanted:
            model, feeds = models()[name]()
            source = os.path.join(tmp, f"{name}.onnx")
            onnx.save(model, source, save_as_external_data=model.ByteSize() > 1_500_000_000)
            feeds_path = os.path.join(tmp, f"{name}.npz")
            np.savez(feeds_path, **feeds)
            compiled = os.path.join(tmp, f"{name}_ctx.onnx")
            child(library, source, feeds_path, compiled)
            compiled_model = onnx.load(compiled, load_external_data=False)
            row = {
                "model": name,
                "nodes": len(model.graph.node),
                "source_bytes": os.path.getsize(source),
                "epcontext_bytes": os.path.getsize(compiled),
                "cache_bytes": sum(len(a.s) for n in compiled_model.graph.node for a in n.attribute if a.name == "ep_cache_context"),
            }
            for variant, path in (("source", source), ("epcontext", compiled)):
                runs = [child(library, path, feeds_path) for _ in range(args.repeats)]
                total = [r["create_s"] + r["first_run_s"] for r in runs]
                row[variant] = {
                    "to_first_output_ms_median": 1e3 * statistics.median(total),
                    "to_first_output_ms_min": 1e3 * min(total),
                    "create_ms_median": 1e3 * statistics.median(r["create_s"] for r in runs),
                    "first_run_ms_median": 1e3 * statistics.median(r["first_run_s"] for r in runs),
                    "lowerings": runs[0]["lowerings"],
                    "context_loads": runs[0]["context_loads"],
                }
            if row["epcontext"]["lowerings"] != 0:
                raise RuntimeError(f"{name}: loading the EPContext model lowered {row['epcontext']['lowerings']} plan(s)")
            row["speedup"] = row["source"]["to_first_output_ms_median"] / row["epcontext"]["to_first_output_ms_median"]
            results.append(row)
            s, c = row["source"], row["epcontext"]
            print(
                f"{name:14} {row['nodes']:5} nodes  source {s['to_first_output_ms_median']:8.1f} ms "
                f"(create {s['create_ms_median']:.1f}, {s['lowerings']} lowering(s))  "
                f"epcontext {c['to_first_output_ms_median']:8.1f} ms (create {c['create_ms_median']:.1f}, "
                f"{c['lowerings']} lowering(s), {c['context_loads']} load(s))  x{row['speedup']:.2f}  "
                f"files {row['source_bytes'] / 1e6:.2f} -> {row['epcontext_bytes'] / 1e6:.2f} MB (cache {row['cache_bytes'] / 1e6:.2f} MB)",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"repeats": args.repeats, "models": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
