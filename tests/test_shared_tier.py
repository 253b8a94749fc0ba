"""The shared tier beyond Dormand-Prince (odeinfer.solve.shared, kernels/pointer.py): Rodas4, the
ODE adjoint, the delay adjoints (VJP and integral-loss gradient, kernels/dde_adjoint.py),
Simultaneous's collocation constraints and the Newton family's kernels, compiled once
per machine with the model called through C callbacks (kernels/cfuncs.py, cfuncs_rodas.py), answer
a new model's first calls. They must give the bits of the model's own kernels (same source text,
same arithmetic in the same order). tests/test_tiered.py covers Dormand-Prince and the DDE solver.

References: the model's own kernel (equality), and Robertson's conservation law
y1 + y2 + y3 = 1 (accuracy, independent of any solver)."""

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.solve import _inputs, shared
from odeinfer.solve.abi import Info, Status
from representative import split

ZOO = ["lotka_volterra", "alpha_pinene", "fitzhugh_nagumo", "sir"]


def _both(cm, name, *args, full=False):
    """``name``'s results from the model's kernel and from the shared one, on copies of ``args``."""
    out = []
    for kernel, lead in ((getattr(cm.module, name), ()),
                         (getattr(shared.shared_module(), "ptr_" + name), (shared.model_handle(cm, full=full),))):
        # the kernels write only the writable arrays; read-only ones (t) stay so, as the solvers pass them
        copies = [a.copy() if isinstance(a, np.ndarray) and a.flags.writeable else a for a in args]
        ret = kernel(*lead, *copies)
        out.append((ret, copies))
    return out


# Default suite: Lotka-Volterra states-only and with sensitivities (the two kernels). The other cases
# (alpha-pinene: five states, a linear stiff system, the largest LU) run the same kernel code and cost
# a model-kernel compilation each (about 90 s on an empty cache): -m slow.
@pytest.mark.parametrize("sens, name", split(
    [(sens, name) for name in ZOO for sens in (False, True)],
    default=[(False, "lotka_volterra"), (True, "lotka_volterra")]))
def test_shared_rodas_is_bitwise_equal_to_the_model_kernel(name, sens):
    entry = oi.zoo.get(name)
    cm = _inputs.compiled_model(entry.model)
    n, t = cm.n_states, np.asarray(entry.t, float)
    k = n + cm.n_params if sens else 0
    args = (float(entry.t0), t, entry.x0_array(), entry.params_array(), *((True,) if sens else ()), 1e-8, 1e-10,
            0.0, 100_000, np.empty((t.size, n * (1 + k))), np.empty(cm.module.rodas_work_size(sens)), np.zeros(6))
    (s1, a1), (s2, a2) = _both(cm, "rodas_solve_sens" if sens else "rodas_solve", *args, full=True)
    assert s1 == s2 == Status.SUCCESS
    assert np.array_equal(a1[-3], a2[-3])  # z: same arithmetic in the same order, not merely close
    assert np.array_equal(a1[-1], a2[-1])  # info: same steps, rejections, evaluations and LU decompositions


def test_a_rodas_solver_answers_from_the_shared_tier_and_conserves_mass():
    # ODEINFER_TIERED=shared (tests/conftest.py): a model nobody compiled answers from the shared kernel
    m = oi.Model.from_equations({"a": "-k1*a + k3*b*c", "b": "k1*a - k2*b*b - k3*b*c", "c": "k2*b*b"},
                                params=["k1", "k2", "k3"], name="robertson_shared_tier_test")
    t = np.geomspace(1e-4, 1e4, 30)
    prob = oi.Problem(m, t, x0=[1.0, 0.0, 0.0], t0=0.0)
    bound = oi.bind(prob, solver=oi.Rodas(rtol=1e-8, atol=1e-12), gradient=oi.Forward())
    sol = oi.solve(prob, [0.04, 3e7, 1e4], solver=oi.Rodas(rtol=1e-8, atol=1e-12), gradient=oi.Forward())
    assert bound.tier == "shared"
    assert sol.success
    assert np.max(np.abs(sol.y.sum(axis=1) - 1.0)) < 1e-7
    # d/dp of a conserved sum is zero: the sensitivities of the three states cancel
    assert np.max(np.abs(sol.sens.sum(axis=1)[:, :3])) < 1e-5
    assert int(bound.info[Info.N_LU]) > 0


