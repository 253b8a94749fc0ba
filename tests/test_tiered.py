"""Tiered first solves (odeinfer.solve.shared): the shared Dormand-Prince kernel, called through a
model's C callbacks, answers the first solves while a background process compiles the model's
own kernel; the two give bitwise identical results.

References: the model's own kernel (for equality) and the closed-form solution of
x' = -k x + c, x(0) = x0: x(t) = c/k + (x0 - c/k) exp(-k t) (for accuracy).
"""

import sys
import time

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.solve import shared
from odeinfer.solve.status import Status

ZOO = ["lotka_volterra", "fitzhugh_nagumo", "lorenz", "population", "sir", "alpha_pinene", "activator_inhibitor"]


def _run_both(cm, entry, sens):
    n, m = cm.n_states, cm.n_params
    k = n + m if sens else 0
    t = np.asarray(entry.t, float)
    p, x0 = entry.params_array(), entry.x0_array()
    out = []
    for kernel, lead in ((getattr(cm.module, "dopri5_solve_sens" if sens else "dopri5_solve"), ()),
                         (getattr(shared.shared_module(), "ptr_dopri5_solve_sens" if sens else "ptr_dopri5_solve"),
                          (shared.model_handle(cm),))):
        z = np.empty((t.size, n * (1 + k)))
        work = np.empty(10 * n * (1 + k) + n * n + n * m)
        info = np.zeros(6)
        flags = (True,) if sens else ()
        status = kernel(*lead, float(entry.t0), t, x0, p, *flags, 1e-8, 1e-10, 0.0, 100_000, z, work, info)
        out.append((status, z, info))
    return out


@pytest.mark.parametrize("name", ZOO)
@pytest.mark.parametrize("sens", [False, True])
def test_shared_kernel_is_bitwise_equal_to_the_model_kernel(name, sens):
    entry = oi.zoo.get(name)
    cm = oi.solve._inputs.compiled_model(entry.model)
    (s1, z1, i1), (s2, z2, i2) = _run_both(cm, entry, sens)
    assert s1 == s2 == Status.SUCCESS
    assert np.array_equal(z1, z2)  # same arithmetic in the same order: not merely close
    assert np.array_equal(i1, i2)  # same steps, rejections and evaluations


DDE_ZOO = ["logistic_delay", "delay_exponential_decay", "cheyne_stokes", "enso", "hiv", "nicholson_blowflies"]


@pytest.mark.parametrize("name", DDE_ZOO)
@pytest.mark.parametrize("sens", [False, True])
def test_shared_dde_kernel_is_bitwise_equal_to_the_model_kernel(name, sens):
    z = oi.zoo.get(name)
    phi = z.history_params_array() if z.history_param_names else None
    out = []
    for run in ("model", "shared"):
        s = oi.bind(oi.Problem(z.model, z.t, history=z.history, t0=z.t0),
                    solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-8, atol=1e-10)), gradient=oi.Forward() if sens else None)
        s.buf = np.empty((20_000, s.buf.shape[1]))  # room for every step: the kernels are called directly
        args = (s.t0, s.t, z.params_array(), s._hkind, s.history.values if phi is None else phi, s._hb, s._hc,
                s._k, True, s.rtol, s.atol, s.first_step, s.max_steps, s.z, s.work, s.buf, s.info)
        if run == "model":
            status = s.kernel(*args)
        else:
            status = shared.shared_module().ptr_dde_solve(shared.model_handle(s.compiled), *args)
        out.append((status, s.z.copy(), s.info.copy(), s.buf[: int(s.info[6])].copy()))
    (s1, z1, i1, b1), (s2, z2, i2, b2) = out
    assert s1 == s2 == Status.SUCCESS
    assert np.array_equal(z1, z2) and np.array_equal(i1, i2) and np.array_equal(b1, b2)


def test_model_handle_holds_sizes_and_callbacks():
    cm = oi.solve._inputs.compiled_model(oi.zoo.lotka_volterra().model)
    mh = shared.model_handle(cm)
    assert mh[:2] == (2, 4) and all(isinstance(a, int) and a != 0 for a in mh[2:])
    assert shared.model_handle(cm) is mh  # made once per model


def _fresh_decay():
    """x' = -k x + c with a constant unique to this call: a model no cache has seen."""
    c = 1.0 + (time.time_ns() % 10**9) * 1e-12
    model = oi.Model.from_equations({"x": f"-k*x + {c!r}"}, params=["k"], name="fresh_decay")
    return model, c


