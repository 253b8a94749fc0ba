"""Directional forward sensitivities (``oi.Forward(directions=k)``, kernels ``dopri5_solve_dir``,
``rodas_solve_dir`` and their shared-tier twins): ``S_W = d y / d(params, x0) @ W`` with
``W = [pdir; s0]``, integrated as ``S_W' = J_y S_W + J_p pdir``, ``S_W(t0) = s0``.

References, independent of the directional code: the full sensitivities of ``oi.Forward()``
multiplied by ``W``; central finite differences of the states along the directions (states-only
solves); with ``W = I`` the full kernels' bits."""

import pickle

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.errors import InputError
from odeinfer.solve import _inputs, shared
from odeinfer.solve.config import as_gradient
from odeinfer.solve.abi import Status

# a nonlinear model with explicit time dependence: J_p, its second derivatives d2f/dp dy (Rodas's
# jac_p_dir) and its time derivative (Rodas's jac_p_t) are all non-zero
NONLINEAR = dict(
    eqs={"a": "-k1*a*b + k3*c*(1 + sin(t)/2)", "b": "k1*a*b - k2*b", "c": "k2*b - k3*c*(1 + sin(t)/2)"},
    params=["k1", "k2", "k3"], name="dirsens_nonlinear", p=[1.3, 0.7, 0.4], x0=[1.0, 0.3, 0.1],
    t=np.linspace(0.5, 6.0, 8), x0_scale=[0.1, 0.1, 0.1])
# Robertson's stiff kinetics; Dormand-Prince only on the short start, before it turns stiff. b stays
# below 4e-5, so the initial-state directions of b and c are small: finite differences along them
# stay in the linear range
ROBERTSON = dict(
    eqs={"a": "-k1*a + k3*b*c", "b": "k1*a - k2*b*b - k3*b*c", "c": "k2*b*b"},
    params=["k1", "k2", "k3"], name="dirsens_robertson", p=[0.04, 3e7, 1e4], x0=[1.0, 0.0, 0.0],
    t=np.geomspace(1e-4, 1e3, 10), t_dopri5=np.geomspace(1e-4, 0.05, 6), x0_scale=[0.1, 1e-6, 1e-6])
TOL = dict(rtol=1e-10, atol=1e-12)
SOLVERS = {"dopri5": oi.Dopri5, "rodas": oi.Rodas, "auto": oi.Auto}


def _model(spec):
    return oi.Model.from_equations(spec["eqs"], params=spec["params"], name=spec["name"])


def _problem(spec, method):
    t = spec.get("t_dopri5", spec["t"]) if method == "dopri5" else spec["t"]
    return oi.Problem(_model(spec), t, t0=0.0)


def _directions(spec, k, seed=0):
    """Random directions, scaled like the parameters (log-space) and like the initial states."""
    rng = np.random.default_rng(seed)
    p = np.array(spec["p"])
    pdir = np.ascontiguousarray(p[:, None] * rng.standard_normal((p.size, k)))
    s0 = np.ascontiguousarray(np.array(spec["x0_scale"])[:, None] * rng.standard_normal((len(spec["x0"]), k)))
    return pdir, s0


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("method", ["dopri5", "rodas", "auto"])
@pytest.mark.parametrize("spec", [NONLINEAR, ROBERTSON], ids=["nonlinear", "robertson"])
def test_directional_sensitivities_are_the_full_ones_times_w(spec, method):
    prob = _problem(spec, method)
    p, x0 = np.array(spec["p"]), np.array(spec["x0"])
    pdir, s0 = _directions(spec, 2)
    W = np.vstack([pdir, s0])
    solver = SOLVERS[method](**TOL)
    for control in (True, False):
        full = oi.bind(prob, solver=solver, gradient=oi.Forward(error_control=control))
        y, S, status = full(p, x0)
        y, S = y.copy(), S.copy()
        assert status == Status.SUCCESS
        bound = oi.bind(prob, solver=solver, gradient=oi.Forward(error_control=control, directions=2))
        yd, Sd, status = bound(p, x0, pdir, s0)
        assert status == Status.SUCCESS
        assert Sd.shape == (prob.t.size, 3, 2)
        assert bound.directions == 2
        if control:
            # error control over other columns: other steps, agreement to the tolerance
            assert _rel(Sd, S @ W) < 1e-8
            assert _rel(yd, y) < 1e-8
        else:
            # error control on the states alone: the same steps, the same states
            assert np.array_equal(yd, y)
            assert _rel(Sd, S @ W) < 1e-12
        if method == "auto":
            assert bound.stiff == (spec is ROBERTSON) == full.stiff


