"""Compile the shared solver kernels (and the C entries numba code calls them through) ahead of use,
in parallel background processes; likewise the NUTS log density of a representative model, whose
PyTensor operations then load from PyTensor's disk cache when any model's sampler compiles them.

The shared kernels (:mod:`odeinfer.solve.shared`) are compiled once per machine, 10-20 s each, on
their first use. :func:`warmup` compiles some of them in other processes, one per core, so that a
fresh machine's first fits do not wait for them one after another (``odeinfer warmup`` on the
command line; ``odeinfer demo`` starts the two Dopri5 kernels and the graph it needs while its first
estimators compile their own; ``odeinfer fit`` starts the likelihood fits' trust-region step,
``trust_step``, while it reads the problem; the test suite's main process starts all of them).

A kernel is compiled by example: the child process solves a zoo model with the kernel's solver and
gradient (``ODEINFER_TIERED=shared``: no model kernel compiles), so the machine code in numba's
disk cache has exactly the argument types every model's calls have. While a child compiles a
kernel, it holds ``<kernel>.warmup.lock`` in the cache directory (taken by the parent before the
child starts, so no caller can miss it); a process that needs the kernel meanwhile waits for the
child's marker instead of compiling the same kernel itself (:func:`await_kernel`, called by
:func:`odeinfer.solve.shared.shared_kernel`), and stops waiting at once if the child dies.

``nuts_graph`` is the log density and gradient of the lynx-hare model of ``odeinfer demo`` (Stan's
Lotka-Volterra case study: log-normal noise, the ODE Op on the shared Dopri5 kernel's C entry) in
PyTensor's NUMBA mode, compiled as NUTS compiles it: on an empty PyTensor cache that graph costs
15-25 s of compilation (most of it PyTensor's numba implementations of its operations, cached per
operation and input types, so that other models' graphs reuse them); :func:`odeinfer.bayes.sample`
waits for it as the solvers wait for their kernels. The graph calls the kernel through its C entry's
linker symbol, which the warm-up process registers with a placeholder
(:func:`odeinfer.solve.entry.placeholder_entries`): it compiles the graph in parallel with the kernel and
its entry instead of after them, and a process that loads the graph links it to its own entry.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["KERNELS", "await_kernel", "warmup"]

#: The kernels :func:`warmup` knows how to compile, with the solve that compiles each:
#: (zoo model, solver class, gradient class or None).
KERNELS = {
    "dopri5_solve": ("lotka_volterra", "Dopri5", None),
    "dopri5_solve_sens": ("lotka_volterra", "Dopri5", "Forward"),
    "rodas_solve": ("lotka_volterra", "Rodas", None),
    "rodas_solve_sens": ("lotka_volterra", "Rodas", "Forward"),
    "dopri5_adjoint_vjp": ("lotka_volterra", "Dopri5", "Adjoint"),
    "dde_solve": ("logistic_delay", "MethodOfSteps", None),
    # the C entries numba code (the PyMC Op's NUMBA mode) calls the shared kernel through
    # (odeinfer.solve.entry): compiled in the same process as their kernel, after it
    "entry_dopri5_solve_sens": ("lotka_volterra", "Dopri5", "entry"),
    "entry_rodas_solve_sens": ("lotka_volterra", "Rodas", "entry"),
    # the NUTS log density of the demo's lynx-hare model (PyTensor's NUMBA mode), calling the entry above
    # through its linker symbol: compiled with a placeholder there, so it waits for no kernel
    "nuts_graph": ("lotka_volterra", "Dopri5", "graph"),
    # the likelihood fits' trust-region step (odeinfer.estimators._trust_step, in numba's cache beside its source)
    "trust_step": (None, None, "trust"),
}

#: What a warm-up compiles after something else, in the same process (it links or calls it).
_AFTER = {"entry_dopri5_solve_sens": "dopri5_solve_sens", "entry_rodas_solve_sens": "rodas_solve_sens"}

_COMMAND = (sys.executable, "-c", "from odeinfer.solve.warmup import _main\n_main()\n")
_MAX_WAIT = 600.0  # seconds a caller waits for a live child (a kernel compiles in 10-60 s)
_CHILD = "ODEINFER_WARMUP_CHILD"


def _paths(kernel: str) -> tuple[Path, Path]:
    """(marker, lock) of ``kernel``'s warm-up: named after the shared module, so a new version of the
    kernels' sources starts afresh."""
    from odeinfer.model.cache import cache_dir
    from odeinfer.solve.shared import shared_module

    tag, where = shared_module().__name__.rsplit("_", 1)[-1], None
    if kernel == "nuts_graph":  # the graph lives in PyTensor's cache, keyed by odeinfer's source: named after both
        import pytensor

        from odeinfer.model.cache import source_digest

        where = f"{pytensor.__version__}|{pytensor.config.base_compiledir}|{source_digest()}"
    elif kernel == "trust_step":  # numba caches it beside its source, keyed by the file's time stamp and size
        from odeinfer.estimators import _trust_step

        st = os.stat(_trust_step.__file__)
        where = f"{_trust_step.__file__}|{st.st_mtime_ns}|{st.st_size}"
    if where is not None:
        tag += "-" + hashlib.sha256(where.encode()).hexdigest()[:12]
    base = cache_dir() / f"{tag}.ptr_{kernel}.warmup"
    return base.with_name(base.name + ".ready"), base.with_name(base.name + ".lock")


