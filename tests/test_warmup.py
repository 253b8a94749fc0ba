"""Warm-up of the shared solver kernels in background processes (odeinfer.solve.warmup)."""

import os
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.cli import main
from odeinfer.errors import InputError
from odeinfer.solve import shared, warmup


def test_unknown_kernels_and_bad_jobs_are_refused_before_any_process_starts():
    with pytest.raises(InputError, match=r"kernels: expected names among .*got \['dopri9_solve'\]"):
        oi.warmup(["dopri5_solve", "dopri9_solve"])
    for jobs in (0, -1, 1.5, True):
        with pytest.raises(InputError, match=r"jobs: expected a positive int"):
            oi.warmup("dopri5_solve", jobs=jobs)


def test_an_entry_is_compiled_after_its_kernel_in_the_same_process_and_the_graph_waits_for_neither():
    for jobs in (1, 2, 3):
        groups = warmup._groups(list(warmup.KERNELS), jobs)
        assert sorted(k for g in groups for k in g) == sorted(warmup.KERNELS) and len(groups) == jobs
        for g in groups:
            for k in g:
                if k.startswith("entry_"):
                    assert k[len("entry_"):] in g[:g.index(k)]
    assert warmup._groups(["entry_rodas_solve_sens"], 4) == [["entry_rodas_solve_sens"]]
    # the demo's four: the graph in a process of its own, not after the kernel and entry it calls
    assert warmup._groups(["dopri5_solve", "dopri5_solve_sens", "entry_dopri5_solve_sens", "nuts_graph"], 3) == [
        ["dopri5_solve"], ["dopri5_solve_sens", "entry_dopri5_solve_sens"], ["nuts_graph"]]
    assert warmup._groups(["nuts_graph", "dopri5_solve"], 2) == [["nuts_graph"], ["dopri5_solve"]]
    assert warmup._groups(["dopri5_solve", "rodas_solve"], 1) == [["dopri5_solve", "rodas_solve"]]
    assert warmup._groups([], 2) == []


def test_the_cli_refuses_a_negative_job_count(capsys):
    assert main(["warmup", "--jobs", "-2"]) == 1
    assert "--jobs: expected an integer >= 0" in capsys.readouterr().err


def test_a_warmed_up_kernel_is_not_compiled_again_and_its_callers_do_not_wait():
    # the child solves Lotka-Volterra with Dopri5 (states only): ptr_dopri5_solve in the disk cache
    oi.warmup("dopri5_solve")
    warmup.await_kernel("dopri5_solve")  # the suite's own warm-up (tests/conftest.py) may be compiling it
    marker, lock = warmup._paths("dopri5_solve")
    assert marker.exists() and not lock.exists()
    assert oi.warmup("dopri5_solve") == []  # warmed up already: no process
    start = time.monotonic()
    assert shared.shared_kernel("dopri5_solve") is shared.shared_module().ptr_dopri5_solve
    assert time.monotonic() - start < 30  # loads (or finds) the machine code; never waits for a lock


def test_the_trust_step_warms_up_once_and_its_marker_follows_its_source_file(monkeypatch):
    from odeinfer.estimators import _trust, _trust_step

    oi.warmup("trust_step")
    warmup.await_kernel("trust_step")  # the suite's own warm-up may be compiling it
    marker, lock = warmup._paths("trust_step")
    assert marker.exists() and not lock.exists()
    assert oi.warmup("trust_step") == []
    assert _trust._step_kernel() is _trust_step.propose_step
    # an edited source (numba compiles it again: its cache is keyed by the file's time stamp and size): a new marker
    st = os.stat(_trust_step.__file__)
    edited = types.SimpleNamespace(st_mtime_ns=st.st_mtime_ns + 10 ** 9, st_size=st.st_size)
    monkeypatch.setattr(warmup, "os", types.SimpleNamespace(stat=lambda path: edited))
    assert warmup._paths("trust_step")[0] != marker


def test_the_graph_s_warmup_marker_is_named_after_odeinfer_s_source(monkeypatch):
    """The graph's machine code lives in PyTensor's cache under a key holding odeinfer's source digest
    (odeinfer.bayes.numba_op): a marker from another source version must not say it is ready."""
    from odeinfer.model import cache

    before = warmup._paths("nuts_graph")
    monkeypatch.setattr(cache, "source_digest", lambda: "another-version")
    after = warmup._paths("nuts_graph")
    assert before[0] != after[0] and before[1] != after[1]


@pytest.fixture
def held_kernel():
    """The lock of the ``rodas_solve`` warm-up held by a live sleeping process (as a warm-up child
    holds it), without its marker; both restored afterwards."""
    warmup.await_kernel("rodas_solve")  # the suite's own warm-up (tests/conftest.py) may be compiling it
    marker, lock = warmup._paths("rodas_solve")
    saved = marker.read_bytes() if marker.exists() else None
    marker.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    lock.write_text(shared._identity(proc.pid), encoding="utf-8")
    yield proc, marker, lock
    proc.kill()
    proc.wait()
    lock.unlink(missing_ok=True)
    if saved is not None:
        marker.write_bytes(saved)


def _waiter():
    done = threading.Event()
    threading.Thread(target=lambda: (warmup.await_kernel("rodas_solve"), done.set()), daemon=True).start()
    return done


def test_a_caller_waits_for_the_warmup_process_until_its_marker_appears(held_kernel):
    proc, marker, lock = held_kernel
    assert oi.warmup("rodas_solve", wait=False) == []  # a live process compiles it: not started twice
    done = _waiter()
    assert not done.wait(1.0)  # the owner lives, no marker: waits
    marker.write_text("compiled\n", encoding="utf-8")
    assert done.wait(5.0)


