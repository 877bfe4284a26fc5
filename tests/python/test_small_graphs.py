"""The held-out-style small models of ``small_graphs.py`` (GRU and LSTM steps, a VAD, a 2-layer
seq2seq decoder step, a small classifier): every node on the MLX EP, outputs matching ORT's
CPU EP closely, over several calls that carry the state outputs back in."""

from __future__ import annotations


import numpy as np
import pytest

from conftest import assert_all_on_mlx, assert_outputs_match, make_session, run
from small_graphs import MODELS, seq2seq_decoder

RTOL = 1e-4

#: State outputs fed back as inputs on the next call (output -> input), per model.
CARRIED = {
    "gru-step": {f"h_{i}_out": f"h_{i}" for i in range(3)},
    "lstm-step": {"h_out": "h_in", "c_out": "c_in"},
    "vad": {"state_out": "state", "context_out": "context"},
    "vad-if": {"state_out": "state", "context_out": "context"},
}

#: Node counts the builders are meant to have (held-out style: 20 to 400 nodes).
NODES = {"gru-step": 26, "lstm-step": 24, "vad": 102, "vad-if": 96, "seq2seq-decoder": 357, "classifier": 62}


def close(actual, expected, names) -> None:
    """Each output within rtol 1e-4 and an atol of 1e-4 times its largest magnitude."""
    for name, a, e in zip(names, actual, expected):
        atol = RTOL * max(float(np.max(np.abs(e))), 1.0)
        assert_outputs_match([a], [e], rtol=RTOL, atol=atol, names=[name])


@pytest.mark.parametrize("name", list(MODELS))
def test_small_graph_on_mlx_matches_cpu(name):
    model, feeds = MODELS[name]()
    assert len(model.graph.node) == NODES[name]
    cpu = make_session(model, mlx=False)
    session = make_session(model, mlx=True)
    names = [o.name for o in session.get_outputs()]
    carried = CARRIED.get(name, {})
    mlx_feeds, cpu_feeds = dict(feeds), dict(feeds)
    for _ in range(3 if carried else 1):
        actual, expected = run(session, mlx_feeds), run(cpu, cpu_feeds)
        close(actual, expected, names)
        for out, inp in carried.items():
            mlx_feeds[inp] = actual[names.index(out)]
            cpu_feeds[inp] = expected[names.index(out)]
    assert_all_on_mlx(session)


def test_vad_if_takes_both_branches_on_mlx():
    """Sound, then silent chunks, then sound again on one session: the If's branches alternate,
    the state carries through the silence unchanged, every node stays on MLX."""
    model, feeds = MODELS["vad-if"]()
    cpu, session = make_session(model, mlx=False), make_session(model, mlx=True)
    names = [o.name for o in session.get_outputs()]
    state = feeds["state"]
    for scale in (1.0, 0.0, 0.0, 1.0):
        f = dict(feeds, input=feeds["input"] * scale, state=state)
        actual, expected = run(session, f), run(cpu, f)
        close(actual, expected, names)
        if scale == 0.0:
            assert float(np.max(np.abs(actual[names.index("output")]))) == 0.0
            np.testing.assert_array_equal(actual[names.index("state_out")], state)
        state = actual[names.index("state_out")]
    assert_all_on_mlx(session)


def decoder_runs(shapes) -> None:
    """One MLX session of the seq2seq decoder step run with each ``(batch, past, enc_len)``,
    against the CPU EP."""
    model, _ = seq2seq_decoder()
    cpu = make_session(model, mlx=False)
    session = make_session(model, mlx=True)
    names = [o.name for o in session.get_outputs()]
    for batch, past, enc_len in shapes:
        _, feeds = seq2seq_decoder(batch=batch, past=past, enc_len=enc_len)
        actual = run(session, feeds)
        close(actual, run(cpu, feeds), names)
        assert actual[names.index("present.0.key")].shape == (batch, 4, past + 1, 64)
    assert_all_on_mlx(session)


def test_seq2seq_decoder_steps_over_a_growing_past():
    """Symbolic past length: the decode steps of one generation on one session."""
    decoder_runs([(1, 16, 48), (1, 17, 48), (1, 18, 48), (1, 5, 48)])


def test_seq2seq_decoder_another_source_length_and_batch():
    """A new source sentence (encoder length) and another batch on the same session."""
    decoder_runs([(1, 16, 48), (1, 16, 20), (2, 7, 20)])