def _check(kernels) -> list[str]:
    from odeinfer.errors import InputError

    names = list(KERNELS) if kernels is None else [kernels] if isinstance(kernels, str) else list(kernels)
    unknown = [k for k in names if k not in KERNELS]
    if unknown:
        raise InputError(f"kernels: expected names among {sorted(KERNELS)}, got {unknown}; pass some of those "
                         "(or None for all)")
    return list(dict.fromkeys(names))


def warmup(kernels=None, *, wait: bool = True, jobs: int | None = None) -> list[str]:
    """Compile shared solver kernels into the disk cache in background processes.

    Parameters
    ----------
    kernels : str or list of str, optional
        Names among :data:`KERNELS` (default: all of them). Kernels already warmed up on this
        machine, or being compiled by another process's warm-up, are skipped.
    wait : bool
        Wait for the processes to end (default); else return at once: the kernels' first callers
        wait for them (:func:`await_kernel`).
    jobs : int, optional
        Processes (default: the number of cores); the kernels are dealt out among them.

    Returns
    -------
    list of str
        The kernels this call compiles (or has compiled).

    Raises
    ------
    InputError
        An unknown kernel name, or ``jobs`` not a positive int.
    """
    from odeinfer.errors import InputError
    from odeinfer.solve.shared import _identity

    names = _check(kernels)
    if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1):
        raise InputError(f"jobs: expected a positive int (processes), got {jobs!r}; pass e.g. jobs=2 or None")
    mine = [k for k in names if _take(k)]
    procs = []
    for group in _groups(mine, jobs or os.cpu_count() or 1):
        env = {**os.environ, "ODEINFER_TIERED": "shared", _CHILD: "1"}
        proc = subprocess.Popen(list(_COMMAND), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env=env)
        owner = _identity(proc.pid)
        for k in group:
            _write(_paths(k)[1], owner)  # the child's lock from now on: it ends with the child
        proc.stdin.write(pickle.dumps([(k, *map(str, _paths(k))) for k in group]))
        proc.stdin.close()
        procs.append(proc)
    if wait:
        for proc in procs:
            proc.wait()
    return mine


def _groups(names: list, jobs: int) -> list:
    """``names`` dealt out to at most ``jobs`` processes; what comes after another name (:data:`_AFTER`: a C
    entry links its kernel, the graph calls the entry) goes with it, after it, when both are asked for."""
    def chain(k):
        nxt = [e for e in names if _AFTER.get(e) == k]
        return [k] + [c for e in nxt for c in chain(e)]

    units = [chain(k) for k in names if _AFTER.get(k) not in names]
    n = max(1, min(len(units), jobs))
    return [[k for unit in units[i::n] for k in unit] for i in range(n)] if units else []


