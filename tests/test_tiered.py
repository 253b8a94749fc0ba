"""Tiered first solves (odeinfer.solve.shared): the shared Dormand-Prince kernel, called through a
model's C callbacks, answers the first solves while a background process compiles the model's
own kernel; the two give bitwise identical results.

References: the model's own kernel (for equality) and the closed-form solution of
x' = -k x + c, x(0) = x0: x(t) = c/k + (x0 - c/k) exp(-k t) (for accuracy).
"""

import signal
import sys
import time
import warnings

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.solve import shared
from odeinfer.solve.abi import Status
from representative import split

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


# Default suite: Lotka-Volterra states-only and with sensitivities (the two kernels; the case
# issue 13's cache history broke). The other cases (Lorenz: three states, chaotic) run the same
# kernel code and cost a model-kernel compilation each (30-70 s on an empty cache): -m slow.
@pytest.mark.parametrize("sens, name", split(
    [(sens, name) for name in ZOO for sens in (False, True)],
    default=[(False, "lotka_volterra"), (True, "lotka_volterra")]))
def test_shared_kernel_is_bitwise_equal_to_the_model_kernel(name, sens):
    entry = oi.zoo.get(name)
    cm = oi.solve._inputs.compiled_model(entry.model)
    (s1, z1, i1), (s2, z2, i2) = _run_both(cm, entry, sens)
    assert s1 == s2 == Status.SUCCESS
    assert np.array_equal(z1, z2)  # same arithmetic in the same order: not merely close
    assert np.array_equal(i1, i2)  # same steps, rejections and evaluations


DDE_ZOO = ["logistic_delay", "delay_exponential_decay", "cheyne_stokes", "enso", "hiv", "nicholson_blowflies"]


# Default suite: logistic_delay (periodic history, one state) and hiv (three states, tau also
# outside the lag), each with and without sensitivities (one kernel serves both); the other history
# kinds run on logistic_delay's model below, so that no further model kernel is compiled (each costs
# 70-210 s on an empty cache). The other zoo models repeat those paths: -m slow.
@pytest.mark.parametrize("sens, name", split(
    [(sens, name) for name in DDE_ZOO for sens in (False, True)],
    default=[(sens, name) for name in ("logistic_delay", "hiv") for sens in (False, True)]))
def test_shared_dde_kernel_is_bitwise_equal_to_the_model_kernel(name, sens):
    z = oi.zoo.get(name)
    model_run, shared_run = _dde_both_tiers(z.model, z.t, z.t0, z.history, z.params_array(),
                                            z.history_params_array() if z.history_param_names else None, sens)
    assert model_run[0] == shared_run[0] == Status.SUCCESS
    for a, b in zip(model_run[1:], shared_run[1:]):  # states, info, step record: bit for bit
        assert np.array_equal(a, b)


def _other_histories():
    """logistic_delay's model (tau = 1) with an affine and a data-driven (piecewise cubic) history."""
    return {"affine": oi.History.affine([1.5], [4.0]),
            "piecewise": oi.History.from_function(lambda s: [2.0 + 0.5 * np.sin(3.0 * s)], -3.0, 0.0, n_points=61)}


@pytest.mark.parametrize("sens", [False, True])
@pytest.mark.parametrize("kind", ["affine", "piecewise"])
def test_shared_dde_kernel_is_bitwise_equal_for_every_history_kind(kind, sens):
    z = oi.zoo.get("logistic_delay")
    hist = _other_histories()[kind]
    model_run, shared_run = _dde_both_tiers(z.model, z.t, z.t0, hist, z.params_array(),
                                            np.array(hist.values) if hist.n_params else None, sens)
    assert model_run[0] == shared_run[0] == Status.SUCCESS
    for a, b in zip(model_run[1:], shared_run[1:]):  # states, info, step record: bit for bit
        assert np.array_equal(a, b)


