"""The tiny Llama-style decoder of llm.py (GroupQueryAttention with rotary embedding and a KV
cache, SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization, SiLU MLP) end to end:
a prefill and a few greedy decode steps on the MLX EP and on ORT's CPU EP give the same
tokens and close logits, with every node of the model on the MLX EP."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import assert_all_on_mlx, make_session
from llm import TINY, build_llama, generate, prompt_ids


@pytest.mark.parametrize("cfg", [TINY, TINY.quantized(4)], ids=["float32", "int4"])
def test_tiny_llama_greedy_decode(cfg):
    model = build_llama(cfg)
    prompt = prompt_ids(cfg, 16)
    expected = generate(make_session(model, mlx=False), cfg, prompt, 5)
    session = make_session(model, mlx=True)
    actual = generate(session, cfg, prompt, 5)
    assert actual.tokens == expected.tokens
    for step, (a, e) in enumerate(zip(actual.logits, expected.logits)):
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-3, err_msg=f"logits of step {step}")
    assert_all_on_mlx(session)


#: A child (``ORTMLX_LOG=info`` is read once per process) that runs generations on the CPU EP and
#: the MLX EP side by side: one after another, two interleaved step by step, and one whose
#: generation key changes; it prints the largest logit difference and whether the tokens agree.
GENERATIONS_CHILD = r"""
import gc, json, os, sys
import numpy as np
import onnxruntime as ort
from llm import TINY, build_llama, empty_past, prompt_ids

cfg = TINY
model = build_llama(cfg).SerializeToString()
cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
ort.register_execution_provider_library("ortmlx", os.environ["ORTMLX_EP_LIBRARY"])
options = ort.SessionOptions()
# Every node on the MLX EP, or the session fails.
options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
options.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"], {})
mlx = ort.InferenceSession(model, sess_options=options)

class Stepper:
    def __init__(self, session, prompt):
        self.session, self.names = session, [o.name for o in session.get_outputs()]
        self.ids, self.outs, self.tokens = np.array([prompt], np.int64), None, []

    def step(self, key=None):
        options = ort.RunOptions()
        if key is not None:
            options.add_run_config_entry("ep.mlx.generation_key", key)
        if self.outs is None:
            feeds = {"input_ids": self.ids, "attention_mask": np.ones_like(self.ids), **empty_past(cfg)}
        else:
            total = self.ids.shape[1] + len(self.tokens)
            feeds = {"input_ids": np.array([[self.tokens[-1]]], np.int64), "attention_mask": np.ones((1, total), np.int64)}
            for i in range(cfg.layers):
                for kind in ("key", "value"):
                    feeds[f"past_key_values.{i}.{kind}"] = self.outs[f"present.{i}.{kind}"]
        self.outs = dict(zip(self.names, self.session.run(None, feeds, options)))
        logits = self.outs["logits"][0, -1].copy()
        self.tokens.append(int(np.argmax(logits)))
        return logits

diffs, same = [], True
def both(prompt):
    return Stepper(cpu, prompt), Stepper(mlx, prompt)
def step(pair, key=None):
    global same
    a, b = pair[0].step(key), pair[1].step(key)
    diffs.append(float(np.max(np.abs(a - b))))
    same = same and pair[0].tokens == pair[1].tokens

a = both(prompt_ids(cfg, 12, seed=1))
for _ in range(5):
    step(a)
b = both(prompt_ids(cfg, 7, seed=2))
for _ in range(3):
    step(b)
c, d = both(prompt_ids(cfg, 9, seed=3)), both(prompt_ids(cfg, 5, seed=4))
for _ in range(3):
    step(c)
    step(d)
e = both(prompt_ids(cfg, 6, seed=5))
for _ in range(3):
    step(e, key="e")
