"""Time to first output of a MiniLM-style encoder on the MLX EP's GPU stream, in a fresh process.

Run twice by tests/gpu/device_run.sh with the same (initially empty) kernel cache: the first
process compiles MLX's CUDA kernels (cold), the second reads them back (warm). Prints one JSON
line: session creation, first run and a later run, in seconds, and the kernel files cached.
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import onnxruntime as ort  # noqa: E402

import models  # noqa: E402


def main() -> int:
    start = time.perf_counter()
    ort.register_execution_provider_library("ortmlx", os.path.abspath(os.environ["ORTMLX_EP_LIBRARY"]))
    devices = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
    model = models.minilm_encoder(layers=6, hidden=384, heads=12, intermediate=1536, batch=8)
    feeds = models.encoder_inputs(batch=8, seq=128)
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices(devices, {"device": sys.argv[1] if len(sys.argv) > 1 else "gpu"})
    t0 = time.perf_counter()
    session = ort.InferenceSession(model.SerializeToString(), sess_options=so)
    t1 = time.perf_counter()
    session.run(None, feeds)
    t2 = time.perf_counter()
    session.run(None, feeds)
    t3 = time.perf_counter()
    cache = os.environ.get("ORTMLX_KERNEL_CACHE_DIR", "")
    files = sum(len(f) for _, _, f in os.walk(cache)) if cache else -1
    print(json.dumps({
        "session_s": round(t1 - t0, 3),
        "first_run_s": round(t2 - t1, 3),
        "second_run_s": round(t3 - t2, 4),
        "to_first_output_s": round(t2 - start, 3),
        "kernel_files": files,
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
