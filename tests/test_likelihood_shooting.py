"""Multiple shooting for likelihood fits (``oi.Embedding(segments=m).fit(problem)``).

References: single shooting's optimum of the same problem (both finish with the same single
shooting stage, so they agree to its stopping rule: NLL change 1e-7, gradient norm 1e-5);
Lorenz from a poor start, where single shooting ends in a worse local optimum and the optimum
is the one reached from the truth.
"""

import numpy as np
import pytest

import odeinfer as oi
from likelihood_reference import newton_optimum
from odeinfer.errors import InputError


@oi.model(states=["a", "b"], params=["k1", "k2"])
def chain(t, y, p):
    return {"a": -p.k1 * y.a, "b": p.k1 * y.a - p.k2 * y.b}


def chain_problem():
    """Two conditions (k2 overridden per condition, a dose inside one), a scaled observable with an
    estimated sd, log10 scales."""
    m = chain.observe({"signal": "s * b"}, noise=oi.Normal(sigma="sd"), params=["s", "sd"])
    t = np.linspace(0.5, 8.0, 30)
    conds = {"A": oi.Condition(params={"k2": "k2_A"}),
             "B": oi.Condition(params={"k2": "k2_B"}, doses=[oi.Dose(3.1, "a", 0.5)])}
    params = {"k1": oi.Param(1.0, 1e-3, 1e2, "log10"), "k2_A": oi.Param(0.3, 1e-3, 1e2, "log10"),
              "k2_B": oi.Param(0.5, 1e-3, 1e2, "log10"), "s": oi.Param(2.0, 1e-2, 1e2, "log10"),
              "sd": oi.Param(0.1, 1e-4, 10, "log10")}
    shell = oi.FitProblem(m, oi.Experiments([oi.Data(t, np.ones(t.size), "signal", name=k) for k in conds],
                                            conditions=conds), params, x0={"a": 1.0, "b": 0.0})
    truth = np.log10([0.9, 0.25, 0.6, 3.0, 0.08])
    rng = np.random.default_rng(3)
    sims = [h + 0.08 * rng.standard_normal(h.size) for h, *_ in oi.Objective(shell).noise_model_at(truth)]
    return shell.with_measurements(sims)


def test_multiple_shooting_reaches_the_single_shooting_optimum_with_conditions():
    prob = chain_problem()
    single = oi.Embedding().fit(prob)
    multi = oi.Embedding(segments=4).fit(prob)
    assert single.converged and multi.converged, (single.message, multi.message)
    # the optimum, finished by Newton steps on the single-shooting objective (exact gradient and
    # Fisher information, solver at rtol 1e-11); both fits stop when an accepted step changes the
    # NLL by < 1e-7, which leaves up to sqrt(2e-7 / lambda_min) along the flattest direction
    u_ref, ev = newton_optimum(prob, single.extras["u"])
    tol = np.sqrt(2e-7 / np.linalg.eigvalsh(ev.fim)[0])
    for fit in (single, multi):
        assert np.max(np.abs(fit.extras["u"] - u_ref)) < tol
        assert fit.nll == pytest.approx(ev.nll, abs=1e-6)
    np.testing.assert_allclose(multi.bse.to_numpy(), single.bse.to_numpy(), rtol=1e-3)
    assert multi.extras["multiple_shooting_iterations"] > 0


def lorenz_problem():
    z = oi.zoo.get("lorenz")
    m = z.model.observe({"o1": "x1", "o2": "x2", "o3": "x3"}, noise=oi.Normal(sigma="sd"), params=["sd"])
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=z.sigma, rng=3)
    d = oi.Data(data.t, data.y, ["o1", "o2", "o3"])
    params = {"a1": oi.Param(5.0, 0.1, 100, "log"), "a2": oi.Param(20.0, 0.1, 100, "log"),
              "a3": oi.Param(5.0, 0.1, 100, "log"), "sd": oi.Param(1.0, 1e-3, 100, "log"),
              "x1_0": oi.Param(0.0, -50, 50), "x2_0": oi.Param(0.0, -50, 50), "x3_0": oi.Param(1.0, -50, 50)}
    prob = oi.FitProblem(m, d, params, x0={"x1": "x1_0", "x2": "x2_0", "x3": "x3_0"})
    truth = {**z.params, "sd": z.sigma, **{f"{k}_0": v for k, v in z.x0.items()}}
    return prob, truth


