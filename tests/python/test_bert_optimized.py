"""End to end: a BERT written as PyTorch exports it (``bert_model.bert``), fused by ORT's
transformer optimizer into EmbedLayerNormalization, Attention (or MultiHeadAttention),
SkipLayerNormalization and BiasGelu / FastGelu, runs with every node on the MLX EP and matches ORT's CPU EP."""

from __future__ import annotations

import collections

import pytest

from bert_model import bert, bert_inputs, optimized_bert
from conftest import assert_all_on_mlx, assert_on_mlx, assert_outputs_match, make_session, run

HEADS, HIDDEN = 4, 64

VARIANTS = {
    "mask-index": {},
    "raw-mask": {"raw_mask": True},
    "fast-gelu": {"enable_gelu_approximation": True},
    "no-embed-fusion": {"enable_embed_layer_norm": False},
    "multi-head-attention": {"use_multi_head_attention": True},
}


@pytest.fixture(scope="module")
def model():
    return bert(layers=2, hidden=HIDDEN, heads=HEADS)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("shape", [(2, 16), (3, 7)], ids=["2x16", "3x7"])
def test_optimized_bert(model, variant, shape):
    opt = optimized_bert(model, HEADS, HIDDEN, **VARIANTS[variant])
    ops = collections.Counter(n.op_type for n in opt.graph.node if n.domain == "com.microsoft")
    attention = "MultiHeadAttention" if VARIANTS[variant].get("use_multi_head_attention") else "Attention"
    assert ops[attention] == 2, ops  # the optimizer fused what it should
    assert ops["SkipLayerNormalization"] == 4, ops
    if variant != "no-embed-fusion":
        assert ops["EmbedLayerNormalization"] == 1, ops
    feeds = bert_inputs(*shape)
    expected = run(make_session(opt, mlx=False), feeds)
    # the fused graph computes what the original does (the mask ends each row's keys)
    assert_outputs_match(run(make_session(model, mlx=False), feeds), expected, rtol=1e-3, atol=1e-3)
    session = make_session(opt, mlx=True)
    assert_outputs_match(run(session, feeds), expected, rtol=1e-4, atol=1e-4)
    assert_on_mlx(session, sorted(ops))
    assert_all_on_mlx(session)