def await_kernel(kernel: str) -> None:
    """Return once no warm-up process is compiling ``kernel``: at once when none is (or when its
    name is not one of :data:`KERNELS`, or in a warm-up process: no waits between them), else when its
    marker appears, when it dies, or after 10 minutes."""
    if kernel not in KERNELS or os.environ.get(_CHILD) == "1":  # a warm-up process never waits for another
        return
    from odeinfer.solve.shared import _identity, _owner_alive

    marker, lock = _paths(kernel)
    me, start = _identity(), time.monotonic()
    while not marker.exists() and time.monotonic() - start < _MAX_WAIT:
        try:
            owner = lock.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        if owner == me or _owner_alive(owner) is False:  # the warm-up process itself, or a dead one
            return
        time.sleep(0.05)


def _take(kernel: str) -> bool:
    """Claim ``kernel``'s warm-up for this call: False when it is warmed up already or a live process
    holds its lock (a dead one's lock is taken over; :func:`odeinfer.solve.shared._claim`)."""
    from odeinfer.solve.shared import _claim

    return _claim(_paths(kernel)[0], wait=False)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _compile(kernel: str) -> None:
    """Run the solve that compiles ``kernel`` (see :data:`KERNELS`)."""
    import numpy as np

    import odeinfer as oi

    zoo, solver, gradient = KERNELS[kernel]
    if gradient == "graph":
        return _compile_graph()
    if gradient == "trust":  # one step on a 2-parameter quadratic, with the argument types of the fits' calls
        from odeinfer.estimators._trust_step import propose_step

        v = [np.zeros(2) for _ in range(4)]
        propose_step(np.zeros(2), np.ones(2), np.eye(2), -np.ones(2), np.ones(2), 0.5, 0.95, *v)
        return
    z = oi.zoo.get(zoo)
    t = np.linspace(0.0, 1.0, 3)
    if gradient == "entry":  # the shared tier's C entry, as the ODE Op's forward solve asks for it
        from odeinfer.solve import abi

        abi.njit_ode_solve(z.model.compile(), solver.lower(), True, 0.0, t, 1e-6, 1e-8, 100, False)
        return
    if solver == "MethodOfSteps":
        problem, solver = oi.Problem(z.model, t, history=z.history), oi.MethodOfSteps(oi.Dopri5())
    else:
        problem, solver = oi.Problem(z.model, t, x0=z.x0_array()), getattr(oi, solver)()
    if gradient == "Adjoint":
        g = np.ones((t.size, z.model.n_states))
        oi.bind(problem, solver=solver, gradient=oi.Adjoint())(z.params_array(), z.x0_array(), g)
    else:
        oi.solve(problem, z.params, solver=solver, gradient=None if gradient is None else getattr(oi, gradient)())


def _compile_graph() -> None:
    """The demo's NUTS log density and gradient (``nuts_graph``), compiled and called once as
    :func:`odeinfer.bayes.sample` compiles it (``logp_dlogp_function`` in NUMBA mode, raveled inputs),
    with a placeholder for the solver's C entry (the call returns NaN; nothing here compiles a kernel)."""
    from pymc.blocking import DictToArrayBijection

    from odeinfer.bayes.build import build_model, lynx_hare_stan
    from odeinfer.solve.entry import placeholder_entries

    model, data, priors = lynx_hare_stan()
    pm_model = build_model(model, data, priors=priors, likelihood="lognormal")
    with placeholder_entries():
        func = pm_model.logp_dlogp_function(ravel_inputs=True, mode="NUMBA")
        func.set_extra_values({})
        point = pm_model.initial_point()
        func(DictToArrayBijection.map({v.name: point[v.name] for v in pm_model.value_vars}).data)


def _main() -> None:  # the child: compile each kernel of its group, then write its marker
    from odeinfer.solve.shared import _identity, _remove_lock

    for kernel, marker, lock in pickle.loads(sys.stdin.buffer.read()):
        try:
            _compile(kernel)
            _write(Path(marker), "compiled\n")
        except Exception:  # noqa: BLE001 - no marker: the kernel's first caller compiles it and reports why
            pass
        finally:
            _remove_lock(Path(lock), _identity())