step(e, key="e-next")
print(json.dumps({"max_diff": max(diffs), "tokens_identical": same}))
del mlx
gc.collect()
"""


def test_generations_reset_and_carry_the_cache(tmp_path):
    """Decode state per fused node: a new prompt, a changed generation key and a cache that
    does not continue the previous step (two generations interleaved) each start a generation;
    within one the present cache is carried to the next step; every logit equals the CPU EP's."""
    import json
    import os
    import subprocess
    import sys

    from conftest import LIBRARY_VAR

    env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMLX_")}
    env[LIBRARY_VAR] = os.path.abspath(os.environ[LIBRARY_VAR])
    env["ORTMLX_LOG"] = "info"
    env["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__))
    result = subprocess.run(
        [sys.executable, "-c", GENERATIONS_CHILD], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, f"child failed:\n{result.stdout}\n{result.stderr}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["tokens_identical"], report
    assert report["max_diff"] < 1e-3, report
    starts = [line.split("starts (", 1)[1].rstrip(")") for line in result.stderr.splitlines() if "decode: generation" in line]
    states = sum(1 for reason in starts if reason == "first run")
    assert states >= 1, result.stderr
    count = {reason: starts.count(reason) // states for reason in set(starts)}
    # a: first run; b, c, d, e: new prompts; c and d alternate: 4 decode steps that do not
    # continue the previous step; e: its key changes once. On the GPU stream the decode state
    # compares buffers, not bytes (reading a cache would move it off the GPU), so a cache in a
    # fresh buffer can't be told from a new one: there c and d start no generation of their own.
    expected = {"first run": 1, "empty past cache": 4, "generation key changed": 1}
    if "on the Gpu stream" not in result.stderr:
        expected["the cache does not continue the previous step"] = 4
    assert count == expected, starts
    summary = [line for line in result.stderr.splitlines() if "cache input(s) carried" in line]
    assert len(summary) == states, result.stderr
    # a: 4 continued decode steps, b: 2, e: 2, each carrying every layer's key and value.
    carried = 8 * 2 * TINY.layers
    if "the cache does not continue the previous step" in expected:
        assert f"10 generation(s), 18 step(s), {carried} cache input(s) carried" in summary[0], summary
    else:
        # which caches are carried depends on whether ORT hands back the EP's own buffers
        assert "6 generation(s), 18 step(s)" in summary[0], summary


#: A child that runs decode steps of the torch-style decoder (llm.build_torch_style_llama) on the
#: MLX EP with compile on and tracing, then prints the per-run counters as JSON.
TORCH_STYLE_CHILD = r"""
import gc, json, os, sys
import numpy as np
import onnxruntime as ort
from llm import TINY, build_torch_style_llama, torch_style_feeds
from trace_stats import node_runs, read_trace

cfg = TINY
model = build_torch_style_llama(cfg).SerializeToString()
cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
ort.register_execution_provider_library("ortmlx", os.environ["ORTMLX_EP_LIBRARY"])
devices = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
options = ort.SessionOptions()
options.add_provider_for_devices(devices, {"compile": "on"})
mlx = ort.InferenceSession(model, sess_options=options)
diff = 0.0
for past in (3, 4):
    feeds = torch_style_feeds(cfg, past)
    for a, b in zip(cpu.run(None, feeds), mlx.run(None, feeds)):
        assert a.shape == b.shape, (a.shape, b.shape)
        diff = max(diff, float(np.max(np.abs(a - b))))
del mlx
gc.collect()
runs = {name: n.per_run for name, n in node_runs(read_trace(os.environ["ORTMLX_TRACE"])).items()}
print(json.dumps({"diff": diff, "runs": runs}))
"""


def test_torch_style_decoder_matches_and_reads_nothing_back(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from conftest import LIBRARY_VAR

    env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMLX_")}
    env[LIBRARY_VAR] = os.path.abspath(os.environ[LIBRARY_VAR])
    env["ORTMLX_TRACE"] = str(tmp_path / "trace.json")
    env["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__))
    result = subprocess.run([sys.executable, "-c", TORCH_STYLE_CHILD], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"child failed:\n{result.stdout}\n{result.stderr}"
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["diff"] < 1e-3, out["diff"]
    runs = [r for per_node in out["runs"].values() for r in per_node]
    assert len(runs) >= 2, out
    for path, syncs, reads in runs:
        # The Slice/Expand/Reshape targets computed from Shape of activations run on the host
        # while the graph is built (HostEval steps): no value is read back mid-run, and every
        # output is contiguous, so each run synchronises once, at the end.
        assert (syncs, reads) == (1, 0), (path, syncs, reads)


#: A child that runs a greedy generation of the tiny GQA decoder on the CPU EP and on the MLX EP
#: with compile on and tracing, then prints the tokens of both and the per-run counters as JSON.
GQA_COMPILED_CHILD = r"""
import gc, json, os, sys
import numpy as np
import onnxruntime as ort
from llm import TINY, build_llama, generate, prompt_ids
from trace_stats import node_runs, read_trace

cfg = TINY.quantized(4) if sys.argv[1] == "int4" else TINY
model = build_llama(cfg).SerializeToString()
cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
ort.register_execution_provider_library("ortmlx", os.environ["ORTMLX_EP_LIBRARY"])
devices = [d for d in ort.get_ep_devices() if d.ep_name == "MLXExecutionProvider"]
options = ort.SessionOptions()
options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
options.add_provider_for_devices(devices, {"compile": "on", **json.loads(sys.argv[2])})
mlx = ort.InferenceSession(model, sess_options=options)
prompt = prompt_ids(cfg, 12)
want, got = generate(cpu, cfg, prompt, 10), generate(mlx, cfg, prompt, 10)
diff = max(float(np.max(np.abs(a - b))) for a, b in zip(want.logits, got.logits))
del mlx
gc.collect()
runs = {name: n.per_run for name, n in node_runs(read_trace(os.environ["ORTMLX_TRACE"])).items()}
print(json.dumps({"want": want.tokens, "got": got.tokens, "diff": diff, "runs": runs}))
"""


@pytest.mark.parametrize("variant", ["float32", "int4"])
def test_gqa_decode_runs_one_compiled_closure_per_token(tmp_path, variant):
    """Compile on: every decode step of the GQA decoder is one call of the shapeless decode
    closure, with no host read inside the step and one synchronisation (the outputs), and the
    tokens equal the CPU EP's."""
    import json
    import os
    import subprocess
    import sys

    from conftest import DEFAULT_EP_OPTIONS, LIBRARY_VAR

    env = {k: v for k, v in os.environ.items() if not k.startswith("ORTMLX_")}
    env[LIBRARY_VAR] = os.path.abspath(os.environ[LIBRARY_VAR])
    env["ORTMLX_TRACE"] = str(tmp_path / "trace.json")
    env["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__))
    ep_options = json.dumps(DEFAULT_EP_OPTIONS)  # device=gpu under ORTMLX_TEST_DEVICE=gpu
    result = subprocess.run([sys.executable, "-c", GQA_COMPILED_CHILD, variant, ep_options], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"child failed:\n{result.stdout}\n{result.stderr}"
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["got"] == out["want"]
    assert out["diff"] < 1e-3, out["diff"]
    assert len(out["runs"]) == 1, "one fused node: the whole model"
    (runs,) = out["runs"].values()
    assert len(runs) == 10, runs
    assert runs[0][0] == "prefill", runs[0]
    for path, syncs, reads in runs[1:]:
        assert (path, syncs, reads) == ("decode", 1, 0), runs
