"""tapeml.optim traced and mistaken: init on tracers, and update's arguments checked."""

from __future__ import annotations

import numpy as np
import pytest

import tapeml
from tapeml import optim
from tapeml.tracing.pytree import flatten

OPTIMIZERS = [optim.sgd(0.1), optim.momentum(0.1), optim.adam(0.1)]
IDS = ["sgd", "momentum", "adam"]


def _params():
    return {"a": 1.0, "w": np.arange(6, dtype=np.float32).reshape(2, 3),
            "d": [np.linspace(-1, 1, 4), np.float64(2.0)]}


def _grads():
    return {"a": 0.5, "w": np.full((2, 3), 0.25, np.float32),
            "d": [np.linspace(1, 2, 4), np.float64(-1.0)]}


def _same(got, want):
    got, got_def = flatten(got)
    want, want_def = flatten(want)
    assert got_def == want_def
    for g, w in zip(got, want, strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype and np.shape(g) == np.shape(w)
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("opt", OPTIMIZERS, ids=IDS)
def test_init_runs_traced_and_makes_the_eager_state(opt):
    """jit(opt.init)(params), as with optax, and init inside a jitted step: momentum's and
    adam's init had called np.zeros(np.shape(p)), a TracingError on a tracer. The state is the
    eager one, dtypes included: a Python-float parameter's zeros are f32 (traced, it is a weak
    f64 tracer), a float64 array's f64."""
    params = _params()
    eager = opt.init(params)
    _same(tapeml.jit(opt.init)(params), eager)
    _same(tapeml.jit(lambda p: opt.init(p))(params), eager)
    first = opt.update(params, _grads(), eager)
    _same(tapeml.jit(lambda p, g: opt.update(p, g, opt.init(p)))(params, _grads()), first)


P = {"lin1": {"W": np.ones((2, 3), np.float32), "b": np.zeros(3, np.float32)},
     "lin2": {"W": np.ones((3, 1), np.float32), "b": np.zeros(1, np.float32)}}
G = {k: {n: np.full_like(a, 0.5) for n, a in layer.items()} for k, layer in P.items()}
P_TEXT = r"\{'lin1': \{'W': \.\.\., 'b': \.\.\.\}, 'lin2': \{'W': \.\.\., 'b': \.\.\.\}\}"
ADAM_STATE = r"\(a dict with m, v and step, m and v structured like params\)"
ADAM, MOMENTUM = optim.adam(0.1), optim.momentum(0.1)


@pytest.mark.parametrize(("opt", "grads", "state", "message"), [
    (ADAM, G, MOMENTUM.init(P), rf"adam.update: state is not what adam.init makes "
                                rf"{ADAM_STATE}; got {P_TEXT}"),
    (ADAM, G, None, rf"adam.update: state is not what adam.init makes {ADAM_STATE}; got None"),
    (ADAM, ADAM.init(P), G, rf"adam.update: grads must be structured like params, {P_TEXT}; "
                            r"got \{'m': \{'lin1'"),
    (ADAM, {"lin1": G["lin1"]}, ADAM.init(P),
     rf"adam.update: grads must be structured like params, {P_TEXT}; "
     r"got \{'lin1': \{'W': \.\.\., 'b': \.\.\.\}\}"),
    (ADAM, (1.0, G), ADAM.init(P), rf"adam.update: grads must be structured like params, "
                                   rf"{P_TEXT}; got \(\.\.\., {P_TEXT}\) \(value_and_grad "
                                   r"returns \(value, grads\): pass its grads\)"),
    (ADAM, G, ADAM.init({"lin1": P["lin1"]}), r"adam.update: state is not what adam.init "
                                              rf"makes {ADAM_STATE}; at m: \{{'lin1'.*\}} "
                                              rf"where {P_TEXT} was expected"),
    (ADAM, {**G, "lin2": {"W": G["lin2"]["W"]}}, ADAM.init(P),
     r"adam.update: grads must be structured like params; at lin2: \{'W': \.\.\.\} where "
     r"\{'W': \.\.\., 'b': \.\.\.\} was expected"),
    (MOMENTUM, G, ADAM.init(P), r"momentum.update: state is not what momentum.init makes "
                                r"\(the velocities, structured like params\); got \{'m': "),
    (optim.sgd(0.1), [G], (), rf"sgd.update: grads must be structured like params, "
                              rf"{P_TEXT}; got \[{P_TEXT}\]"),
], ids=["momentum-state-to-adam", "state-None", "grads-and-state-swapped", "one-layer-of-grads",
        "value-and-grads-tuple", "state-of-other-params", "a-leaf-missing",
        "adam-state-to-momentum", "sgd-grads-in-a-list"])
def test_update_says_which_argument_is_wrong_eager_and_jitted(opt, grads, state, message):
    """A state of another optimizer, None, or grads and state swapped had been a KeyError
    'step' or a TypeError from inside optim.py; grads of another structure (value_and_grad's
    (value, grads), one layer's) pytree's 'tree structures differ', naming neither the
    optimizer nor the argument. Each is a ValueError naming the update and the argument, with
    the structure given (or where it first differs), at the user's line."""
    for update in (opt.update, tapeml.jit(lambda p, g, s: opt.update(p, g, s))):
        with pytest.raises(ValueError, match=rf"^{message}.*\n  at .*test_optim_errors.py"):
            update(P, grads, state)


def test_sgd_refuses_another_optimizers_state():
    """sgd keeps no state and took any, handing another optimizer's back unused (the README
    says a state not structured as update needs is a ValueError)."""
    p = {"w": np.ones(2, np.float32)}
    for other in (optim.adam(0.1), optim.momentum(0.1)):
        with pytest.raises(ValueError, match=r"sgd.update: state is not what sgd.init makes"):
            optim.sgd(0.1).update(p, p, other.init(p))
    assert optim.sgd(0.1).update(p, p, optim.sgd(0.1).init(p))[1] == ()