def _exact(t, k, c, x0):
    return c / k + (x0 - c / k) * np.exp(-k * t)


def _wait_for_end(spec_owner, timeout=600.0):
    t0 = time.monotonic()
    pending = list(shared._PENDING.values())
    while time.monotonic() - t0 < timeout:
        if all(p.done.is_set() for p in pending):
            return
        time.sleep(0.2)
    pytest.fail(f"background compilation still running after {timeout} s ({spec_owner})")


def test_first_solve_answers_from_the_shared_kernel_then_switches_to_the_model_kernel(monkeypatch):
    monkeypatch.setenv("ODEINFER_TIERED", "1")
    model, c = _fresh_decay()
    t = np.linspace(0.0, 4.0, 9)
    p, x0 = np.array([0.7]), np.array([3.0])
    solver = oi.bind(oi.Problem(model, t), solver=oi.Dopri5(rtol=1e-10, atol=1e-12), gradient=oi.Forward())
    assert solver.tier == "pending"
    y, sens, status = solver(p, x0)
    assert solver.kernel is not None
    assert status == Status.SUCCESS and solver.tier == "shared"
    first_y, first_sens = y.copy(), sens.copy()
    np.testing.assert_allclose(first_y[:, 0], _exact(t, 0.7, c, 3.0), rtol=1e-9)
    # d x / d x0 = exp(-k t) (closed form)
    np.testing.assert_allclose(first_sens[:, 0, 1], np.exp(-0.7 * t), rtol=1e-8)
    _wait_for_end("first solve test")
    y, sens, status = solver(p, x0)
    assert solver.tier == "model" and status == Status.SUCCESS
    assert np.array_equal(y, first_y) and np.array_equal(sens, first_sens)
    # a new solver for the same model and options finds the compiled kernel at once
    again = oi.bind(oi.Problem(model, t), solver=oi.Dopri5(rtol=1e-10, atol=1e-12), gradient=oi.Forward())
    again(p, x0)
    assert again.tier == "model"
    # and so does oi.solve (through oi.bind)
    sol = oi.solve(oi.Problem(model, t, x0=x0), p, solver=oi.Dopri5(rtol=1e-10, atol=1e-12), gradient=oi.Forward())
    assert np.array_equal(sol.y, first_y) and np.array_equal(sol.sens, first_sens)


def test_a_failed_background_compilation_warns_and_keeps_the_shared_kernel(monkeypatch):
    monkeypatch.setenv("ODEINFER_TIERED", "1")
    monkeypatch.setattr(shared, "COMMAND", (sys.executable, "-c", "import sys; sys.exit('no compiler today')"))
    model, c = _fresh_decay()
    t = np.linspace(0.0, 2.0, 5)
    solver = oi.bind(oi.Problem(model, t))
    # the process may fail before the first call returns: the warning comes at the first call
    # that sees it, once
    with pytest.warns(RuntimeWarning, match="no compiler today"):
        for _ in range(2):
            y, _, status = solver(np.array([0.5]), np.array([1.0]))
            assert solver.tier == "shared" and status == Status.SUCCESS
            _wait_for_end("failure test")
    np.testing.assert_allclose(y[:, 0], _exact(t, 0.5, c, 1.0), rtol=1e-5)


def test_shared_mode_never_compiles_the_model_kernel(monkeypatch):
    monkeypatch.setenv("ODEINFER_TIERED", "shared")
    model, c = _fresh_decay()
    t = np.linspace(0.0, 1.0, 3)
    solver = oi.bind(oi.Problem(model, t))
    n_pending = len(shared._PENDING)
    for _ in range(3):
        y, _, status = solver(np.array([0.5]), np.array([1.0]))
        assert solver.tier == "shared" and status == Status.SUCCESS
    assert len(shared._PENDING) == n_pending  # no background process started
    assert not solver.kernel.overloads  # and nothing compiled in-process
    np.testing.assert_allclose(y[:, 0], _exact(t, 0.5, c, 1.0), rtol=1e-5)


def test_a_bad_tiered_setting_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setenv("ODEINFER_TIERED", "sometimes")
    solver = oi.bind(oi.Problem(oi.zoo.lotka_volterra().model, [0.0, 1.0]))
    with pytest.raises(oi.errors.InputError, match="ODEINFER_TIERED.*'sometimes'.*unset"):
        solver(np.array([0.55, 0.028, 0.80, 0.024]), np.array([33.96, 5.93]))