@pytest.mark.filterwarnings("ignore::odeinfer.IdentifiabilityWarning")  # single shooting's poor optimum
def test_lorenz_multiple_shooting_converges_where_single_shooting_fails():
    """Lorenz, 10 time units, observables = the states with an estimated sd; start a = (5, 20, 5),
    sd 1, x0 = (0, 0, 1): single shooting ends far above the optimum reached from the truth,
    20-segment multiple shooting reaches it."""
    prob, truth = lorenz_problem()
    ref = oi.Embedding().fit(prob, start=truth)
    single = oi.Embedding().fit(prob)  # the Params' values are the poor start
    multi = oi.Embedding(segments=20).fit(prob)
    assert ref.converged and multi.converged, (ref.message, multi.message)
    assert single.nll > ref.nll + 100
    assert multi.nll == pytest.approx(ref.nll, abs=1e-5)
    np.testing.assert_allclose(multi.extras["u"], ref.extras["u"], atol=1e-4)
    assert multi.extras["continuity_max"] < 1e-3  # where single shooting took over
    # without the single-shooting polish: the penalty stage's point (gaps below 1e-6 relative), whose
    # exact-trajectory NLL is within 0.01 of the optimum (far below the 1.92 of a 95% likelihood-ratio
    # interval)
    raw = oi.Embedding(segments=20, polish=False).fit(prob)
    assert raw.extras["continuity_max"] < 1e-6
    assert raw.nll == pytest.approx(ref.nll, abs=0.01)


def test_multiple_shooting_bad_inputs():
    prob = chain_problem()
    with pytest.raises(InputError, match=r"segments: got 40, but experiment 'A' has only 29 interval"):
        oi.Embedding(segments=40).fit(prob)
    with pytest.raises(InputError, match=r"boundary='optimal': a model with observables is fitted by maximum "
                                         r"likelihood"):
        oi.Embedding(boundary="optimal").fit(prob)


@oi.model(states=["a", "b"], params=["k1", "k2", "u"])
def feed(t, y, p):
    return {"a": p.u - p.k1 * y.a, "b": p.k1 * y.a - p.k2 * y.b}


def test_multiple_shooting_with_doses_inputs_and_preequilibration():
    """Four conditions: a dose, a step input with an override, a linear input, a pre-equilibration;
    the segments cut through them (their experiments' doses, inputs and pre-equilibration go with
    each segment). Same reference and tolerance as above."""
    m = feed.observe({"sig": "s*b"}, noise=oi.Normal(sigma="sd"), params=["s", "sd"])
    t = np.linspace(0.25, 6.0, 24)
    conds = {"dose": oi.Condition(params={"u": 0.0}, doses=[oi.Dose(2.0, "a", 1.5)]),
             "feed": oi.Condition(params={"u": oi.Input([0.0, 3.0], [0.5, 0.0]), "k2": "k2_feed"}, x0={"a": 0.0}),
             "ramp": oi.Condition(params={"u": oi.Input([0.0, 2.5, 6.0], [0.0, 0.6, 0.1], kind="linear")}),
             "pre": oi.Condition(params={"u": 0.1}, preequilibrate=oi.Condition(params={"u": 0.4}))}
    truth = {"k1": 0.8, "k2": 0.4, "k2_feed": 0.6, "s": 2.0, "sd": 0.05}
    params = {k: oi.Param(0.5 if k != "sd" else 0.1, 1e-2, 1e2, "log10") for k in truth}
    shell = oi.FitProblem(m, oi.Experiments([oi.Data(t, np.ones(t.size), "sig", name=k) for k in conds],
                                            conditions=conds), params, x0={"a": 1.0, "b": 0.0})
    u_true = np.log10([truth[k] for k in shell.estimated])
    rng = np.random.default_rng(7)
    prob = shell.with_measurements([h + 0.05 * rng.standard_normal(h.size)
                                    for h, *_ in oi.Objective(shell).noise_model_at(u_true)])
    # the fits' solver as accurate as the 1e-6 comparison of NLLs below needs (the likelihood default,
    # rtol 1e-6, leaves NLL errors of about 1e-5: tests/test_likelihood_tolerance.py)
    tight = oi.Auto(rtol=1e-8, atol=1e-10)
    single = oi.Embedding(solver=tight).fit(prob)
    multi = oi.Embedding(segments=3, solver=tight).fit(prob)
    assert single.converged and multi.converged, (single.message, multi.message)
    u_ref, ev = newton_optimum(prob, single.extras["u"])
    tol = np.sqrt(2e-7 / np.linalg.eigvalsh(ev.fim)[0])
    assert np.max(np.abs(multi.extras["u"] - u_ref)) < tol
    assert multi.nll == pytest.approx(ev.nll, abs=1e-6)
