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