def test_rodas_and_the_switch_off_compile_the_model_kernel(monkeypatch):
    model = oi.zoo.lotka_volterra().model
    monkeypatch.setenv("ODEINFER_TIERED", "1")
    assert oi.bind(oi.Problem(model, [0.0, 1.0]), solver=oi.Rodas()).tier == "model"
    monkeypatch.setenv("ODEINFER_TIERED", "0")
    solver = oi.bind(oi.Problem(model, [0.0, 1.0]))
    solver(np.array([0.55, 0.028, 0.80, 0.024]), np.array([33.96, 5.93]))
    assert shared.tiered_mode() == "0" and solver.tier == "model"
    monkeypatch.delenv("ODEINFER_TIERED")
    assert shared.tiered_mode() == "1"


def test_one_process_compiles_a_kernel_others_wait_for_its_marker(tmp_path):
    import os
    import threading

    marker = tmp_path / "m.dopri5_solve.abc.ready"
    lock = tmp_path / "m.dopri5_solve.abc.lock"
    assert shared._claim(marker) and lock.exists()  # first comer compiles
    # a second process waits while the lock is held, and returns False once the marker is written
    threading.Timer(0.6, lambda: (marker.write_text("compiled\n"), lock.unlink())).start()
    assert shared._claim(marker) is False
    # the owner failed (lock gone, no marker): the waiter takes over
    marker.unlink()
    lock.write_text("")
    threading.Timer(0.6, lock.unlink).start()
    assert shared._claim(marker) and lock.exists()
    # a lock left by a process that died long ago is taken over at once
    os.utime(lock, (0, 0))
    assert shared._claim(marker, stale=60.0) and lock.exists()


def test_dde_solver_answers_from_the_shared_kernel(monkeypatch):
    """x' = -a x(t - tau) + c with history 1: x(t) = 1 + (c - a) t on [0, tau] (closed form)."""
    from odeinfer import math as om

    monkeypatch.setenv("ODEINFER_TIERED", "shared")
    c = 0.5 + (time.time_ns() % 10**9) * 1e-12  # a model no cache has seen

    @oi.model(states=["x"], params=["a", "tau"], delays=["tau"])
    def fresh_delay(t, y, p):
        return {"x": -p.a * om.lag(y.x, "tau") + c}

    t = np.linspace(0.0, 1.0, 5)
    solver = oi.bind(oi.Problem(fresh_delay, t, history=1.0), gradient=oi.Forward())
    assert solver.tier == "pending"
    y, sens, status = solver(np.array([2.0, 1.5]), np.array([1.0]))
    assert status == Status.SUCCESS and solver.tier == "shared"
    assert not solver.kernel.overloads  # nothing compiled for the model itself
    np.testing.assert_allclose(y[:, 0], 1.0 + (c - 2.0) * t, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sens[:, 0, 0], -t, atol=1e-12)  # d x / d a = -t


def test_model_kernel_bits_do_not_depend_on_what_compiled_before():
    """A fresh model compiled in a fresh process, Rodas (the stiff solver) first: its Dormand-Prince
    kernel still gives the shared kernel's bits (a fast-math Rodas used to change them)."""
    import os
    import subprocess
    import textwrap

    c = 1.0 + (time.time_ns() % 10**9) * 1e-12
    script = textwrap.dedent(f"""
        import numpy as np, odeinfer as oi
        from odeinfer.solve import shared
        m = oi.Model.from_equations({{"x": "-k*x*y + {c!r}", "y": "k*x - y*y"}}, params=["k"])
        t = np.linspace(0.0, 3.0, 7)
        oi.solve(oi.Problem(m, t, x0=[1.0, 0.5]), [0.8], solver=oi.Rodas(), gradient=oi.Forward())
        cm = m.compile()
        out = []
        for kernel, lead in ((cm.module.dopri5_solve_sens, ()),
                             (shared.shared_module().ptr_dopri5_solve_sens, (shared.model_handle(cm),))):
            z, work, info = np.empty((7, 8)), np.empty(200), np.zeros(6)  # n = 2, k = 3 columns
            status = kernel(*lead, 0.0, t, np.array([1.0, 0.5]), np.array([0.8]), True, 1e-9, 1e-11, 0.0, 10**5,
                            z, work, info)
            out.append(z)
        print(np.array_equal(out[0], out[1]), status == 0)
    """)
    env = dict(os.environ, ODEINFER_TIERED="0")
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert res.stdout.split() == ["True", "True"]
