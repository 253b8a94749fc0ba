"""ODEOp: values against scipy, gradient of a log density against central finite differences,
NaN on failed solves, the numba implementation, and sampling through a blow-up region."""

import numpy as np
import pytest

pytensor = pytest.importorskip("pytensor")
pm = pytest.importorskip("pymc")
import pytensor.tensor as pt  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402

import odeinfer as oi  # noqa: E402
from odeinfer.bayes import ODEProblem, ode_op  # noqa: E402


def _logdensity_fn(entry, y_obs, sigma, mode, **options):
    """Gaussian log density of y_obs through the Op, and its gradient, compiled."""
    op = ode_op(entry.model, entry.t, entry.t0, **options)
    theta, x0 = pt.dvector("theta"), pt.dvector("x0")
    y, _ = op(theta, x0)
    logp = -0.5 * pt.sum(((y - y_obs) / sigma) ** 2) + pt.sum(pt.log(theta ** 2 + 1.0))
    grads = pytensor.grad(logp, [theta, x0])
    return pytensor.function([theta, x0], [logp, *grads], mode=mode)


def _central_fd(f, v, m, h_rel=1e-5):
    g = np.empty_like(v)
    for j in range(v.size):
        h = h_rel * max(abs(v[j]), 1e-3)
        vp, vm = v.copy(), v.copy()
        vp[j] += h
        vm[j] -= h
        g[j] = (f(vp[:m], vp[m:])[0] - f(vm[:m], vm[m:])[0]) / (2 * h)
    return g


@pytest.mark.parametrize("name", ["lotka_volterra", "population"])
def test_gradient_matches_central_differences(name):
    """d logp / d (theta, x0) through the Op's vector-Jacobian product vs central finite
    differences of the same log density (the oracle), to 1e-6 relative. Tight solver
    tolerances so that the difference quotient sees the ODE, not the step-size controller."""
    entry = oi.zoo.get(name)
    p = np.array(list(entry.params.values()))
    x0 = np.array(list(entry.x0.values()))
    truth = oi.solve(oi.Problem(entry.model, entry.t, x0=x0, t0=entry.t0), p,
                     solver=oi.Dopri5(rtol=1e-12, atol=1e-12)).y
    y_obs = truth + 0.3 * np.random.default_rng(0).standard_normal(truth.shape) * np.abs(truth).mean()
    f = _logdensity_fn(entry, y_obs, 0.5, "FAST_COMPILE", solver=oi.Dopri5(rtol=1e-11, atol=1e-12, max_steps=20_000))
    # a point away from the truth, so that the gradient is not ~0
    pv, xv = p * 1.03, x0 * 0.98
    _, g_theta, g_x0 = f(pv, xv)
    g = np.concatenate([g_theta, g_x0])
    g_fd = _central_fd(f, np.concatenate([pv, xv]), p.size)
    np.testing.assert_allclose(g, g_fd, rtol=1e-6, atol=1e-6 * np.abs(g_fd).max())


def test_values_match_scipy_and_numba_matches_python():
    """Op output vs scipy solve_ivp (DOP853, rtol 1e-12), and the NUMBA-mode graph vs the
    Python perform (same kernels: equal to 1e-12)."""
    entry = oi.zoo.get("lotka_volterra")
    p = np.array(list(entry.params.values()))
    x0 = np.array(list(entry.x0.values()))
    a, b, c, d = p
    ref = solve_ivp(lambda t, z: [z[0] * (a - b * z[1]), z[1] * (d * z[0] - c)], (0, entry.t[-1]), x0,
                    t_eval=entry.t, method="DOP853", rtol=1e-12, atol=1e-12).y.T
    y_obs = ref * 1.1
    outs = []
    for mode in ("FAST_COMPILE", "NUMBA"):
        f = _logdensity_fn(entry, y_obs, 0.5, mode, solver=oi.Dopri5(rtol=1e-10, atol=1e-12, max_steps=20_000))
        outs.append(np.concatenate([np.atleast_1d(v) for v in f(p, x0)]))
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-12)
    op = ode_op(entry.model, entry.t, solver=oi.Dopri5(rtol=1e-10, atol=1e-12, max_steps=20_000))
    theta, xx = pt.dvector(), pt.dvector()
    y = op(theta, xx)[0].eval({theta: p, xx: x0}, mode="NUMBA")
    np.testing.assert_allclose(y, ref, rtol=1e-7)
    expected = -0.5 * np.sum(((ref - y_obs) / 0.5) ** 2) + np.sum(np.log(p ** 2 + 1))
    np.testing.assert_allclose(outs[0][0], expected, rtol=1e-7)