def _dde_both_tiers(model, t, t0, history, params, phi, sens):
    """``(status, z, info, step record)`` of the model's own delay kernel and of the shared one."""
    out = []
    for run in ("model", "shared"):
        s = oi.bind(oi.Problem(model, t, history=history, t0=t0),
                    solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-8, atol=1e-10)), gradient=oi.Forward() if sens else None)
        s.buf = np.empty((20_000, s.buf.shape[1]))  # room for every step: the kernels are called directly
        args = (s.t0, s.t, params, s._hkind, s._phi if phi is None else phi, s._hb, s._hc,
                s._k, True, s.rtol, s.atol, s.first_step, s.max_steps, s.z, s.work, s.buf, s.info)
        if run == "model":
            status = s.kernel(*args)
        else:
            status = shared.shared_module().ptr_dde_solve(shared.model_handle(s.compiled), *args)
        out.append((status, s.z.copy(), s.info.copy(), s.buf[: int(s.info[6])].copy()))
    return out


def test_model_handle_holds_sizes_and_callbacks():
    cm = oi.solve._inputs.compiled_model(oi.zoo.lotka_volterra().model)
    mh = shared.model_handle(cm)
    # Dormand-Prince's three callbacks; Rodas's five only in the full handle
    assert mh[:2] == (2, 4) and all(isinstance(a, int) and a != 0 for a in mh[2:5]) and mh[5:] == (0,) * 5
    assert shared.model_handle(cm) is mh  # made once per model
    full = shared.model_handle(cm, full=True)
    assert full[:2] == (2, 4) and all(isinstance(a, int) and a != 0 for a in full[2:])
    assert shared.model_handle(cm, full=True) is full


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