@pytest.mark.parametrize("method", ["dopri5", "rodas"])
@pytest.mark.parametrize("spec", [NONLINEAR, ROBERTSON], ids=["nonlinear", "robertson"])
def test_directional_sensitivities_match_central_differences(spec, method):
    prob = _problem(spec, method)
    p, x0 = np.array(spec["p"]), np.array(spec["x0"])
    pdir, s0 = _directions(spec, 3, seed=1)
    bound = oi.bind(prob, solver=SOLVERS[method](**TOL), gradient=oi.Forward(directions=3))
    _, Sd, status = bound(p, x0, pdir, s0)
    assert status == Status.SUCCESS
    states = oi.bind(prob, solver=SOLVERS[method](rtol=1e-12, atol=1e-14))
    eps = 1e-4
    for j in range(3):
        plus = states(p + eps * pdir[:, j], x0 + eps * s0[:, j])[0].copy()
        minus = states(p - eps * pdir[:, j], x0 - eps * s0[:, j])[0].copy()
        fd = (plus - minus) / (2 * eps)
        assert _rel(Sd[:, :, j], fd) < 1e-6, j


def _kernel_args(cm, spec, method, pdir, s0):
    t = _problem(spec, method).t  # read-only, as the solvers pass it (another type to numba: another compilation)
    n, k = cm.n_states, pdir.shape[1]
    work = getattr(cm.module, f"{method}_work_size_dir")(k)
    return (0.0, t, np.array(spec["x0"], float), np.array(spec["p"], float), pdir, s0, True, 1e-9, 1e-11, 0.0,
            100_000, np.empty((t.size, n * (1 + k))), np.empty(work), np.zeros(6))


def _run(kernel, lead, args):
    copies = [a.copy() if isinstance(a, np.ndarray) and a.flags.writeable else a for a in args]
    return kernel(*lead, *copies), copies


def _identity_runs(method, model_tier):
    """Directional (W = I) then full solves of NONLINEAR on the shared tier and, with ``model_tier``,
    on the model's own kernels: ``[(status, argument copies), ...]``."""
    spec = NONLINEAR
    cm = _inputs.compiled_model(_model(spec))
    n, m = cm.n_states, cm.n_params
    eye = np.eye(n + m)
    args = _kernel_args(cm, spec, method, np.ascontiguousarray(eye[:m]), np.ascontiguousarray(eye[m:]))
    sens_args = args[:4] + args[6:]  # the full kernel has no pdir, s0
    module, lead = shared.shared_module(), (shared.model_handle(cm, full=method == "rodas"),)
    runs = [_run(getattr(module, f"ptr_{method}_solve_dir"), lead, args),
            _run(getattr(module, f"ptr_{method}_solve_sens"), lead, sens_args)]
    if model_tier:
        runs += [_run(getattr(cm.module, f"{method}_solve_dir"), (), args),
                 _run(getattr(cm.module, f"{method}_solve_sens"), (), sens_args)]
    return runs


def _differences(runs):
    """Indices of the runs that failed or whose outputs (z: bits; info: steps) differ from the first's."""
    return [i for i, (status, copies) in enumerate(runs)
            if status != Status.SUCCESS or not np.array_equal(copies[-3], runs[0][1][-3])
            or not np.array_equal(copies[-1], runs[0][1][-1])]


@pytest.mark.parametrize("method", ["dopri5", "rodas"])
def test_identity_directions_give_the_full_kernels_bits_on_the_shared_tier(method):
    # the default suite's tier (the model's own kernels: the slow test below); W = I gives the full bits
    assert _differences(_identity_runs(method, model_tier=False)) == []


@pytest.mark.slow  # compiles the model's own directional kernels (about a minute each on an empty cache)
@pytest.mark.parametrize("method", ["dopri5", "rodas"])
def test_identity_directions_give_the_full_kernels_bits_on_both_tiers(method):
    # the model's own kernels and the shared ones (C callbacks), full and directional with W = I
    assert _differences(_identity_runs(method, model_tier=True)) == []


@pytest.mark.slow  # compiles the model's own directional kernels
@pytest.mark.parametrize("method", ["dopri5", "rodas"])
def test_the_shared_directional_kernel_gives_the_model_kernels_bits(method):
    spec = ROBERTSON
    cm = _inputs.compiled_model(_model(spec))
    args = _kernel_args(cm, spec, method, *_directions(spec, 2, seed=2))
    (s1, a1), (s2, a2) = (_run(getattr(cm.module, f"{method}_solve_dir"), (), args),
                          _run(getattr(shared.shared_module(), f"ptr_{method}_solve_dir"),
                               (shared.model_handle(cm, full=method == "rodas"),), args))
    assert s1 == s2 == Status.SUCCESS
    assert np.array_equal(a1[-3], a2[-3])
    assert np.array_equal(a1[-1], a2[-1])