@oi.model(states=["x"], params=["k"])
def blowup(t, y, p):
    return {"x": p.k * y.x ** 2}


def test_failed_solve_gives_nan_not_error():
    """x' = k x^2, x(0) = 1 blows up at t = 1/k: with k = 1 and t up to 2 the solve fails;
    the Op returns NaN values and NaN gradients in both backends, and does not raise."""
    t = np.linspace(0.0, 2.0, 11)
    problem = ODEProblem(blowup, t)
    y, s, status = problem.python_solve(np.array([1.0]), np.array([1.0]))
    assert status != 0 and np.isnan(y).all() and np.isnan(s).all()
    y_ok, _, status_ok = problem.python_solve(np.array([0.2]), np.array([1.0]))
    assert status_ok == 0
    np.testing.assert_allclose(y_ok[:, 0], 1.0 / (1.0 - 0.2 * t), rtol=1e-5)  # analytic solution
    op = ode_op(blowup, t)
    k, x0 = pt.dvector("k"), pt.dvector("x0")
    logp = -pt.sum(op(k, x0)[0] ** 2)
    for mode in ("FAST_COMPILE", "NUMBA"):
        f = pytensor.function([k, x0], [logp, *pytensor.grad(logp, [k, x0])], mode=mode)
        bad = f(np.array([1.0]), np.array([1.0]))
        assert all(np.isnan(v).all() for v in bad)
        good = f(np.array([0.2]), np.array([1.0]))
        assert all(np.isfinite(v).all() for v in good)
    # non-finite inputs are a failed solve too, not an exception
    assert np.isnan(problem.python_solve(np.array([np.nan]), np.array([1.0]))[0]).all()


def test_pymc_samples_through_blowup_region():
    """The prior puts mass on k > 0.5, where the solution blows up before t = 2: NUTS rejects
    those points (NaN log density) and keeps sampling; every kept draw has k < 0.5."""
    t = np.linspace(0.0, 2.0, 11)
    rng = np.random.default_rng(3)
    y_obs = 1.0 / (1.0 - 0.2 * t) + 0.05 * rng.standard_normal(t.size)
    op = ode_op(blowup, t)
    with pm.Model():
        k = pm.HalfNormal("k", 1.0)
        y = op(pt.stack([k]), pt.constant(np.array([1.0])))[0]
        pm.Normal("y", mu=y[:, 0], sigma=0.05, observed=y_obs)
        idata = pm.sample(draws=100, tune=100, chains=1, cores=1, random_seed=1, progressbar=False,
                          initvals={"k": 0.3}, compute_convergence_checks=False,
                          compile_kwargs={"mode": "NUMBA"})
    ks = idata.posterior["k"].values.ravel()
    assert ks.size == 100 and np.all(ks < 0.5)
    assert abs(np.median(ks) - 0.2) < 0.05


def test_op_pickles_and_compares_by_problem():
    import pickle

    entry = oi.zoo.get("lotka_volterra")
    a = ode_op(entry.model, entry.t)
    b = pickle.loads(pickle.dumps(a))
    assert a == b and hash(a) == hash(b)
    assert a != ode_op(entry.model, entry.t, solver=oi.Dopri5(rtol=1e-8, max_steps=20_000))
    p = np.array(list(entry.params.values()))
    x0 = np.array(list(entry.x0.values()))
    np.testing.assert_array_equal(b.problem.python_solve(p, x0)[0], a.problem.python_solve(p, x0)[0])


def test_op_rejects_wrong_input_lengths():
    entry = oi.zoo.get("lotka_volterra")
    op = ode_op(entry.model, entry.t)
    with pytest.raises(oi.errors.InputError, match="theta must have length 4"):
        op(pt.as_tensor_variable(np.ones(3)), pt.as_tensor_variable(np.ones(2)))