@pytest.mark.skipif(sys.platform == "win32", reason="the compile slot is an flock (POSIX)")
def test_first_solve_answers_from_the_shared_kernel_then_switches_to_the_model_kernel(monkeypatch):
    """... and the background compiler waits for the machine's one compile slot: while another process
    holds it (here this test, through the same lock), nothing compiles; once it is free, it does."""
    import fcntl
    import os

    monkeypatch.setenv("ODEINFER_TIERED", "1")
    model, c = _fresh_decay()
    t = np.linspace(0.0, 4.0, 9)
    p, x0 = np.array([0.7]), np.array([3.0])
    solver = oi.bind(oi.Problem(model, t), solver=oi.Dopri5(rtol=1e-10, atol=1e-12), gradient=oi.Forward())
    assert solver.tier == "pending"
    slot = os.open(shared.slot_path(), os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(slot, fcntl.LOCK_EX)  # a slot another background compiler holds
    try:
        y, sens, status = solver(p, x0)
        assert solver.kernel is not None
        assert status == Status.SUCCESS and solver.tier == "shared"
        first_y, first_sens = y.copy(), sens.copy()
        np.testing.assert_allclose(first_y[:, 0], _exact(t, 0.7, c, 3.0), rtol=1e-9)
        # d x / d x0 = exp(-k t) (closed form)
        np.testing.assert_allclose(first_sens[:, 0, 1], np.exp(-0.7 * t), rtol=1e-8)
        waiting = [s for s in shared._PENDING.values() if not s.done.is_set()]
        time.sleep(2.0)
        assert waiting and all(not s.done.is_set() and not s.marker.exists() for s in waiting)
        assert solver(p, x0)[2] == Status.SUCCESS and solver.tier == "shared"
    finally:
        os.close(slot)  # frees the slot
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


def test_a_runnable_decision_is_remembered_per_argument_layout(monkeypatch):
    """A solver made per call decides its tier without numba.typeof once the same kernel ran arguments of the
    same layout; another layout (Fortran order, a strided view, read-only, another dtype, an object numba
    types otherwise) is typed again."""
    import numba

    a = np.zeros((3, 2))
    base = shared._layout((1.0, 2, True, a, np.zeros(4)))
    for other in (np.asfortranarray(a), a[:, ::2], np.zeros((3, 2), np.float32), np.zeros(6)):
        assert shared._layout((1.0, 2, True, other, np.zeros(4))) != base
    ro = np.zeros((3, 2))
    ro.flags.writeable = False
    assert shared._layout((1.0, 2, True, ro, np.zeros(4))) != base
    assert shared._layout((1.0, 2.0, True, a, np.zeros(4))) != base  # int64 and float64 differ
    assert shared._layout(((1.0, 2.0),)) is None and shared._layout((object(),)) is None

    import types

    @numba.njit
    def kernel(x, y, n):
        return x[0] + y[0] + n

    kernel(np.ones(2), np.ones(2), 1)  # compiled in this process: the model kernel "runs these arguments"
    module = types.SimpleNamespace(__name__="m_layout_test", kernel=kernel)
    monkeypatch.setattr(shared, "_RUNNABLE", set())
    assert shared.specialisation(module, "kernel", (np.ones(2), np.ones(2), 1)) is None
    assert shared._RUNNABLE == {("m_layout_test", "kernel", shared._layout((np.ones(2), np.ones(2), 1)))}

    def typeof(*_):
        raise AssertionError("numba.typeof called")

    monkeypatch.setattr(numba, "typeof", typeof)
    assert shared.specialisation(module, "kernel", (np.zeros(2), np.ones(2), 5)) is None  # remembered
    with pytest.raises(AssertionError, match="typeof called"):  # another layout is typed again
        shared.specialisation(module, "kernel", (np.ones((2, 2))[:, 0], np.ones(2), 1))


def _runtime_warnings(calls):
    """The messages of the RuntimeWarnings that ``calls()`` emits, repeats included."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        calls()
    return [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]


def test_a_failed_background_compilation_warns_and_keeps_the_shared_kernel(monkeypatch):
    monkeypatch.setenv("ODEINFER_TIERED", "1")
    monkeypatch.setattr(shared, "COMMAND", (sys.executable, "-c", "import sys; sys.exit('no compiler today')"))
    model, c = _fresh_decay()
    t = np.linspace(0.0, 2.0, 5)
    solver = oi.bind(oi.Problem(model, t))
    out = []

    def calls():  # the process may fail before the first call returns: the warning comes at the first
        for _ in range(3):  # call that sees it, once
            out.append(solver(np.array([0.5]), np.array([1.0])))
            assert solver.tier == "shared" and out[-1][2] == Status.SUCCESS
            _wait_for_end("failure test")

    messages = _runtime_warnings(calls)
    assert len(messages) == 1 and "exited with status 1: no compiler today" in messages[0]
    np.testing.assert_allclose(out[-1][0][:, 0], _exact(t, 0.5, c, 1.0), rtol=1e-5)


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="no SIGKILL on this system")
def test_a_killed_background_compiler_is_reported_once_by_its_signal(monkeypatch):
    """``kill -9`` of the background compiler: one warning for all the solvers waiting on it, naming
    the signal, not the runpy warning that was the last text on its stderr."""
    monkeypatch.setenv("ODEINFER_TIERED", "1")
    killed = ("import os, signal, sys; sys.stderr.write(\"<frozen runpy>:128: RuntimeWarning: 'odeinfer.solve.shared' "
              "found in sys.modules after import of package 'odeinfer.solve'\\n\"); sys.stderr.flush(); "
              "os.kill(os.getpid(), signal.SIGKILL)")
    monkeypatch.setattr(shared, "COMMAND", (sys.executable, "-c", killed))
    model, _ = _fresh_decay()
    t = np.linspace(0.0, 2.0, 5)
    solvers = [oi.bind(oi.Problem(model, t), solver=oi.Dopri5(rtol=rtol)) for rtol in (1e-5, 1e-6, 1e-7, 1e-8, 1e-9)]

    def calls():
        for _ in range(3):
            for solver in solvers:  # one kernel and signature: one background process for the five
                assert solver(np.array([0.5]), np.array([1.0]))[2] == Status.SUCCESS
            _wait_for_end("kill test")

    messages = _runtime_warnings(calls)
    assert len(messages) == 1, messages
    assert "killed by signal SIGKILL" in messages[0] and "runpy" not in messages[0]


def test_the_background_command_reports_the_exception_not_python_noise():
    """The real command on a job it cannot read: its cause is the exception (``python -m`` of the
    module used to put a runpy warning on stderr)."""
    import subprocess

    res = subprocess.run(list(shared.COMMAND), input=b"", capture_output=True, check=False)
    err = res.stderr.decode()
    assert res.returncode == 1 and "Warning" not in err
    assert shared.failure_cause(res.returncode, err) == ("the background compiler exited with status 1: "
                                                         "EOFError: Ran out of input")


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


def test_numba_code_calls_the_shared_kernel_through_its_c_entry(monkeypatch):
    """What the numba Ops call on the shared tier (:func:`shared.jit_kernel`) holds a call to the kernel's
    C entry (a linker symbol, :mod:`odeinfer.solve.entry`), not the kernel: so the levels of a PyTensor
    graph above it do not optimise and compile the solver again. It gives the Python path's bits."""
    from numba import njit, types

    monkeypatch.setenv("ODEINFER_TIERED", "shared")
    eqs, params = _fresh_nonlinear()
    cm = oi.Model.from_equations(eqs, params=params).compile()
    f8, i8, b1 = types.float64, types.int64, types.boolean
    c1, c2, ro1 = types.Array(f8, 1, "C"), types.Array(f8, 2, "C"), types.Array(f8, 1, "C", readonly=True)
    callee = shared.jit_kernel(cm, "dopri5_solve_sens", (f8, ro1, c1, c1, b1, f8, f8, f8, i8, c2, c1, c1))
    t = np.linspace(0.0, 12.0, 25)
    t.flags.writeable = False

    @njit(fastmath=True)  # as PyTensor's NUMBA mode compiles the graph that calls it
    def graph(x0, p, z, work, info):
        return callee(0.0, t, x0, p, True, 1e-9, 1e-11, 0.0, np.int64(100_000), z, work, info)

    x0, p = np.array([1.0, 0.5]), np.array([1.1, 0.9, 0.2])
    z, work, info = np.empty((25, 12)), np.empty(10 * 12 + 4 + 6), np.zeros(6)
    assert graph(x0, p, z, work, info) == Status.SUCCESS
    ir = "".join(graph.inspect_llvm().values())
    assert "odeinfer_entry_" in ir and "_dopri5_run" not in ir
    assert not cm.module.dopri5_solve_sens.overloads  # the model's own kernel was not compiled
    z_ref, info_ref = np.empty((25, 12)), np.zeros(6)
    status = shared.shared_kernel("dopri5_solve_sens")(shared.model_handle(cm), 0.0, t, x0, p, True, 1e-9, 1e-11, 0.0,
                                                       100_000, z_ref, np.empty(work.size), info_ref)
    assert status == Status.SUCCESS and np.array_equal(z, z_ref) and np.array_equal(info, info_ref)


def test_a_bad_tiered_setting_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setenv("ODEINFER_TIERED", "sometimes")
    solver = oi.bind(oi.Problem(oi.zoo.lotka_volterra().model, [0.0, 1.0]))
    with pytest.raises(oi.errors.InputError, match="ODEINFER_TIERED.*'sometimes'.*unset"):
        solver(np.array([0.55, 0.028, 0.80, 0.024]), np.array([33.96, 5.93]))


def test_the_fixed_step_shared_kernel_is_bitwise_equal_to_the_model_kernel():
    """``dopri5_fixed`` (the model's kernel) and ``ptr_dopri5_fixed`` (through the C callbacks): the same
    bits, states alone and with sensitivities (one kernel serves both)."""
    entry = oi.zoo.lotka_volterra()
    cm = oi.solve._inputs.compiled_model(entry.model)
    n, m = cm.n_states, cm.n_params
    t, p, x0 = np.asarray(entry.t, float), entry.params_array(), entry.x0_array()
    for sens in (False, True):
        k = n + m if sens else 0
        out = []
        for kernel, lead in ((cm.module.dopri5_fixed, ()),
                             (shared.shared_module().ptr_dopri5_fixed, (shared.model_handle(cm),))):
            z, info = np.empty((t.size, n * (1 + k))), np.zeros(6)
            status = kernel(*lead, float(entry.t0), t, x0, p, sens, 0.01, z, np.empty(10 * n * (1 + k) + n * (n + m)),
                            info)
            out.append((status, z, info))
        (s1, z1, i1), (s2, z2, i2) = out
        assert s1 == s2 == Status.SUCCESS and np.array_equal(z1, z2) and np.array_equal(i1, i2)
        assert i1[1] >= 2000 and i1[2] == 0  # constant steps of 0.01 to t = 20, none rejected


def test_fixed_steps_are_tiered_and_the_switch_off_compiles_the_model_kernel(monkeypatch):
    model = oi.zoo.lotka_volterra().model
    monkeypatch.setenv("ODEINFER_TIERED", "1")
    # Rodas (tests/test_shared_tier.py) and the fixed-step convergence mode are tiered too
    assert oi.bind(oi.Problem(model, [0.0, 1.0]), solver=oi.Rodas()).tier == "pending"
    assert oi.bind(oi.Problem(model, [0.0, 1.0]), solver=oi.Dopri5(fixed_step=0.1)).tier == "pending"
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


def _fresh_delay_model():
    """x' = -a x(t - tau) + c, c unique to this call (a model no cache has seen)."""
    from odeinfer import math as om

    c = 0.5 + (time.time_ns() % 10**9) * 1e-12

    @oi.model(states=["x"], params=["a", "tau"], delays=["tau"])
    def fresh_delay_adjoint(t, y, p):
        return {"x": -p.a * om.lag(y.x, "tau") + c}

    return fresh_delay_adjoint, c


def test_dde_adjoints_answer_from_the_shared_kernels(monkeypatch):
    """A new delay model's adjoint VJP and integral-loss gradient run the shared ``ptr_dde_adjoint_*``
    kernels, nothing compiled for the model. Reference, with history h and T <= tau: x(t) = h + b t,
    b = c - a h, so dx(T)/d(a, tau, h) = (-h T, 0, 1 - a T) and, for L = int_0^T x^2 dt,
    dL/da = -2 h int_0^T t x dt, dL/dh = 2 int_0^T (1 - a t) x dt, dL/dtau = 0 (closed forms)."""
    from odeinfer.solve.dde_adjoint import dde_loss_gradient

    monkeypatch.setenv("ODEINFER_TIERED", "shared")
    model, c = _fresh_delay_model()
    a, tau, h, T = 2.0, 1.5, 1.0, 1.0
    t = np.linspace(0.0, T, 5)
    vjp = oi.bind(oi.Problem(model, t, history=h), gradient=oi.Adjoint())
    assert vjp.tier == "pending"
    g = np.zeros((t.size, 1))
    g[-1, 0] = 1.0
    grad, status = vjp(np.array([a, tau]), np.array([h]), g)
    assert status == Status.SUCCESS and vjp.tier == "shared"
    np.testing.assert_allclose(grad, [-h * T, 0.0, 1.0 - a * T], rtol=1e-9, atol=1e-12)
    out = dde_loss_gradient(model, [a, tau], h, lambda s: np.zeros(1), T)
    b = c - a * h
    loss = h * h * T + h * b * T**2 + b * b * T**3 / 3.0
    dl_da = -2.0 * h * (h * T**2 / 2.0 + b * T**3 / 3.0)
    dl_dh = 2.0 * (h * T + b * T**2 / 2.0 - a * (h * T**2 / 2.0 + b * T**3 / 3.0))
    np.testing.assert_allclose(out.loss, loss, rtol=1e-9)
    np.testing.assert_allclose(out.grad, [dl_da, 0.0, dl_dh], rtol=1e-9, atol=1e-12)
    module = vjp.compiled.module
    assert not module.dde_solve.overloads and not module.dde_adjoint_vjp.overloads
    assert not module.dde_adjoint_gradient.overloads  # nothing compiled for the model itself


@pytest.mark.slow
def test_model_kernel_bits_do_not_depend_on_what_compiled_before():
    """A fresh model compiled in a fresh process, Rodas (the stiff solver) first: its Dormand-Prince
    kernel still gives the shared kernel's bits (a fast-math Rodas used to change them). ``slow``: two model
    kernels compiled in a new process (100-150 s on an empty cache); the in-process fast-math case below stays in
    the default suite."""
    import os
    import subprocess
    import textwrap

    c = 1.0 + (time.time_ns() % 10**9) * 1e-12
    script = textwrap.dedent(f"""
        import numpy as np, odeinfer as oi
        from odeinfer.solve import shared
        m = oi.Model.from_equations({{"x": "-k*x*y + {c!r}", "y": "k*x - y*y"}}, params=["k"])
        t = np.linspace(0.0, 3.0, 7)
        t.flags.writeable = False  # as the solvers pass it: the shared kernel's cached signature
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


def _shared_and_model_bits(cm, t, x0, p, sens):
    """``(z, info)`` of the model kernel, then of the shared kernel (rtol 1e-9, atol 1e-11)."""
    n, m = cm.n_states, cm.n_params
    k = n + m if sens else 0
    out = []
    for kernel, lead in ((getattr(cm.module, "dopri5_solve_sens" if sens else "dopri5_solve"), ()),
                         (getattr(shared.shared_module(), "ptr_dopri5_solve_sens" if sens else "ptr_dopri5_solve"),
                          (shared.model_handle(cm),))):
        z, work, info = np.empty((t.size, n * (1 + k))), np.empty(10 * n * (1 + k) + n * n + n * m), np.zeros(6)
        flags = (True,) if sens else ()
        status = kernel(*lead, 0.0, t, x0, p, *flags, 1e-9, 1e-11, 0.0, 100_000, z, work, info)
        assert status == Status.SUCCESS
        out.append((z, info))
    return out


def _fresh_nonlinear():
    """Two states with products (whose rounding fast-math contraction changes), a constant unique to
    this call: a model no cache has seen."""
    c = 0.5 + (time.time_ns() % 10**9) * 1e-12
    return {"x": f"a*x - b*x*y + {c!r}", "y": "b*x*y - g*y*y - 0.3*y"}, ["a", "b", "g"]


def test_a_model_kernel_first_compiled_by_a_fast_math_caller_keeps_its_bits():
    """numba compiles a callee that does not set ``fastmath`` with the flags of the caller that first
    needs it, and PyTensor's NUMBA mode (the ODE Op) calls the model kernels from fast-math
    functions: the kernel must still give the shared kernel's bits. (In-process; the cross-process
    history of issue 13 is the ``slow`` test below.)"""
    from numba import njit

    eqs, params = _fresh_nonlinear()
    cm = oi.Model.from_equations(eqs, params=params).compile()
    kernel = cm.module.dopri5_solve

    @njit(fastmath=True)  # as PyTensor's NUMBA mode compiles the graph that calls the kernel
    def graph(t0, t, x0, p, rtol, atol, first_step, max_steps, z, work, info):
        return kernel(t0, t, x0, p, rtol, atol, first_step, max_steps, z, work, info)

    t, x0, p = np.linspace(0.0, 12.0, 25), np.array([1.0, 0.5]), np.array([1.1, 0.9, 0.2])
    t.flags.writeable = False  # as the solvers pass it: the shared kernel's cached signature
    z, work, info = np.empty((25, 2)), np.empty(10 * 2 + 4 + 6), np.zeros(6)
    assert graph(0.0, t, x0, p, 1e-9, 1e-11, 0.0, 100_000, z, work, info) == Status.SUCCESS
    (z1, i1), (z2, i2) = _shared_and_model_bits(cm, t, x0, p, sens=False)
    assert np.array_equal(z1, z) and np.array_equal(z1, z2), f"max difference {np.abs(z1 - z2).max():.3g}"
    assert np.array_equal(i1, i2)


@pytest.mark.slow
def test_kernels_first_compiled_under_pytensors_fast_math_keep_their_bits():
    """Issue 13's breaking history: ``odeinfer demo`` on a fresh PyTensor cache compiles the NUTS graph
    (NUMBA mode, whose functions are fast-math) and the graph calls the model's ``dopri5_solve_sens``.
    numba compiles a callee that does not set ``fastmath`` with its caller's flags, and stores that
    machine code on disk under the signature alone; so a later process (the test suite) loaded a
    fast-math model kernel (and fast-math ``model_f``, ``initial_step``, ... into every kernel it
    compiled itself) while the shared kernel had none. Here one process runs a fresh model's kernel
    from a PyTensor fast-math function, then this process compares both tiers on that cache."""
    import os
    import subprocess
    import textwrap

    eqs, params = _fresh_nonlinear()
    script = textwrap.dedent(f"""
        import numpy as np, odeinfer as oi
        from pytensor.link.numba.dispatch.basic import numba_njit  # PyTensor's NUMBA-mode decorator
        kernel = oi.Model.from_equations({eqs!r}, params={params!r}).compile().module.dopri5_solve_sens

        @numba_njit(final_function=True)
        def graph(t, x0, p, sens_err, z, work, info):
            return kernel(0.0, t, x0, p, sens_err, 1e-9, 1e-11, 0.0, 100_000, z, work, info)

        t, x0, p = np.linspace(0.0, 12.0, 25), np.array([1.0, 0.5]), np.array([1.1, 0.9, 0.2])
        print(graph(t, x0, p, True, np.empty((25, 12)), np.empty(10 * 12 + 4 + 6), np.zeros(6)))  # n 2, k 5
    """)
    res = subprocess.run([sys.executable, "-c", script], check=False, env=dict(os.environ), capture_output=True,
                         text=True)
    assert res.returncode == 0 and res.stdout.split() == ["0"], res.stderr[-3000:]
    cm = oi.Model.from_equations(eqs, params=params).compile()
    t, x0, p = np.linspace(0.0, 12.0, 25), np.array([1.0, 0.5]), np.array([1.1, 0.9, 0.2])
    for sens in (True, False):  # the kernel compiled by that process; one compiled here from its callees
        (z1, i1), (z2, i2) = _shared_and_model_bits(cm, t, x0, p, sens)
        assert np.array_equal(z1, z2), f"sens={sens}: max difference {np.abs(z1 - z2).max():.3g}"
        assert np.array_equal(i1, i2)


def _lock_owner(marker):
    """A process that takes ``marker``'s lock with :func:`shared._claim` and then sleeps."""
    import subprocess

    code = ("import sys, time; from pathlib import Path; from odeinfer.solve.shared import _claim; "
            "print(_claim(Path(sys.argv[1])), flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(marker)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "True"
    return proc


def test_a_lock_left_by_a_killed_compiler_is_taken_over_at_once(tmp_path):
    """``kill -9`` leaves the owner's lock behind: the next process takes it over at once, not after
    the 1,800 s stale limit (the dead owner is not even reaped yet: a zombie)."""
    marker = tmp_path / "m.dopri5_solve.abc.ready"
    lock = marker.with_suffix(".lock")
    owner = _lock_owner(marker)
    try:
        assert lock.exists() and shared._owner_alive(lock.read_text()) is True  # a live owner is waited for
        owner.kill()
        t0 = time.monotonic()
        assert shared._claim(marker)
        assert time.monotonic() - t0 < 5.0
        assert lock.read_text() == shared._identity()
    finally:
        owner.kill()
        owner.wait()
        owner.stdout.close()


@pytest.mark.skipif(shared._identity().endswith(" -"), reason="no /proc: process start times unknown")
def test_a_lock_of_a_reused_pid_or_an_earlier_boot_is_taken_over(tmp_path):
    marker = tmp_path / "m.dopri5_solve.abc.ready"
    lock = marker.with_suffix(".lock")
    host, boot, pid, start = shared._identity().split()
    assert shared._owner_alive(f"{host} {boot} {pid} {start}") is True  # this process
    for dead in (f"{host} {boot} {pid} {int(start) + 1}",  # this PID, but another process's start time
                 f"{host} 00000000-0000-0000-0000-000000000000 {pid} {start}"):  # written before a reboot
        assert shared._owner_alive(dead) is False
        lock.write_text(dead)
        t0 = time.monotonic()
        assert shared._claim(marker, stale=1e9) and time.monotonic() - t0 < 1.0
        lock.unlink()
    # another host sharing the cache directory: not known here, so only the stale limit frees it
    assert shared._owner_alive(f"{host}.elsewhere {boot} {pid} {start}") is None
    assert shared._owner_alive("") is None


def test_a_shared_kernel_is_compiled_under_a_lock_that_other_processes_wait_for(tmp_path, monkeypatch):
    """``compile_once``: while another process holds the kernel's compile lock, the caller waits; once it
    has compiled, a second call finds the signature compiled and returns at once."""
    import fcntl
    import os
    import threading

    from numba import njit, types

    monkeypatch.setenv("ODEINFER_CACHE_DIR", str(tmp_path))

    @njit
    def kernel(a, b):
        return a + b

    lock = tmp_path / f"{kernel.py_func.__module__.rsplit('_', 1)[-1]}.{kernel.py_func.__name__}.compile.lock"
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another process compiling it
    f8, i8 = (types.float64,) * 2, (types.int64,) * 2
    done = threading.Event()
    threading.Thread(target=lambda: (shared.compile_once(kernel, f8), done.set()), daemon=True).start()
    assert not done.wait(1.0) and not kernel.overloads  # waits for the lock
    os.close(fd)
    assert done.wait(60.0) and list(kernel.overloads) == [f8]
    shared.compile_once(kernel, f8)  # compiled: nothing to do
    shared.compile_once(kernel, i8)  # other types: a second version
    assert list(kernel.overloads) == [f8, i8]
