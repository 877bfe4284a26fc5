"""Whole models through ORT with the MLX EP: every node on MLX, outputs matching the CPU EP;
many sessions created and released; a graph part of which MLX cannot run."""

from __future__ import annotations

import gc

import numpy as np
import onnxruntime as ort
import pytest

from conftest import (
    assert_all_on_mlx,
    assert_on_cpu,
    assert_on_mlx,
    assert_outputs_match,
    make_session,
    run,
)
from models import cnn_input, encoder_inputs, minilm_encoder, resnet_cnn, string_cast_model

RTOL = 1e-4


def check_model(model, feeds) -> list[np.ndarray]:
    """Every node on MLX; each output within rtol 1e-4 and an atol of 1e-4 times the
    output's largest magnitude (so the bound follows the output's scale)."""
    expected = run(make_session(model, mlx=False), feeds)
    session = make_session(model, mlx=True)
    actual = run(session, feeds)
    assert_all_on_mlx(session)
    names = [o.name for o in session.get_outputs()]
    for name, a, e in zip(names, actual, expected):
        atol = RTOL * max(float(np.max(np.abs(e))), 1.0)
        assert_outputs_match([a], [e], rtol=RTOL, atol=atol, names=[name])
    return actual


@pytest.mark.parametrize("mask_style", ["mul", "where"])
def test_minilm_encoder(mask_style):
    model = minilm_encoder(mask_style=mask_style)
    check_model(model, encoder_inputs())


def test_minilm_encoder_dynamic_axes_batch2():
    """Symbolic batch and sequence: the position slice (Shape/Gather/Unsqueeze/Slice) and
    the Reshapes' copied dimensions are resolved at run time; a second run with another
    sequence length must still be right."""
    model = minilm_encoder(layers=2, seq=32, batch=2, dynamic=True)
    expected_session = make_session(model, mlx=False)
    session = make_session(model, mlx=True)
    for seq in (32, 17):
        feeds = encoder_inputs(batch=2, seq=seq)
        actual, expected = run(session, feeds), run(expected_session, feeds)
        for a, e in zip(actual, expected):
            assert_outputs_match([a], [e], rtol=RTOL, atol=RTOL * max(float(np.max(np.abs(e))), 1.0))
    assert_all_on_mlx(session)


def test_resnet_cnn():
    model = resnet_cnn()
    check_model(model, {"input": cnn_input()})


def test_many_sessions_then_a_new_one():
    """20 sessions of one model alive together (they share initializers), each run and
    checked; all released; the process then still builds and runs a new session."""
    model = minilm_encoder(layers=2, hidden=128, heads=4, seq=32)
    feeds = encoder_inputs(seq=32)
    expected = run(make_session(model, mlx=False), feeds)
    sessions = [make_session(model, mlx=True) for _ in range(20)]
    for session in sessions:
        assert_outputs_match(run(session, feeds), expected, rtol=RTOL, atol=RTOL * 10)
    assert_all_on_mlx(sessions[-1])
    del session, sessions
    gc.collect()

    # a different model after the release, then the first one again
    cnn = resnet_cnn(widths=(8, 16), blocks=1)
    cnn_feeds = {"input": cnn_input()}
    check_model(cnn, cnn_feeds)
    session = make_session(model, mlx=True)
    assert_outputs_match(run(session, feeds), expected, rtol=RTOL, atol=RTOL * 10)
    assert_all_on_mlx(session)


def test_declined_nodes_stay_on_cpu():
    """Casts to and from string tensors cannot run on MLX: they stay on ORT's CPU EP, the
    Mul and Add around them still run on MLX, and the result is right."""
    model = string_cast_model()
    x = np.array([[1.5, -2.25, 3.0], [0.0, 1e-3, 7.125]], np.float32)
    expected = run(make_session(model, mlx=False), {"X": x})
    session = make_session(model, mlx=True)
    actual = run(session, {"X": x})
    assert_outputs_match(actual, expected)
    np.testing.assert_allclose(actual[0], x * 2 + 1, rtol=1e-6)
    assert_on_cpu(session, ["Cast"])
    if ort.__version__ == "1.23.0":
        # ORT 1.23.0 cannot run a plugin EP's nodes beside CPU nodes in one graph ("Failed to
        # find kernel for MemcpyFromHost", fixed in 1.23.1), so the EP takes whole graphs only:
        # here everything stays on the CPU EP.
        assert_on_cpu(session, ["Mul", "Add"])
    else:
        assert_on_mlx(session, ["Mul", "Add"])