def test_a_caller_stops_waiting_when_the_warmup_process_dies(held_kernel):
    proc, marker, lock = held_kernel
    done = _waiter()
    assert not done.wait(1.0)
    proc.kill()
    proc.wait()
    assert done.wait(5.0)  # the dead owner's kernel: the caller compiles it itself
    assert warmup._take("rodas_solve") and lock.read_text() == shared._identity()  # a dead owner's lock is taken over


def test_the_warmup_process_does_not_wait_for_its_own_lock(held_kernel):
    proc, marker, lock = held_kernel
    lock.write_text(shared._identity(), encoding="utf-8")  # this process holds it, as the child does
    start = time.monotonic()
    warmup.await_kernel("rodas_solve")
    assert time.monotonic() - start < 1.0


def test_the_demo_graph_loads_every_operation_from_the_warmup_s_pytensor_cache(tmp_path):
    """``nuts_graph`` compiled by a warm-up process into an empty PyTensor cache; then another process
    builds the demo's model (``odeinfer demo``: lynx-hare, log-normal noise, Stan's priors) as the seeded
    NUTS compiles it (``pm.NUTS(vars=...)`` in the seed's order, ``pm_model.value_vars``; the log density
    evaluated once before the chains fork): it writes nothing new to PyTensor's numba cache (every operation
    loads), i.e. the warm-up compiled what the demo's sampler needs."""
    env = {**os.environ, "PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'pytensor'}"}
    warm = "import odeinfer as oi; assert oi.warmup(['nuts_graph']) == ['nuts_graph']"
    subprocess.run([sys.executable, "-c", warm], env=env, check=True, timeout=900)
    cache = tmp_path / "pytensor" / "numba"
    before = sorted(p.name for p in cache.iterdir())
    assert before  # the warm-up wrote PyTensor's numba cache
    sample_like = (
        "import numpy as np, pymc as pm\n"
        "from odeinfer.bayes.build import build_model, lynx_hare_stan\n"
        "model, data, priors = lynx_hare_stan()\n"
        "pm_model = build_model(model, data, priors=priors, likelihood='lognormal')\n"
        "with pm_model:\n"
        "    step = pm.NUTS(vars=pm_model.value_vars, compile_kwargs={'mode': 'NUMBA'})\n"
        "q = pm_model.initial_point()\n"
        "f = step._logp_dlogp_func\n"
        "f.set_extra_values({})\n"
        "logp, grad = f(np.concatenate([np.ravel(q[v.name]) for v in step.vars]))\n"
        "ref = pm_model.compile_logp(mode='FAST_COMPILE')(q)\n"  # Python thunks: the Op's Python solve
        "print(repr(float(ref)), repr(float(logp)), np.isfinite(grad).all())\n")
    out = subprocess.run([sys.executable, "-c", sample_like], env=env, check=True, timeout=900, capture_output=True,
                         text=True).stdout.split()
    assert sorted(p.name for p in cache.iterdir()) == before
    # the warm-up compiled the graph with a placeholder for the solver's C entry (its call fails: NaN);
    # the loaded graph calls this process's own entry: a finite log density and gradient
    assert np.isfinite(float(out[-2])) and out[-1] == "True"
    assert abs(float(out[-2]) - float(out[-3])) <= 1e-8 * abs(float(out[-3]))


def test_under_placeholder_entries_a_shared_kernel_call_fails_cleanly_and_compiles_no_kernel():
    """What the graph's warm-up relies on, in a fresh process on the shared tier with a model no cache has
    seen (x' = -k x + c): numba code built under ``placeholder_entries`` calls a placeholder (status
    RAISED: the Op's NaN outputs), registers no entry, and never compiles the kernel; built afterwards,
    the same code solves (against the closed form x(t) = c/k + (x0 - c/k) exp(-k t))."""
    code = (
        "import time, numpy as np, odeinfer as oi\n"
        "from odeinfer.bayes.op import ODEProblem\n"
        "from odeinfer.solve import entry, shared\n"
        "c = 0.5 + (time.time_ns() % 10**9) * 1e-12\n"
        "@oi.model(states=['x'], params=['k'])\n"
        "def fresh(t, y, p):\n"
        "    return {'x': -p.k * y.x + c}\n"
        "t = np.linspace(0.0, 2.0, 5)\n"
        "p, x0 = np.array([1.5]), np.array([2.0])\n"
        "kernel = shared.shared_module().ptr_dopri5_solve_sens\n"
        "n = len(kernel.overloads)\n"
        "with entry.placeholder_entries():\n"
        "    y, s = ODEProblem(fresh, t).numba_solve(True)(p, x0)\n"
        "print(np.isnan(y).all() and np.isnan(s).all(), len(entry._ENTRIES), len(kernel.overloads) - n)\n"
        "y2, _ = ODEProblem(fresh, t).numba_solve(True)(p, x0)\n"
        "exact = c / 1.5 + (2.0 - c / 1.5) * np.exp(-1.5 * t)\n"
        "print(np.allclose(y2[:, 0], exact, rtol=1e-5, atol=1e-8), len(entry._ENTRIES))\n")
    env = {**os.environ, "ODEINFER_TIERED": "shared"}
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=900, capture_output=True,
                         text=True).stdout.split()
    assert out[-5:] == ["True", "0", "0", "True", "1"]
