"""onnxruntime-genai end to end: its own decode loop drives the MLX EP.

Each test writes a tiny Llama-style decoder (``llm.build_llama``: GroupQueryAttention with the
KV cache, rotary embedding, RMSNorm, SiLU MLP) and its ``genai_config.json`` into a temporary
folder, then generates greedily with genai (no tokenizer: ``Generator.append_tokens``) on ORT's
CPU EP and with ``MLXExecutionProvider`` registered (``og.register_execution_provider_library``),
in both ``past_present_share_buffer`` modes, and checks that the tokens are equal: with the
EP's defaults, with ``compile`` on, without device memory, for a left-padded batch and for a
4-bit MatMulNBits variant.

genai runs in a subprocess (``genai_worker.py``): it loads ONNX Runtime's shared library, a
second ORT beside the one this process imported. It exposes no session, so where the decoder's
nodes ran is read from the ORT profile genai's session writes (``enable_profiling`` in the
config's session options): every kernel that ran is a ``cat == "Node"`` event naming its
provider, and on ORT >= 1.25 the EP adds one ``*_mlx_lowering`` event per fused group (with
its node count) and one ``*_mlx_run`` event per run.

The suite needs onnxruntime-genai >= 0.18 (the first with plugin EPs through
``register_execution_provider_library``); ``cargo xtask setup`` provisions it in an environment
of its own (``venv-genai-<version>-ort<version>``) and ``cargo xtask test`` runs this file there.
Elsewhere it is skipped.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import llm
from conftest import DEFAULT_EP_OPTIONS, LIBRARY_VAR, MLX_EP

GENAI_MIN = (0, 18)


def _genai_version() -> tuple[int, ...] | None:
    if importlib.util.find_spec("onnxruntime_genai") is None:
        return None
    version = importlib.metadata.version("onnxruntime-genai")
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


_VERSION = _genai_version()
pytestmark = pytest.mark.skipif(
    _VERSION is None or _VERSION < GENAI_MIN,
    reason="onnxruntime-genai >= 0.18 is not installed here (cargo xtask test runs this file in the venv-genai-* environment that cargo xtask setup provisions)",
)

WORKER = Path(__file__).with_name("genai_worker.py")

#: A small decoder: 2 layers, 4 query heads over 2 KV heads of 16.
CFG = llm.LlamaConfig("genai", layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=256, max_positions=128)
PROMPT = [5, 17, 33, 99, 7, 42]
MAX_LENGTH = 32


def write_model_dir(folder: Path, *, share_buffer: bool, max_length: int = MAX_LENGTH, cfg: llm.LlamaConfig = CFG) -> onnx.ModelProto:
    """The decoder ``cfg`` and a ``genai_config.json`` for it in ``folder``: greedy search up to
    ``max_length`` tokens, ``min_length`` = ``max_length`` so no early end of sequence."""
    folder.mkdir(parents=True, exist_ok=True)
    model = llm.build_llama(cfg)
    onnx.save(model, str(folder / "model.onnx"))
    config = {
        "model": {
            "type": "llama",
            "context_length": 64,
            "vocab_size": cfg.vocab,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 0,
            "decoder": {
                "filename": "model.onnx",
                "head_size": cfg.head,
                "hidden_size": cfg.hidden,
                "num_attention_heads": cfg.heads,
                "num_key_value_heads": cfg.kv_heads,
                "num_hidden_layers": cfg.layers,
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
            },
        },
        "search": {
            "do_sample": False,
            "num_beams": 1,
            "num_return_sequences": 1,
            "max_length": max_length,
            "min_length": max_length,
            "past_present_share_buffer": share_buffer,
            "top_k": 1,
            "top_p": 1.0,
            "temperature": 1.0,
            "repetition_penalty": 1.0,
            "length_penalty": 1.0,
            "early_stopping": True,
            "no_repeat_ngram_size": 0,
            "diversity_penalty": 0.0,
        },
    }
    (folder / "genai_config.json").write_text(json.dumps(config, indent=2))
    return model


def library() -> str:
    """The EP library from ``ORTMLX_EP_LIBRARY``, as an absolute path (the worker runs elsewhere)."""
    path = os.environ.get(LIBRARY_VAR)
    if not path:
        pytest.fail(f"{LIBRARY_VAR} is not set: point it at the built EP library, or run the suites through `cargo xtask test`", pytrace=False)
    if not os.path.isfile(path):
        pytest.fail(f"{LIBRARY_VAR}={path}: no such file (build it with `cargo xtask build`)", pytrace=False)
    return os.path.abspath(path)


def generate(
    folder: Path,
    provider: str,
    prompts: list[list[int]] | None = None,
    profile: Path | None = None,
    options: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> dict:
    """Runs ``genai_worker.py`` on ``prompts`` (default: ``[PROMPT]``) with the EP ``options``
    and the environment variables ``env`` added; returns its JSON (``tokens``, ``profile``)."""
    prompts = prompts or [PROMPT]
    cmd = [sys.executable, str(WORKER), str(folder), "--provider", provider, "--prompts", json.dumps(prompts)]
    if provider == "mlx":
        cmd += ["--library", library()]
        for key, value in {**DEFAULT_EP_OPTIONS, **(options or {})}.items():
            cmd += ["--option", f"{key}={value}"]
    if profile is not None:
        cmd += ["--profile", str(profile)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise RuntimeError(f"genai_worker.py failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def assert_decoder_on_mlx(profile_path: str | None, model: onnx.ModelProto, runs: int) -> None:
    """The profile shows the decoder run on the MLX EP: ``runs`` kernel runs, all of them by
    the MLX EP (no kernel on any other provider) and, where the EP reports its lowering, every
    node of ``model`` (but the Identity ORT removes) in its fused groups."""
    assert profile_path and Path(profile_path).is_file(), f"no ORT profile was written ({profile_path})"
    events = json.loads(Path(profile_path).read_text())
    kernels = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    providers = {e.get("args", {}).get("provider") for e in kernels}
    assert providers == {MLX_EP}, f"kernels ran on {sorted(map(str, providers))}, not only on {MLX_EP}"
    fused = {e["args"].get("op_name") for e in kernels}
    per_run = len(kernels) / runs
    assert per_run == len(fused), f"{len(kernels)} MLX kernel runs of {len(fused)} fused group(s) for {runs} session runs"
    lowered = [e for e in events if e.get("args", {}).get("ep") == MLX_EP and e.get("name", "").endswith("_mlx_lowering")]
    if lowered:  # ORT >= 1.25: the EP's own profiler events
        nodes = sum(int(e["args"]["nodes"]) for e in lowered)
        # ORT's graph optimizer removes the Identity before the logits output.
        expected = sum(1 for n in model.graph.node if n.op_type != "Identity")
        assert nodes == expected, f"MLX lowered {nodes} of the decoder's {expected} nodes"
        mlx_runs = [e for e in events if e.get("args", {}).get("ep") == MLX_EP and e.get("name", "").endswith("_mlx_run")]
        assert len(mlx_runs) == len(kernels), f"{len(mlx_runs)} MLX runs recorded for {len(kernels)} kernels"


#: How the EP runs: its defaults (device memory declared), compiled MLX closures (the GPU
#: default: genai's separate-cache decode steps take the shapeless decode closure), and no
#: device memory (``ORTMLX_DEVICE_MEMORY=0``).
VARIANTS = {
    "default": ({}, {}),
    "compiled": ({"compile": "on"}, {}),
    "no-device-memory": ({}, {"ORTMLX_DEVICE_MEMORY": "0"}),
}
SHARE_MODES = pytest.mark.parametrize("share_buffer", [False, True], ids=["separate-kv", "shared-kv-buffer"])


def run_paths(profile_path: str) -> dict[str, int]:
    """How many runs of the MLX EP took each path (``decode``, ``prefill``, ``general``,
    ``eager``), from its ``*_mlx_run`` profile events."""
    events = json.loads(Path(profile_path).read_text())
    paths: dict[str, int] = {}
    for e in events:
        if e.get("args", {}).get("ep") == MLX_EP and e.get("name", "").endswith("_mlx_run"):
            paths[e["args"]["path"]] = paths.get(e["args"]["path"], 0) + 1
    return paths


@SHARE_MODES
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_greedy_generation_matches_cpu(tmp_path, share_buffer, variant):
    options, env = VARIANTS[variant]
    model = write_model_dir(tmp_path / "model", share_buffer=share_buffer)
    cpu = generate(tmp_path / "model", "cpu")
    mlx = generate(tmp_path / "model", "mlx", profile=tmp_path / "mlx_profile", options=options, env=env)
    [tokens] = cpu["tokens"]
    assert len(tokens) == MAX_LENGTH, tokens
    assert tokens[: len(PROMPT)] == PROMPT
    assert mlx["tokens"] == cpu["tokens"]
    # one prefill run, then one run per further token
    runs = MAX_LENGTH - len(PROMPT)
    assert_decoder_on_mlx(mlx["profile"], model, runs=runs)
    if variant == "compiled" and not share_buffer:
        # genai's growing cache is the usual decode layout: every step is one compiled call
        assert run_paths(mlx["profile"]) == {"prefill": 1, "decode": runs - 1}


@SHARE_MODES
def test_padded_batch_matches_cpu(tmp_path, share_buffer):
    """A batch of two prompts, the shorter left-padded (``pad_token_id`` 0, masked out by
    genai's attention mask): GroupQueryAttention with per-row ``seqlens_k``."""
    model = write_model_dir(tmp_path / "model", share_buffer=share_buffer)
    prompts = [PROMPT, [0, 0, 0, 8, 9, 10]]
    cpu = generate(tmp_path / "model", "cpu", prompts=prompts)
    mlx = generate(tmp_path / "model", "mlx", prompts=prompts, profile=tmp_path / "mlx_profile")
    assert [len(row) for row in cpu["tokens"]] == [MAX_LENGTH, MAX_LENGTH]
    assert cpu["tokens"][0] != cpu["tokens"][1]
    assert mlx["tokens"] == cpu["tokens"]
    assert_decoder_on_mlx(mlx["profile"], model, runs=MAX_LENGTH - len(PROMPT))


@SHARE_MODES
def test_quantized_decoder_matches_cpu(tmp_path, share_buffer):
    """The decoder with 4-bit com.microsoft MatMulNBits projections (block 32, zero points)."""
    model = write_model_dir(tmp_path / "model", share_buffer=share_buffer, cfg=CFG.quantized())
    assert any(n.op_type == "MatMulNBits" for n in model.graph.node)
    cpu = generate(tmp_path / "model", "cpu")
    mlx = generate(tmp_path / "model", "mlx", profile=tmp_path / "mlx_profile")
    assert mlx["tokens"] == cpu["tokens"]
    assert_decoder_on_mlx(mlx["profile"], model, runs=MAX_LENGTH - len(PROMPT))


def test_placement_check_fails_without_the_ep(tmp_path):
    """The check above is not vacuous: genai without the EP registered fails it."""
    model = write_model_dir(tmp_path / "model", share_buffer=True)
    cpu = generate(tmp_path / "model", "cpu", profile=tmp_path / "cpu_profile")
    with pytest.raises(AssertionError, match="not only on MLXExecutionProvider"):
        assert_decoder_on_mlx(cpu["profile"], model, runs=MAX_LENGTH - len(PROMPT))


def test_provider_options_reach_the_ep(tmp_path):
    """``config.set_provider_option`` passes EP options through: a bad value fails the model load
    with the EP's message."""
    write_model_dir(tmp_path / "model", share_buffer=True)
    with pytest.raises(RuntimeError, match="device"):
        generate(tmp_path / "model", "mlx", options={"device": "no-such-device"})


USAGE = Path(__file__).resolve().parents[2] / "docs" / "usage.md"


def usage_snippet() -> str:
    """The Python block of docs/usage.md's onnxruntime-genai section."""
    text = USAGE.read_text()
    section = text[text.index("\n## onnxruntime-genai\n") :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```", start)]


def test_usage_recipe_runs(tmp_path):
    """docs/usage.md's recipe, verbatim but for the two paths, generates the CPU EP's tokens."""
    folder = tmp_path / "model"
    write_model_dir(folder, share_buffer=True)
    snippet = usage_snippet()
    for placeholder, value in (('"/path/to/libonnxruntime_mlx_ep.so"', library()), ('"/path/to/model_dir"', str(folder))):
        assert placeholder in snippet, f"the recipe lost {placeholder}"
        snippet = snippet.replace(placeholder, repr(value))
    snippet += "\nimport json\nprint(json.dumps([int(t) for t in tokens]))\n"
    done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    tokens = json.loads(done.stdout.strip().splitlines()[-1])
    assert [tokens] == generate(folder, "cpu")["tokens"]
