"""Which CUDA kernels one decode step of the MLX EP launches on the GPU, and for how long.

Runs greedy decode of a ``llm.py`` decoder (GQA, or the torch-style export) through ORT with the
MLX EP on the GPU, and records the process's CUDA activity with PyTorch's profiler (CUPTI sees
every kernel of the process, MLX's included). Prints, per decode step, the kernel count and GPU
time, and the kernels by total GPU time. Usage on the device:
``python3 tests/gpu/profile_decode.py [--model tiny|larger] [--style gqa|torch] [--steps 16]``."""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import llm  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--style", default="gqa", choices=["gqa", "torch"])
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    cfg = {"tiny": llm.TINY, "larger": llm.LARGER}[args.model]
    build = llm.build_llama if args.style == "gqa" else llm.build_torch_style_llama
    model = build(cfg)
    _, session, placement = llm._sessions(model, os.environ["ORTMLX_EP_LIBRARY"], None, {"device": "gpu"})
    print(f"{args.model} {args.style}: nodes {placement}", flush=True)
    prompt = llm.prompt_ids(cfg, args.prompt)
    if args.style == "gqa":
        llm.generate(session, cfg, prompt, 8)  # warm: kernels compiled, closures cached
    out_names = [o.name for o in session.get_outputs()]
    ids = np.array([prompt], np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), **llm.empty_past(cfg)}
    if args.style == "torch":
        feeds = {k: v for k, v in feeds.items() if k in {i.name for i in session.get_inputs()}}
    outs = dict(zip(out_names, session.run(None, feeds)))
    total = ids.shape[1]

    def step():
        nonlocal outs, total
        total += 1
        token = int(np.argmax(outs["logits"][0, -1]))
        f = {"input_ids": np.array([[token]], np.int64), "attention_mask": np.ones((1, total), np.int64)}
        for i in range(cfg.layers):
            f[f"past_key_values.{i}.key"] = outs[f"present.{i}.key"]
            f[f"past_key_values.{i}.value"] = outs[f"present.{i}.value"]
        f = {k: v for k, v in f.items() if k in names}
        outs = dict(zip(out_names, session.run(None, f)))

    names = {i.name for i in session.get_inputs()}
    for _ in range(8):
        step()
    torch.cuda.synchronize()
    times = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    print(f"decode: {args.steps} steps, median {1e3 * float(np.median(times)):.3f} ms/step", flush=True)
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(getattr(e, "device_time", None) or e.cuda_time for e in events)
    print(f"CUDA activity: {len(events)} events, {len(events) / args.steps:.1f} per step, GPU busy {busy / 1e3 / args.steps:.3f} ms per step", flush=True)
    print(prof.key_averages().table(sort_by="device_time_total", row_limit=args.top, max_name_column_width=100))
    return 0


if __name__ == "__main__":
    sys.exit(main())