# fitzhugh_nagumo runs the same adjoint kernel code as lotka_volterra: -m slow
@pytest.mark.parametrize("name", split([("lotka_volterra",), ("fitzhugh_nagumo",)], default=[("lotka_volterra",)]))
def test_shared_adjoint_is_bitwise_equal_to_the_model_kernel(name):
    entry = oi.zoo.get(name)
    cm = _inputs.compiled_model(entry.model)
    n, m = cm.n_states, cm.n_params
    t = np.asarray(entry.t, float)
    g = np.random.default_rng(1).standard_normal((t.size, n))
    args = (float(entry.t0), t, entry.x0_array(), entry.params_array(), g, 1e-8, 1e-10, 5000, 2,
            np.empty((t.size, n)), np.empty((5000, 3 + 5 * n)), np.empty(n + m),
            np.empty(cm.module.dopri5_adjoint_work_size()), np.zeros(6))
    (s1, a1), (s2, a2) = _both(cm, "dopri5_adjoint_vjp", *args)
    assert s1 == s2 == Status.SUCCESS
    assert np.array_equal(a1[11], a2[11])  # the gradient
    assert np.array_equal(a1[13], a2[13])  # the forward solve's info


def test_shared_rodas_adjoint_is_bitwise_equal_to_the_model_kernel():
    """The discrete adjoint of Rodas (the second derivatives and time derivatives through the full model handle) on a
    right-hand side that depends on t."""
    model = oi.Model.from_equations({"x": "-k*x + a*sin(w*t)", "v": "x - c*v*v"}, params=["k", "a", "w", "c"])
    cm = _inputs.compiled_model(model)
    n, m = cm.n_states, cm.n_params
    t = np.linspace(0.5, 8.0, 9)
    g = np.random.default_rng(4).standard_normal((t.size, n))
    args = (0.0, t, np.array([1.0, 0.2]), np.array([0.8, 1.5, 2.0, 0.3]), g, 1e-8, 1e-10, 5000, 1,
            np.empty((t.size, n)), np.empty((5000, 5 + n)), np.empty(n + m),
            np.empty(cm.module.rodas_work_size(False)), np.zeros(6))
    (s1, a1), (s2, a2) = _both(cm, "rodas_adjoint_vjp", *args, full=True)
    assert s1 == s2 == Status.SUCCESS
    assert np.array_equal(a1[11], a2[11]) and np.all(np.isfinite(a1[11]))  # the gradient
    assert np.array_equal(a1[13], a2[13])  # the forward solve's info


@pytest.mark.parametrize("scheme", [0, 1])
def test_shared_collocation_is_bitwise_equal_to_the_model_kernel(scheme):
    entry = oi.zoo.get("fitzhugh_nagumo")
    cm = _inputs.compiled_model(entry.model)
    n = cm.n_states
    t = np.linspace(0.0, 5.0, 11)
    X = np.random.default_rng(2).standard_normal((t.size, n))
    pidx = np.arange(cm.n_params, dtype=np.int64)
    q = pidx.size
    args = (scheme, t, X, entry.params_array(), pidx, np.empty((t.size, n)), np.empty((t.size, n, n)),
            np.empty((t.size, n, q)), np.empty((t.size - 1) * n), np.empty((t.size - 1) * n * (2 * n + q)), True)
    (s1, a1), (s2, a2) = _both(cm, "coll_constraints", *args)
    assert s1 == s2 == 0
    assert np.array_equal(a1[8], a2[8]) and np.array_equal(a1[9], a2[9])


def test_shared_newton_kernels_are_bitwise_equal_to_the_model_kernels():
    entry = oi.zoo.get("lotka_volterra")
    cm = _inputs.compiled_model(entry.model)
    n, m = cm.n_states, cm.n_params
    rng = np.random.default_rng(3)
    t = np.linspace(0.0, 10.0, 25)
    X = 20.0 + 5.0 * rng.standard_normal((t.size, n))
    D = rng.standard_normal((t.size, n))
    D[3, 1] = np.nan  # a missing derivative: skipped in both
    p = entry.params_array()
    (_, r1), (_, r2) = _both(cm, "gm_residuals", t, X, D, p, np.empty((t.size, n)))
    assert np.array_equal(r1[4], r2[4], equal_nan=True)
    args = (t, X, D, p, np.ones(n), True, np.zeros((m, m)), np.zeros(m), np.zeros((m, m)), np.zeros(3))
    (_, a1), (_, a2) = _both(cm, "gm_normal_eq", *args)
    for i in (6, 7, 8, 9):
        assert np.array_equal(a1[i], a2[i])
    free = np.arange(m, dtype=np.int64)
    X = 20.0 + 5.0 * rng.standard_normal((t.size, n))
    hist, info = np.empty((41, 3)), np.zeros(3, dtype=np.int64)
    for backtrack in (50, 0):  # gradient descent; the stochastic gradient's full-data steps
        args = (t, X, D, np.zeros(m), free, np.ones(n), p * 0.8, 40, 1e-12, 1e-12, backtrack, hist, info)
        (c1, a1), (c2, a2) = _both(cm, "gm_descent", *args)
        assert c1 == c2 and a1[12][0] > 0
        for i in (6, 11, 12):  # theta, the history, the counts
            assert np.array_equal(a1[i], a2[i])
    w = 3
    a = rng.standard_normal((t.size - w + 1, w))
    c = rng.standard_normal((t.size - w + 1, w))
    rows = t.size - w + 1
    args = (t[:rows], X[:rows], D[:rows], p, free, a, c, X, np.zeros((w - 1, m, n)), np.zeros((n, m, m)))
    (g1, a1), (g2, a2) = _both(cm, "nc_obs_accumulate", *args, full=True)
    assert np.array_equal(g1, g2) and np.array_equal(a1[9], a2[9])


