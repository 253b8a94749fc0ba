"""Tiered compilation of the adaptive solvers: answer at once, specialise in the background.

A model's own solver kernels (``dopri5_solve``, ``dopri5_solve_sens``; ``dde_solve`` for a model
with delays) have the model inlined and its sizes as constants: the fastest warm calls, but
10-35 s of numba compilation the first time a model is solved. The *shared* module
(``pointer.py``, ``common.py``, ``rk.py``, ``dopri.py`` and ``dde.py``: the same source text) is compiled
once per machine and calls the model through C callbacks (``cfuncs.py``, ``dde_cfuncs.py``)
that compile in about a second.

On the first call of a :class:`~odeinfer.solve.Solver` (adaptive ``dopri5``) or
:class:`~odeinfer.solve.dde.DDESolver` whose model kernel is not compiled yet
(neither in this process nor on disk), the solver answers with the shared kernel and starts
one low-priority background process that compiles the model kernel into the disk cache. Once
that process is done, the next call switches to the model kernel. Both kernels run the same
arithmetic in the same order (no fast-math in any kernel), so results are bitwise identical
whichever one answered.

Set the environment variable ``ODEINFER_TIERED=0`` to compile the model kernel in-process on
the first call instead (no background process), or ``ODEINFER_TIERED=shared`` to keep the
shared kernel for models whose own kernel is not compiled yet, without compiling it (the test
suite does this: the shared kernel gives the same bits, so the suite does not compile every
model's solver twice).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

__all__ = ["Specialisation", "TieredKernel", "model_handle", "shared_module", "specialisation", "tiered_mode"]

#: The background process's command (it reads its job from stdin).
COMMAND = (sys.executable, "-m", "odeinfer.solve.shared")

_LOCK = threading.Lock()
_SHARED = []
_HANDLES: dict[str, tuple] = {}
_PENDING: dict[str, Specialisation] = {}


def tiered_mode() -> str:
    """``ODEINFER_TIERED``: ``"1"`` (default: shared kernel first, model kernel compiled in the
    background), ``"0"`` (model kernel, compiled in-process on first use) or ``"shared"`` (the
    shared kernel unless the model kernel is already compiled; never compiles one)."""
    value = os.environ.get("ODEINFER_TIERED", "1").strip().lower()
    if value not in ("0", "1", "shared"):
        from odeinfer.errors import InputError

        raise InputError(f"ODEINFER_TIERED: expected '1' (default), '0' or 'shared', got {value!r}; "
                         "fix or unset the environment variable")
    return value


def shared_module():
    """The model-independent module (``ptr_dopri5_solve``, ``ptr_dopri5_solve_sens``, ``ptr_dde_solve``)."""
    with _LOCK:
        if not _SHARED:
            from odeinfer.model.cache import build_module, kernel_sources
            from odeinfer.solve.kernels import SHARED_KERNEL_FILES
            # numba's IR inlining is what makes a model kernel slow to compile; here the sizes
            # are not constants anyway, so the shared module leaves inlining to LLVM, except for
            # the small Runge-Kutta helpers of rk.py that run several times a step (numba does
            # not let LLVM inline across its functions: as calls they cost ~60% on small models)
            text = "".join(kernel_sources((name,)) if name == "rk.py"
                           else kernel_sources((name,)).replace('inline="always"', 'inline="never"')
                           for name in SHARED_KERNEL_FILES)
            _SHARED.append(build_module(text, title="shared solver kernels", kernel_files=()))
        return _SHARED[0]


def model_handle(compiled) -> tuple:
    """The model handle of ``compiled``'s model (layouts in ``odeinfer/solve/kernels/pointer.py``):
    ``(n, m, f, jac_y, jac_p)``, or ``(n, m, d, delay_params, f, jac_y, jac_ylag, jac_p)`` for a
    model with delays; sizes, then C callback addresses."""
    import numpy as np

    model = compiled.model
    with _LOCK:
        hit = _HANDLES.get(model.fingerprint)
        if hit is None:
            from odeinfer.model.cache import build_module
            from odeinfer.solve.kernels import DDE_MODEL_CFUNC_FILES, MODEL_CFUNC_FILES

            title = f"model {model.name} C callbacks"
            if model.delays:
                from odeinfer.model.codegen_dde import dde_model_source

                mod = build_module(dde_model_source(model), title=title, kernel_files=DDE_MODEL_CFUNC_FILES)
                hit = (model.n_states, model.n_params, model.n_delays, np.array(model.delay_indices, dtype=np.int64),
                       mod.model_f_c.address, mod.model_jac_y_c.address, mod.model_jac_ylag_c.address,
                       mod.model_jac_p_c.address)
            else:
                from odeinfer.model.codegen import model_source

                mod = build_module(model_source(model.derivatives), title=title, kernel_files=MODEL_CFUNC_FILES)
                hit = (model.n_states, model.n_params, mod.model_f_c.address, mod.model_jac_y_c.address,
                       mod.model_jac_p_c.address)
            _HANDLES[model.fingerprint] = hit
        return hit


class TieredKernel:
    """Runs a model kernel (``kernel``, of ``compiled.module``), or the shared ``ptr_<kernel>``
    until the model's is compiled: the policy of the module docstring, decided on the first call
    (by ``ODEINFER_TIERED`` then). Called with the model kernel's arguments.

    Attributes
    ----------
    tier : str
        ``"pending"`` before the first call, then ``"shared"`` or ``"model"``.
    """

    __slots__ = ("_mh", "_shared", "_spec", "compiled", "kernel", "tier")

    def __init__(self, compiled, kernel):
        self.compiled, self.kernel = compiled, kernel
        self.tier = "pending"

    def __call__(self, *args):
        if self.tier == "model":
            return self.kernel(*args)
        if self.tier == "pending":
            self._decide(args)
            return self(*args)
        if self._spec.done.is_set():
            if self._spec.ready:
                self.tier = "model"
            else:
                warnings.warn(f"odeinfer: compiling {self.kernel.__name__} for model {self.compiled.model.name!r} "
                              f"in the background failed; the shared kernel goes on (same results, slower)."
                              f"\n{self._spec.error}", RuntimeWarning, stacklevel=3)
                self._spec = _NotStarted()
            return self(*args)
        return self._shared(self._mh, *args)

    def _decide(self, args):
        mode = tiered_mode()
        name = self.kernel.__name__
        spec = None if mode == "0" else specialisation(self.compiled.module, name, args, background=mode == "1")
        if spec is None:
            self.tier = "model"
            return
        self._shared = getattr(shared_module(), "ptr_" + name)
        self._mh = model_handle(self.compiled)
        self._spec = spec
        self.tier = "shared"


class Specialisation:
    """One background compilation of a model kernel for one signature.

    Attributes
    ----------
    marker : pathlib.Path
        Written by the background process once the machine code is in the disk cache.
    done : threading.Event
        Set when the background process has ended (successfully or not).
    error : str or None
        The end of the background process's error output if it failed.
    """

    def __init__(self, marker: Path, module_name: str, kernel: str, sig: tuple):
        self.marker = marker
        self.done = threading.Event()
        self.error = None
        payload = pickle.dumps((module_name, kernel, sig, str(marker)))
        self._proc = subprocess.Popen(list(COMMAND), stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self._proc.stdin.write(payload)
        self._proc.stdin.close()
        threading.Thread(target=self._wait, daemon=True, name=f"odeinfer-specialise-{kernel}").start()

    def _wait(self):
        with self._proc.stderr:
            err = self._proc.stderr.read()
        self._proc.wait()
        if self._proc.returncode != 0 or not self.marker.exists():
            self.error = err.decode("utf-8", "replace")[-2000:]
        self.done.set()

    @property
    def ready(self) -> bool:
        """True once the model kernel can be loaded from the disk cache."""
        return self.done.is_set() and self.error is None


def _marker(module, kernel, sig) -> Path:
    from odeinfer.model.cache import cache_dir

    digest = hashlib.sha256(f"{module.__name__} {kernel} {sig}".encode()).hexdigest()[:16]
    return cache_dir() / f"{module.__name__.rsplit('_', 1)[-1]}.{kernel}.{digest}.ready"


class _NotStarted:
    """Stands for a background compilation that ``ODEINFER_TIERED=shared`` does not start."""

    done = threading.Event()
    ready = False


def specialisation(module, kernel: str, args: tuple, background: bool = True):
    """``None`` when ``module.<kernel>`` can run ``args`` without compiling (compiled in this
    process, or its machine code is on disk); else the :class:`Specialisation` compiling it
    (with ``background=False``: an object whose ``done`` is never set)."""
    import numba

    dispatcher = getattr(module, kernel)
    sig = tuple(numba.typeof(a) for a in args)
    if sig in dispatcher.overloads:
        return None
    marker = _marker(module, kernel, sig)
    if marker.exists():
        return None
    if not background:
        return _NotStarted()
    with _LOCK:
        hit = _PENDING.get(str(marker))
        if hit is None:
            hit = _PENDING[str(marker)] = Specialisation(marker, module.__name__, kernel, sig)
        return hit


def _main():  # the background process: compile one kernel into the disk cache, then write the marker
    try:
        os.nice(10)
    except (AttributeError, OSError):
        pass
    module_name, kernel, sig, marker = pickle.loads(sys.stdin.buffer.read())
    marker = Path(marker)
    if not _claim(marker):  # another process compiles this kernel: wait for its marker
        return
    try:
        from odeinfer.model.cache import _PREFIX, cache_dir, load_module

        path = cache_dir() / f"{module_name[len(_PREFIX):]}.py"
        module = load_module(module_name, path.read_text(encoding="utf-8"))
        getattr(module, kernel).compile(sig)
        tmp = marker.with_suffix(".tmp")
        tmp.write_text("compiled\n", encoding="utf-8")
        os.replace(tmp, marker)
    finally:
        marker.with_suffix(".lock").unlink(missing_ok=True)


def _claim(marker: Path, stale: float = 1800.0) -> bool:
    """True when this process should compile: it created ``<marker>.lock`` (or removed a lock
    older than ``stale`` seconds, whose owner died). Else wait for the owner's marker and return
    False; if the owner fails, take over. So several processes solving the same new model (Dask
    or multiprocessing workers) compile it once."""
    lock = marker.with_suffix(".lock")
    while not marker.exists():
        try:
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            return True
        except FileExistsError:
            try:
                if time.time() - lock.stat().st_mtime > stale:
                    lock.unlink(missing_ok=True)
                    continue
            except FileNotFoundError:
                continue  # the owner has just finished: its marker, or our turn
        time.sleep(0.5)
    return False


if __name__ == "__main__":
    _main()