def _fresh_model():
    """A Lotka-Volterra variant no cache has seen (a constant that differs in every test run)."""
    import os
    import time

    c = 1e-9 * (1 + (time.time_ns() + os.getpid()) % 10**6)
    return oi.Model.from_equations({"x": f"a*x - b*x*y + {c!r}", "y": "d*x*y - g*y"},
                                   params=["a", "b", "g", "d"], name="fresh_lv")


@pytest.mark.parametrize("gradient", ["forward", "adjoint"])
def test_numba_mode_of_a_new_model_runs_the_shared_kernel(monkeypatch, gradient):
    """A model whose own solver kernel is not compiled: the NUMBA implementation calls the shared
    (compiled-once-per-machine) kernel instead of compiling the model's (issue 13: a new model's first
    result never waits for a per-model compile), and gives the Python path's values bit for bit (the
    shared and model kernels' equality is tests/test_shared_tier.py's)."""
    m = _fresh_model()
    t = np.linspace(0.0, 10.0, 11)
    p, x0 = np.array([0.55, 0.028, 0.8, 0.024]), np.array([34.0, 5.9])
    g = np.linspace(-1.0, 1.0, 22).reshape(11, 2)
    monkeypatch.setenv("ODEINFER_TIERED", "shared")
    problem = ODEProblem(m, t, solver=oi.Dopri5(rtol=1e-8, atol=1e-10))
    if gradient == "forward":
        y, s = problem.numba_solve(sens=True)(p, x0)
        got = np.concatenate([y.ravel(), s.ravel()])
        y_ref, s_ref, status = problem.python_solve(p, x0, sens=True)
        ref = np.concatenate([y_ref.ravel(), s_ref.ravel()])
        name = "dopri5_solve_sens"
    else:
        got = np.concatenate(problem.numba_vjp()(p, x0, g))
        g_theta, g_x0, status = problem.python_vjp(p, x0, g)
        ref = np.concatenate([g_theta, g_x0])
        name = "dopri5_adjoint_vjp"
    assert status == 0 and np.all(np.isfinite(got))
    assert not getattr(m.compile().module, name).overloads, f"the model's own {name} was compiled"
    mismatch = np.flatnonzero(got != ref)
    assert mismatch.size == 0, f"{mismatch.size} of {got.size} entries differ from the Python path"


_CACHED_GRAPH_SCRIPT = """
import sys

import numpy as np
import pytensor
import pytensor.tensor as pt

import odeinfer as oi
from odeinfer.bayes.op import ODEOp

kind, c, out = sys.argv[1], float(sys.argv[2]), sys.argv[3]
t = np.linspace(0.0, 8.0, 9)
if kind == "ode":
    from odeinfer.bayes import ODEProblem

    model = oi.Model.from_equations({"x": f"a*x - b*x*y + {c!r}", "y": "d*x*y - g*y"}, params=["a", "b", "g", "d"],
                                    name="fresh_lv")
    problem = ODEProblem(model, t, solver=oi.Dopri5(rtol=1e-8, atol=1e-10))
    point = [np.array([0.55, 0.028, 0.8, 0.024]), np.array([34.0, 5.9])]
else:
    from odeinfer.bayes.dde_problem import DDEProblem
    from odeinfer.model import History

    model = oi.Model.from_equations({"x": f"r*x*(1 - lag(x, tau)) + {c!r}"}, params=["r", "tau"], delays=["tau"],
                                    name="fresh_logistic_delay")
    problem = DDEProblem(model, t, History.constant([0.5]), 0.0,
                         solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-8, atol=1e-10)))
    point = [np.array([1.2, 1.0]), np.array([0.5])]  # a constant history's value is its parameter
theta, x0 = pt.dvector("theta"), pt.dvector("x0")
w = np.linspace(-1.0, 1.0, t.size * model.n_states).reshape(t.size, model.n_states)
y, s = ODEOp(problem)(theta, x0)
y_adj, _ = ODEOp(problem, gradient=oi.Adjoint())(theta, x0)
grads = pytensor.grad(pt.sum(w * y_adj), [theta, x0])
f = pytensor.function([theta, x0], [y, s, *grads], mode="NUMBA")
np.save(out, np.concatenate([np.ravel(v) for v in f(*point)]))
"""


