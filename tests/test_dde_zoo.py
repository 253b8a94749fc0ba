"""The DDE zoo: entries, provenance, true values from DDE-Find sec. 6 / Brunel et al. 2013 sec. 6.2,
and right-hand sides checked against hand-written formulas (tests/dde_reference.py)."""


import numpy as np
import pytest

from odeinfer import zoo
from odeinfer.errors import ModelDefinitionError
from odeinfer.model import History
from odeinfer.zoo.dde import DDEZooEntry


def _load_reference():
    import dde_reference  # tests/ is on sys.path (conftest.py)

    return dde_reference


ref = _load_reference()

# (theta..., tau), history values, T, n_times: DDE-Find spec seed-002 sec. 2.2 (tables 4-8)
PAPER = {
    "delay_exponential_decay": ([-2.0, -2.0, 1.0], [1.5, 4.0], 10.0, 101),
    "logistic_delay": ([2.0, 1.5, 1.0], [-0.5, 3.0, 2.0], 10.0, 101),
    "enso": ([1.0, 1.0, 0.75, 5.0], [-0.25, 1.0, 1.5], 10.0, 101),
    "cheyne_stokes": ([1.0, 7.0, 2.0, 0.25], [-5.0, 2.0], 3.0, 121),
    "hiv": ([0.00343, 3.8, 0.05, 2.0, 1000.0, 0.43, 48.0, 1.0], [1, 3, 0, 1, 3, 0, 10, 8, 0], 10.0, 101),
}


def test_available_and_get():
    assert zoo.available("dde") == ("delay_exponential_decay", "logistic_delay", "enso", "cheyne_stokes", "hiv",
                                    "nicholson_blowflies")
    assert zoo.available("all") == zoo.available() + zoo.available("dde")
    for name in zoo.available("dde"):
        e = zoo.get(name)
        assert isinstance(e, DDEZooEntry) and e.name == name and e.model.delays == ("tau",)
        assert e.source.strip() and e.t[0] >= e.t0


@pytest.mark.parametrize("name", sorted(PAPER))
def test_true_values_are_the_papers(name):
    e = zoo.get(name)
    params, phi, T, n = PAPER[name]
    np.testing.assert_array_equal(e.params_array(), params)
    np.testing.assert_array_equal(e.history_params_array(), phi)
    assert e.t0 == 0.0 and e.t[-1] == T and e.t.size == n and e.noise_level == 0.3


def test_blowflies_entry_uses_the_oc_estimate_and_the_bf1_window():
    e = zoo.get("nicholson_blowflies")
    np.testing.assert_array_equal(e.params_array(), [7.81, 381.8, 0.154, 14.8])  # seed-001 Table 6.2, L = 11
    assert e.t0 == pytest.approx(54.8) and e.t[-1] == 220.0
    start, end = e.history.window()
    assert start <= e.t0 - 14.8 and end >= e.t0


@pytest.mark.parametrize("name", zoo.available("dde"))
def test_rhs_matches_hand_written_formula(name):
    e = zoo.get(name)
    cm = e.model.compile()
    rng = np.random.default_rng(0)
    p = e.params_array()
    n = e.model.n_states
    for _ in range(3):
        y = rng.uniform(0.5, 2.0, size=n)
        ylag = rng.uniform(0.5, 2.0, size=(n, 1))
        want = ref.HAND_RHS[name](0.3, y, [ylag[:, 0]], dict(e.params))
        np.testing.assert_allclose(cm.f(0.3, y, p, ylag), want, rtol=1e-13)


@pytest.mark.parametrize("name", zoo.available("dde"))
def test_history_value_at_t0_is_x0(name):
    e = zoo.get(name)
    np.testing.assert_allclose(e.x0_array(), ref.hand_history(e)(e.t0), rtol=1e-13)


@pytest.mark.parametrize("changes, match", [
    ({"params": {"theta0": 1.0}}, "params must give exactly"),
    ({"params": {"theta0": -2.0, "theta1": -2.0, "tau": -1.0}}, "delays must be > 0"),
    ({"history": History.constant([1.0, 2.0])}, "history must be a History with one value per state"),
    ({"t": [1.0, 0.5]}, "t must be strictly increasing and >= t0"),
    ({"source": " "}, "source is empty"),
])
def test_entry_validates_at_construction(changes, match):
    e = zoo.get("delay_exponential_decay")
    fields = dict(name=e.name, model=e.model, params=dict(e.params), history=e.history, t0=e.t0, t=e.t,
                  source=e.source)
    fields.update(changes)
    with pytest.raises(ModelDefinitionError, match=match):
        DDEZooEntry(**fields)


def test_unknown_kind_and_name():
    with pytest.raises(ModelDefinitionError, match="kind must be one of"):
        zoo.available("pde")
    with pytest.raises(ModelDefinitionError, match="Did you mean 'logistic_delay'"):
        zoo.get("logistic_dealy")