def test_wrong_direction_shapes_give_bad_input_status():
    # nothing is validated on the call path; the kernel checks the sizes, as for params and x0
    prob = _problem(NONLINEAR, "dopri5")
    bound = oi.bind(prob, solver=oi.Dopri5(), gradient=oi.Forward(directions=2))
    p, x0 = np.array(NONLINEAR["p"]), np.array(NONLINEAR["x0"])
    pdir, s0 = _directions(NONLINEAR, 2)
    assert bound(p, x0, pdir, s0)[2] == Status.SUCCESS
    assert bound(p, x0, np.zeros((3, 3)), np.zeros((3, 3)))[2] == Status.BAD_INPUT  # k differs from the bound 2
    assert bound(p, x0, np.zeros((2, 2)), s0)[2] == Status.BAD_INPUT  # pdir has a row per parameter
    assert bound(p, x0, pdir, np.zeros((2, 2)))[2] == Status.BAD_INPUT  # s0 has a row per state


def test_a_directional_solver_survives_pickling():
    prob = _problem(NONLINEAR, "rodas")
    bound = oi.bind(prob, solver=oi.Auto(**TOL), gradient=oi.Forward(directions=2))
    p, x0 = np.array(NONLINEAR["p"]), np.array(NONLINEAR["x0"])
    pdir, s0 = _directions(NONLINEAR, 2)
    S = bound(p, x0, pdir, s0)[1].copy()
    again = pickle.loads(pickle.dumps(bound))
    assert again.directions == 2
    assert np.array_equal(again(p, x0, pdir, s0)[1], S)


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "3"])
def test_directions_must_be_a_positive_integer(bad):
    with pytest.raises(InputError, match=r"Forward\(directions=\.\.\.\): expected a positive integer .* got "):
        oi.Forward(directions=bad)


def test_directions_are_refused_where_no_kernel_takes_them():
    prob = _problem(NONLINEAR, "dopri5")
    with pytest.raises(InputError, match=r"needs an adaptive solver, got Dopri5\(.*fixed_step=0.1.*pass solver="):
        oi.bind(prob, solver=oi.Dopri5(fixed_step=0.1), gradient=oi.Forward(directions=2))
    with pytest.raises(InputError, match=r"solve\(\) returns all sensitivity columns.*gradient=oi.Forward\(\)"):
        oi.solve(prob, NONLINEAR["p"], x0=NONLINEAR["x0"], gradient=oi.Forward(directions=2))
    # the callers that take full sensitivities (the Bayesian likelihood) refuse them with the fix
    with pytest.raises(InputError, match=r"asks for directional sensitivities.*pass gradient=oi.Forward\(\) here"):
        as_gradient(oi.Forward(directions=2))
    # an adjoint is one vector-Jacobian product: it takes no directions
    with pytest.raises(TypeError):
        oi.Adjoint(directions=2)


def test_directions_are_refused_for_a_delay_model():
    m = oi.Model.from_equations({"x": "-k*x + b*lag(x, tau)"}, params=["k", "b", "tau"], delays=["tau"],
                                name="dirsens_delay")
    prob = oi.Problem(m, [1.0, 2.0], history=[1.0])
    with pytest.raises(InputError, match=r"Forward\(directions=2\) is available for ODE models.*has delays; "
                                         r"pass gradient=oi.Forward\(\)"):
        oi.bind(prob, gradient=oi.Forward(directions=2))


def test_exclude_with_directions_only_lifts_the_switching_check():
    # a switching parameter held fixed: Forward(exclude=...) allows the gradient; with directions no
    # column belongs to a parameter, so none is set to NaN (the caller keeps pdir's row of it zero)
    m = oi.Model.from_equations({"x": "-k*x + u*heaviside(t - t_on)"}, params=["k", "u", "t_on"],
                                name="dirsens_switch")
    prob = oi.Problem(m, [0.5, 1.0, 2.0], t0=0.0)
    with pytest.raises(InputError, match=r"parameters \['t_on'\] move a jump"):
        oi.bind(prob, solver=oi.Dopri5(**TOL), gradient=oi.Forward(directions=1))
    bound = oi.bind(prob, solver=oi.Dopri5(**TOL), gradient=oi.Forward(exclude=["t_on"], directions=1))
    assert bound.sens_exclude == ()
    pdir = np.array([[1.0], [0.0], [0.0]])
    _, S, status = bound(np.array([0.5, 1.0, 0.7]), np.array([2.0]), pdir, np.zeros((1, 1)))
    assert status == Status.SUCCESS
    # d x / d k of x' = -k x (+ a constant input after t_on): before t_on, -t x0 exp(-k t)
    assert abs(S[0, 0, 0] - (-0.5 * 2.0 * np.exp(-0.25))) < 1e-8
    assert np.all(np.isfinite(S))