def _numba_cache_files(compiledir):
    return {p.name: p.stat().st_mtime_ns for p in (compiledir / "numba").glob("*")}


@pytest.mark.parametrize("kind", ["ode", "dde"])
def test_a_graph_on_the_shared_kernel_is_cached_and_loads_in_another_process(tmp_path, kind):
    """PyTensor caches a compiled graph's machine code on disk (one compile directory) and another
    process (a NUTS chain) loads it. A graph whose Op runs a new model on the shared kernel must give,
    in the second process, the first process's values bit for bit, from the cache (nothing compiled
    again): the model handle's callback addresses are one process's, so they must not be constants
    of that code (they were once: the second process crashed)."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    c = 1e-9 * (1 + (time.time_ns() + os.getpid()) % 10**6)  # a model no cache has seen
    compiledir = tmp_path / "pytensor"
    script = tmp_path / "graph.py"
    script.write_text(_CACHED_GRAPH_SCRIPT, encoding="utf-8")
    root = str(Path(oi.__file__).resolve().parents[1])
    env = {**os.environ, "ODEINFER_TIERED": "shared", "PYTENSOR_FLAGS": f"base_compiledir={compiledir},cxx=",
           "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    outs, files = [], []
    for k in range(2):
        out = tmp_path / f"out{k}.npy"
        proc = subprocess.run([sys.executable, str(script), kind, repr(c), str(out)], env=env, capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, f"process {k + 1} failed ({proc.returncode}): {proc.stderr[-2000:]}"
        outs.append(np.load(out))
        files.append(_numba_cache_files(compiledir))
    assert files[0], "the first process cached nothing"
    assert files[1] == files[0], "the second process compiled the graph again instead of loading it"
    assert np.all(np.isfinite(outs[0]))
    mismatch = np.flatnonzero(outs[1] != outs[0])
    assert mismatch.size == 0, f"{mismatch.size} of {outs[0].size} values differ between the processes"


def test_the_numba_op_cache_key_names_the_code_and_the_shared_module(monkeypatch):
    """PyTensor keeps the numba Ops' compiled graphs in its compile directory across versions of
    odeinfer. A graph built around the shared kernel calls the shared module's C entry through a
    linker symbol named after that module: loaded after the shared kernels changed (same model, so
    the same model module), it called a symbol no process registers and crashed (a CI run on a
    compile directory of earlier sessions). The key must name the shared module and the code that
    built the graph."""
    import os
    import time

    from odeinfer.bayes.numba_op import _key_text, _numba_funcify_ode_op, _numba_funcify_vjp_op
    from odeinfer.bayes.op import ODEOp, VJPOp
    from odeinfer.model.cache import source_digest
    from odeinfer.solve.shared import recorded_tiers, shared_module

    monkeypatch.setenv("ODEINFER_TIERED", "shared")
    c = 1e-9 * (1 + (time.time_ns() + os.getpid()) % 10**6)  # a model no cache has compiled
    model = oi.Model.from_equations({"x": f"-k*x + {c!r}"}, params=["k"], name="key_decay")
    problem = ODEProblem(model, np.linspace(0.0, 1.0, 5))
    texts = []
    for funcify, op in ((_numba_funcify_ode_op, ODEOp(problem)), (_numba_funcify_vjp_op, VJPOp(problem))):
        with recorded_tiers() as tiers:
            funcify(op)
        assert tiers == [f"shared {shared_module().__name__}"]
        texts.append(_key_text("v", problem, None, tiers))
    for text in texts:
        assert source_digest() in text and shared_module().__name__ in text


def test_the_source_digest_changes_with_any_file_content_or_name(tmp_path):
    """tree_digest, the source digest's hash: any change of a file's bytes or name changes it."""
    from odeinfer.model.cache import tree_digest

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    first = tree_digest(tmp_path)
    assert tree_digest(tmp_path) == first
    (tmp_path / "b.py").write_text("y = 3\n")
    second = tree_digest(tmp_path)
    (tmp_path / "b.py").rename(tmp_path / "c.py")
    third = tree_digest(tmp_path)
    assert len({first, second, third}) == 3