DDE_ZOO = ["logistic_delay", "delay_exponential_decay", "cheyne_stokes", "hiv"]
# Default suite: logistic_delay with its periodic history and with an affine one (its model kernel is
# compiled once for both: each further model costs 50-130 s on an empty cache) and hiv (three states, tau
# also outside the lag); delay_exponential_decay and cheyne_stokes (affine histories of their own)
# repeat those paths: -m slow.
DDE_CASES = split([(name, "own") for name in DDE_ZOO] + [("logistic_delay", "affine")],
                  default=[("logistic_delay", "own"), ("logistic_delay", "affine"), ("hiv", "own")])
OTHER_HISTORY = {"own": None, "affine": oi.History.affine([1.5], [4.0])}


def _dde_forward(entry, history="own"):
    """A states-only forward delay solve of ``entry`` (its dense output feeds the adjoints), with its own
    history or another one of ``OTHER_HISTORY``."""
    hist = OTHER_HISTORY[history] or entry.history
    s = oi.bind(oi.Problem(entry.model, entry.t, history=hist, t0=entry.t0),
                solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-8, atol=1e-10)))
    own = history == "own" and entry.history_param_names
    phi = entry.history_params_array() if own else np.array(s.history.values)
    _, _, status = s(entry.params_array(), phi)
    assert status == Status.SUCCESS
    return s, phi


@pytest.mark.parametrize("name, history", DDE_CASES)
def test_shared_dde_adjoint_vjp_is_bitwise_equal_to_the_model_kernel(name, history):
    entry = oi.zoo.get(name)
    s, phi = _dde_forward(entry, history)
    cm = s.compiled
    g = np.random.default_rng(4).standard_normal((s.t.size, cm.n_states))
    args = (s.t0, s.t, g, entry.params_array(), s._hkind, phi, s._hb, s._hc, s.buf, int(s.info[Info.N_STORED]), 2,
            np.empty(cm.n_params + phi.size))
    (s1, a1), (s2, a2) = _both(cm, "dde_adjoint_vjp", *args)
    assert s1 == s2 == Status.SUCCESS
    assert np.all(np.isfinite(a1[-1])) and np.array_equal(a1[-1], a2[-1])  # the gradient, bit for bit


@pytest.mark.parametrize("name, history", DDE_CASES)
def test_shared_dde_adjoint_gradient_is_bitwise_equal_to_the_model_kernel(name, history):
    entry = oi.zoo.get(name)
    s, phi = _dde_forward(entry, history)
    cm = s.compiled
    n, m, q = cm.n_states, cm.n_params, phi.size
    p = entry.params_array()
    t_end = float(s.t[-1])
    # a running loss against a smooth target: a cubic piece per output interval, scipy PPoly layout
    breaks = np.ascontiguousarray(s.t - s.t[0] + s.t0)
    coef = np.zeros((4, breaks.size - 1, n))
    coef[3] = 0.5
    coef[2] = 0.01
    nsub = 8
    tau_min = min(p[j] for j in cm.model.delay_indices)
    nnode = int(np.ceil((t_end - s.t0) / (tau_min / nsub) - 1e-9)) + 1
    args = (s.t0, t_end, p, s._hkind, phi, s._hb, s._hc, s.buf, int(s.info[Info.N_STORED]), breaks, coef,
            np.ones(n), nsub, False, np.empty(m + q + 1), np.zeros((nnode, n)), np.zeros((nnode, n)),
            np.empty(cm.module.dde_adjoint_work_size(q)))
    (s1, a1), (s2, a2) = _both(cm, "dde_adjoint_gradient", *args)
    assert s1 == s2 == Status.SUCCESS
    assert np.all(np.isfinite(a1[14])) and np.array_equal(a1[14], a2[14])  # gradient and loss
    assert np.array_equal(a1[15], a2[15]) and np.array_equal(a1[16], a2[16])  # the adjoint at the nodes
