"""Tiered compilation of the solvers: answer at once, specialise in the background.

A model's own solver kernels (``dopri5_solve``, ``dopri5_solve_sens``, ``dopri5_solve_dir``, ``dopri5_fixed``,
``rodas_solve``, ``rodas_solve_sens``, ``rodas_solve_dir``, ``dopri5_adjoint_vjp``; ``dde_solve``,
``dde_adjoint_vjp`` and ``dde_adjoint_gradient`` for a model with delays; the estimators' kernels)
have the model inlined and its sizes as constants: the fastest warm calls, but 10-35 s of numba compilation the first time a model is solved. The *shared* module
(``pointer.py``, ``common.py``, ``rk.py``, ``linalg.py``, ``dopri.py``, ``adjoint.py``, ``rodas.py``,
``dde.py`` and ``dde_adjoint.py``, and the estimators' ``collocation.py``, ``residuals.py``,
``noise_cov.py``: the same source text) is compiled once per machine and calls the model through C callbacks with the layouts of
``cfuncs.py`` (plus ``cfuncs_rodas.py`` for the kernels that need time and second derivatives;
``dde_cfuncs.py``), lowered straight to LLVM IR by :mod:`odeinfer.model.native` in milliseconds
(numba's bits); numba compiles them (about a second each) only for a source outside that subset.

On the first call of a :class:`~odeinfer.solve.Solver` (``Dopri5``, adaptive or fixed-step, or ``Rodas``) or
:class:`~odeinfer.solve.dde.DDESolver` whose model kernel is not compiled yet
(neither in this process nor on disk), the solver answers with the shared kernel and starts
one low-priority background process that compiles the model kernel into the disk cache. Once
that process is done, the next call switches to the model kernel; if it fails (or is killed),
the first call that sees it warns once with the cause and the shared kernel goes on. Processes
that need the same kernel compile it once (a lock file in the cache directory; a dead owner's
lock is taken over at once), and background compilers run one at a time per cache directory
(:data:`SLOT_ENV`): the others wait in a bare interpreter. The numba code of the PyTensor Ops
(:mod:`odeinfer.bayes.numba_op`) picks its callee by the same policy when a graph is compiled
(:func:`jit_kernel`); the model handle it passes the shared kernel is read through linker
symbols (:func:`linked_handle`), so PyTensor can cache that graph on disk for other processes.

Both kernels run the same arithmetic in the same order, so results are bitwise identical
whichever one answered, whatever compiled them first and in whichever process: every kernel,
model function and callback sets ``fastmath=False`` (left unset, numba compiles a function with
the flags of the caller that first needs it, and PyTensor's NUMBA mode calls the model kernels
from fast-math functions; see the rules in :mod:`odeinfer.solve.kernels`).

Set the environment variable ``ODEINFER_TIERED=0`` to compile the model kernel in-process on
the first call instead (no background process), or ``ODEINFER_TIERED=shared`` to keep the
shared kernel for models whose own kernel is not compiled yet, without compiling it (the test
suite does this: the shared kernel gives the same bits, so the suite does not compile every
model's solver twice).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import re
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np

__all__ = ["Specialisation", "TieredKernel", "compile_lock", "compile_once", "jit_kernel", "linked_handle",
           "model_handle", "recorded_tiers", "shared_kernel", "shared_module", "specialisation", "tiered_mode"]

#: Environment variable naming the file whose exclusive lock is the one background-compile slot of a
#: cache directory: background compilers run one at a time, each waiting for the slot
#: in a bare interpreter (a few MB) before it imports anything. Without it, a multistart over many
#: new models started dozens of compilers at once (about 0.4 GB each).
SLOT_ENV = "ODEINFER_COMPILE_SLOT"

#: The background process's command (it reads its job from stdin). Not ``-m odeinfer.solve.shared``:
#: runpy warns on stderr when a package's ``__init__`` has imported the module it runs.
COMMAND = (sys.executable, "-c",
           "import os\n"
           "try:\n"
           "    import fcntl\n"
           f"    fcntl.flock(os.open(os.environ['{SLOT_ENV}'], os.O_CREAT | os.O_RDWR, 0o600), fcntl.LOCK_EX)\n"
           "except (ImportError, KeyError, OSError):\n"
           "    pass\n"
           "from odeinfer.solve.shared import _main\n"
           "_main()\n")

_LOCK = threading.Lock()
_SHARED = []
_HANDLES: dict[str, tuple] = {}
_PENDING: dict[str, Specialisation] = {}
#: (module, kernel, argument layout) that the model kernel runs without compiling (see :func:`specialisation`)
_RUNNABLE: set = set()
_SCALARS = (float, int, bool, np.float64, np.int64, np.bool_)  # Python ints: int64, as numba types them below 2**63


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
    """The model-independent module (``ptr_dopri5_solve``, ``ptr_dopri5_solve_sens``, ``ptr_dopri5_solve_dir``,
    ``ptr_rodas_solve*``, ``ptr_dde_solve``, ...)."""
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


def model_handle(compiled, full: bool = False) -> tuple:
    """The model handle of ``compiled``'s model (layouts in ``odeinfer/solve/kernels/pointer.py``):
    ``(n, m, f, jac_y, jac_p, f_t, jac_y_t, jac_p_t, jac_y_dir, jac_p_dir)`` (the last five 0
    unless ``full``: those callbacks are built only for the shared kernels that need them, Rodas's
    and ``nc_obs_accumulate``), or
    ``(n, m, d, delay_params, f, jac_y, jac_ylag, jac_p)`` for a model with delays; sizes, then C
    callback addresses."""
    import numpy as np

    model = compiled.model
    key = (model.fingerprint, bool(full) and not model.delays)
    with _LOCK:
        hit = _HANDLES.get(key)
        if hit is None:
            from odeinfer.model.native import NotLowerable, compile_callbacks

            source, kernels = callback_spec(model, key[1])
            try:
                addr = compile_callbacks(source, kernels, f"model {model.name} C callbacks")
            except NotLowerable:
                addr = numba_callbacks(model, key[1], spec=(source, kernels))
            if model.delays:
                hit = (model.n_states, model.n_params, model.n_delays, np.array(model.delay_indices, dtype=np.int64),
                       *(addr[k] for k in ("model_f_c", "model_jac_y_c", "model_jac_ylag_c", "model_jac_p_c")))
            else:
                extra = tuple(addr[k] for k in _RODAS_CALLBACKS) if key[1] else (0,) * 5
                hit = (model.n_states, model.n_params, addr["model_f_c"], addr["model_jac_y_c"],
                       addr["model_jac_p_c"], *extra)
            _HANDLES[key] = hit
        return hit


_RODAS_CALLBACKS = ("model_f_t_c", "model_jac_y_t_c", "model_jac_p_t_c", "model_jac_y_dir_c", "model_jac_p_dir_c")


def callback_spec(model, full: bool):
    """The generated source of ``model``'s kernels and its C callbacks ``{callback: (function,
    [(argument, shape)])}``, with the argument layouts of ``cfuncs.py``, ``cfuncs_rodas.py``
    (``full``) and ``dde_cfuncs.py``."""
    n, m = model.n_states, model.n_params
    if model.delays:
        from odeinfer.model.codegen_dde import dde_model_source

        nd = model.n_delays
        outs = {"model_f": (n,), "model_jac_y": (n, n), "model_jac_ylag": (nd, n, n), "model_jac_p": (n, m)}
        return dde_model_source(model), {
            f"{k}_c": (k, [("t", None), ("y", (n,)), ("ylag", (n, nd)), ("p", (m,)), ("out", shape)])
            for k, shape in outs.items()}
    from odeinfer.model.codegen import model_source

    outs = {"model_f": (n,), "model_jac_y": (n, n), "model_jac_p": (n, m)}
    if full:
        outs.update({"model_f_t": (n,), "model_jac_y_t": (n, n), "model_jac_p_t": (n, m),
                     "model_jac_y_dir": (n, n), "model_jac_p_dir": (n, m)})
    base = [("t", None), ("y", (n,)), ("p", (m,))]
    return model_source(model.derivatives), {
        f"{k}_c": (k, base + ([("v", (n,))] if k.endswith("_dir") else []) + [("out", shape)])
        for k, shape in outs.items()}


def numba_callbacks(model, full: bool, spec=None) -> dict:
    """``{callback: address}`` of ``callback_spec``'s callbacks compiled by numba (``cfuncs*.py``):
    the path for sources outside :mod:`odeinfer.model.native`'s subset, and its test oracle.
    ``spec``: ``callback_spec(model, full)`` when the caller has it already."""
    from odeinfer.model.cache import build_module
    from odeinfer.solve.kernels import DDE_MODEL_CFUNC_FILES, MODEL_CFUNC_FILES, RODAS_CFUNC_FILES

    source, kernels = spec if spec is not None else callback_spec(model, full)
    files = DDE_MODEL_CFUNC_FILES if model.delays else RODAS_CFUNC_FILES if full else MODEL_CFUNC_FILES
    mod = build_module(source, title=f"model {model.name} C callbacks", kernel_files=files)
    return {k: getattr(mod, k).address for k in kernels}


def shared_kernel(kernel: str):
    """The shared module's ``ptr_<kernel>`` dispatcher; when it is not compiled in this process yet,
    first waits for a warm-up process that compiles it (:func:`odeinfer.solve.warmup.await_kernel`),
    so the machine code is loaded from the disk cache instead of compiled twice."""
    dispatcher = getattr(shared_module(), "ptr_" + kernel)
    if not dispatcher.overloads:
        from odeinfer.solve.warmup import await_kernel

        await_kernel(kernel)
    return dispatcher


class TieredKernel:
    """Runs a model kernel (``kernel``, of ``compiled.module``), or the shared ``ptr_<kernel>``
    until the model's is compiled: the policy of the module docstring, decided on the first call
    (by ``ODEINFER_TIERED`` then). Called with the model kernel's arguments.

    Attributes
    ----------
    tier : str
        ``"pending"`` before the first call, then ``"shared"`` or ``"model"``.
    """

    __slots__ = ("_full", "_mh", "_shared", "_spec", "compiled", "kernel", "tier")

    def __init__(self, compiled, kernel, full_handle=None):
        # full_handle: the shared kernel needs the model's time and second-order derivative
        # callbacks (default: odeinfer.solve.abi.needs_full_handle)
        from odeinfer.solve.abi import needs_full_handle

        self.compiled, self.kernel = compiled, kernel
        self._full = needs_full_handle(kernel.__name__) if full_handle is None else bool(full_handle)
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
                if self._spec.first_to_report():  # every solver of the model shares the one process
                    warnings.warn(f"odeinfer: compiling {self.kernel.__name__} for model "
                                  f"{self.compiled.model.name!r} in the background failed ({self._spec.error}); "
                                  "the shared kernel goes on (same results, slower)", RuntimeWarning, stacklevel=3)
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
        self._shared = shared_kernel(name)
        self._mh = model_handle(self.compiled, full=self._full)
        # the types the call itself dispatches on
        compile_once(self._shared, tuple(map(self._shared.typeof_pyval, (self._mh, *args))))
        self._spec = spec
        self.tier = "shared"


@contextlib.contextmanager
def compile_lock(name: str):
    """Hold an exclusive lock on ``<name>.compile.lock`` in the cache directory while compiling what
    ``name`` names: processes that need the same new kernel at once (the workers of a pool or of a test
    run) compile it one at a time, and each after the first loads the machine code from numba's disk
    cache instead of compiling it again (10-40 s of CPU per shared kernel). The operating system
    releases the lock when its holder dies. Without advisory locks (Windows) nothing is held."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    from odeinfer.model.cache import cache_dir

    fd = os.open(cache_dir() / f"{name}.compile.lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def compile_once(dispatcher, sig: tuple) -> None:
    """Compile the shared kernel ``dispatcher`` for the numba argument types ``sig`` unless this process
    has, under its :func:`compile_lock`."""
    if sig not in dispatcher.overloads:
        with compile_lock(f"{dispatcher.py_func.__module__.rsplit('_', 1)[-1]}.{dispatcher.py_func.__name__}"):
            dispatcher.compile(sig)


_RECORD = threading.local()


@contextlib.contextmanager
def recorded_tiers():
    """A list of the tiers that :func:`jit_kernel` picks inside the block, in order: ``"model"``, or
    ``"shared <module>"`` with the name of the shared module (a hash of its source) whose C entry the
    callee calls through a linker symbol. Part of the numba Ops' PyTensor cache key
    (:mod:`odeinfer.bayes.numba_op`), so a graph compiled around the shared kernel is never loaded
    where the model's was chosen, nor the reverse, nor where the shared kernels changed (the cached
    graph would call a symbol this process never registers)."""
    outer = getattr(_RECORD, "tiers", None)
    _RECORD.tiers = tiers = []
    try:
        yield tiers
    finally:
        _RECORD.tiers = outer
        if outer is not None:
            outer.extend(tiers)


def jit_kernel(compiled, kernel: str, sig: tuple):
    """What numba code (the PyTensor Ops' NUMBA mode) calls in place of ``compiled.module.<kernel>``,
    with the model kernel's arguments of numba types ``sig``: the model kernel itself when it runs
    ``sig`` without compiling (compiled in this process or on disk), else an ``@njit`` closure that
    calls the shared ``ptr_<kernel>`` with the model's :func:`linked_handle` through the kernel's C
    entry (:func:`odeinfer.solve.entry.entry_callee`: a linker symbol, so the numba functions around
    it do not compile the kernel again), while the model kernel compiles in the background for later
    processes (the policy of :class:`TieredKernel`, decided once, here: a compiled graph keeps its
    callee). The choice is recorded (:func:`recorded_tiers`)."""
    from numba import njit

    from odeinfer.solve.abi import needs_full_handle

    mode = tiered_mode()
    if mode == "0" or _specialise(compiled.module, kernel, sig, background=mode == "1") is None:
        tier, callee = "model", getattr(compiled.module, kernel)
    else:
        import numba

        from odeinfer.solve.entry import entry_callee

        ptr, full = shared_kernel(kernel), needs_full_handle(kernel)
        handle = linked_handle(compiled, full)
        callee = entry_callee(kernel, handle, numba.typeof(model_handle(compiled, full)), sig)
        if callee is None:
            @njit(error_model="numpy", fastmath=False)
            def callee(*args):
                return ptr(handle(), *args)

        tier = f"shared {shared_module().__name__}"
    tiers = getattr(_RECORD, "tiers", None)
    if tiers is not None:
        tiers.append(tier)
    return callee


def linked_handle(compiled, full: bool = False):
    """An ``@njit`` function ``() -> mh``: :func:`model_handle` ``(compiled, full)`` with each callback
    address read through a symbol of the process's dynamic linker (``odeinfer_cb_<fingerprint>_...``,
    registered here with this process's address) instead of held as a constant.

    So machine code that calls a shared kernel can be cached on disk (PyTensor caches a compiled
    graph) and loaded by another process: the loader resolves the symbols to that process's own
    callbacks, which it registered when it built the same graph. With the addresses as constants,
    a process that loaded such code called into another process's memory and crashed."""
    from llvmlite import binding
    from numba import njit

    model = compiled.model
    mh = model_handle(compiled, full)
    tag = f"odeinfer_cb_{model.fingerprint}_{int(bool(full) and not model.delays)}"
    if model.delays:  # (n, m, d, delay_params, 4 callbacks): the array is rebuilt in the function
        sizes, addr, delay_params = mh[:3], mh[4:], mh[3]
    else:  # (n, m, 3 or 8 callbacks; 0 where a handle has none)
        sizes, addr = mh[:2], mh[2:]
    entries = list(sizes)
    for i, a in enumerate(addr):
        if a:
            binding.add_symbol(f"{tag}_{i}", a)
        entries.append(f"{tag}_{i}" if a else 0)
    read = _int64_tuple(tuple(entries))
    if not model.delays:
        return read

    @njit(error_model="numpy", fastmath=False)
    def handle():
        h = read()
        return (h[0], h[1], h[2], delay_params.copy(), h[3], h[4], h[5], h[6])  # writable, as Python passes it

    return handle


def _int64_tuple(entries: tuple):
    """An ``@njit``-callable ``() -> UniTuple(int64)`` of ``entries``: each an int (a constant) or a
    symbol name (its address, resolved when the machine code is loaded)."""
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    ret = types.UniTuple(types.int64, len(entries))

    @intrinsic
    def read(typingctx):
        def codegen(context, builder, signature, args):
            i64 = ir.IntType(64)
            values = [builder.ptrtoint(cgutils.get_or_insert_function(builder.module, ir.FunctionType(
                ir.VoidType(), []), e), i64) if isinstance(e, str) else ir.Constant(i64, int(e)) for e in entries]
            return context.make_tuple(builder, ret, values)

        return ret(), codegen

    return read


class Specialisation:
    """One background compilation of a model kernel for one signature.

    Attributes
    ----------
    marker : pathlib.Path
        Written by the background process once the machine code is in the disk cache.
    done : threading.Event
        Set when the background process has ended (successfully or not).
    error : str or None
        Why the background process failed (see :func:`failure_cause`), else None.
    """

    def __init__(self, marker: Path, module_name: str, kernel: str, sig: tuple):
        self.marker = marker
        self.done = threading.Event()
        self.error = None
        self._reported = False
        payload = pickle.dumps((module_name, kernel, sig, str(marker)))
        self._proc = subprocess.Popen(list(COMMAND), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, env={**os.environ, SLOT_ENV: str(slot_path())})
        self._proc.stdin.write(payload)
        self._proc.stdin.close()
        threading.Thread(target=self._wait, daemon=True, name=f"odeinfer-specialise-{kernel}").start()

    def _wait(self):
        with self._proc.stderr:
            err = self._proc.stderr.read()
        self._proc.wait()
        if self._proc.returncode != 0 or not self.marker.exists():
            self.error = failure_cause(self._proc.returncode, err.decode("utf-8", "replace"))
        self.done.set()

    def first_to_report(self) -> bool:
        """True the first time it is called (the failure is reported once)."""
        with _LOCK:
            first, self._reported = not self._reported, True
            return first

    @property
    def ready(self) -> bool:
        """True once the model kernel can be loaded from the disk cache."""
        return self.done.is_set() and self.error is None


#: A line of Python's warnings on stderr (``<file>:<line>: <Category>Warning: <message>``).
_WARNING_LINE = re.compile(r"^\S.*:\d+: \w*Warning: ")


def failure_cause(returncode: int, stderr: str) -> str:
    """One line on why the background compiler failed: the signal that killed it, else the last line
    of its error output (a traceback ends with the exception), without Python's own warnings."""
    import signal

    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"the background compiler was killed by signal {name}"
    lines, after_warning = [], False
    for line in stderr.splitlines():
        if _WARNING_LINE.match(line):
            after_warning = True  # skip it, and the indented source line that may follow
        elif not (after_warning and line.startswith("  ")):
            after_warning = False
            if line.strip():
                lines.append(line.strip())
        else:
            after_warning = False
    last = lines[-1] if lines else "no error output"
    if returncode == 0:
        return f"the background compiler ended without compiling the kernel: {last}"
    return f"the background compiler exited with status {returncode}: {last}"


def slot_path() -> Path:
    """The file whose lock is the background-compile slot (see :data:`SLOT_ENV`)."""
    from odeinfer.model.cache import cache_dir

    return cache_dir() / "background-compile.slot"


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
    (with ``background=False``: an object whose ``done`` is never set). A ``None`` is remembered
    for the arguments' :func:`_layout`: a solver made per call (a trajectory check, each step of an
    estimator's scan) then decides without ``numba.typeof`` (about 15 us an argument)."""
    import numba

    layout = _layout(args)
    key = None if layout is None else (module.__name__, kernel, layout)
    if key is not None and key in _RUNNABLE:
        return None
    out = _specialise(module, kernel, tuple(numba.typeof(a) for a in args), background)
    if out is None and key is not None:
        _RUNNABLE.add(key)
    return out


def _layout(args):
    """What numba's types of ``args`` depend on, cheaply: per array its dtype, dimensions, contiguity,
    writability and alignment; per Python or numpy scalar its type. ``None`` when an argument is of
    another kind (its numba type is then worked out each time)."""
    key = []
    for a in args:
        t = type(a)
        if t is np.ndarray:
            f = a.flags
            key.append((a.dtype, a.ndim, f.c_contiguous, f.f_contiguous, f.writeable, f.aligned))
        elif t in _SCALARS:
            key.append(t)
        else:
            return None
    return tuple(key)


def _specialise(module, kernel: str, sig: tuple, background: bool):
    """:func:`specialisation` for the numba argument types ``sig``."""
    dispatcher = getattr(module, kernel)
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
        _remove_lock(marker.with_suffix(".lock"), _identity())  # ours, unless taken over as stale


def _claim(marker: Path, stale: float = 1800.0, wait: bool = True) -> bool:
    """True when this process should compile: it created ``<marker>.lock``, holding its
    :func:`_identity`. Else wait for the owner's marker (with ``wait=False``: do not wait while a
    live owner holds the lock) and return False. The owner's lock is
    taken over at once when the owner is dead (killed: its lock stays; see :func:`_owner_alive`)
    or has ended without a marker (failed), and after ``stale`` seconds when its state cannot be
    known (another host sharing the cache directory) or it hangs. So several processes solving the
    same new model (Dask or multiprocessing workers) compile it once, and none waits for a dead one."""
    lock = marker.with_suffix(".lock")
    while not marker.exists():
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                owner = lock.read_text(encoding="utf-8")
                age = time.time() - lock.stat().st_mtime
            except FileNotFoundError:
                continue  # the owner has just finished: its marker, or our turn
            if _owner_alive(owner) is False or age > stale:
                _remove_lock(lock, owner)
                continue
            if not wait:
                return False
            time.sleep(0.5)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(_identity())
        return True
    return False


def _identity(pid: int | None = None) -> str:
    """``<host> <boot id> <pid> <start time>`` of process ``pid`` (default: this one): what a lock
    holds. The start time (``/proc``, in clock ticks since boot) tells a reused PID from its first
    process; ``-`` where the system has no ``/proc``."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()} {_boot_id()} {pid} {_start_time(pid)}"


def _owner_alive(owner: str):
    """Whether the process named by a lock's text (:func:`_identity`) still runs: ``False`` when it
    has certainly ended (no such PID, a zombie, a PID reused by a later process, or a reboot since),
    ``True`` when it runs, ``None`` when this process cannot tell (another host, an empty or foreign
    lock, Windows)."""
    parts = owner.split()
    if len(parts) != 4 or parts[0] != socket.gethostname() or not parts[2].isdigit() or os.name == "nt":
        return None
    _, boot, pid, start = parts
    if boot != _boot_id():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    except OSError:
        return None
    return _start_time(int(pid)) == start


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip() or "-"
    except OSError:
        return "-"


def _start_time(pid: int) -> str:
    """Field 22 of ``/proc/<pid>/stat`` (start time), ``"ended"`` for a zombie, ``"-"`` without /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return "ended" if Path("/proc/self/stat").exists() else "-"
    except OSError:
        return "-"
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name: fields 3, 4, ...
    return "ended" if fields[0] in ("Z", "X") else fields[19]


def _remove_lock(lock: Path, owner: str) -> None:
    """Remove ``lock`` if it still holds ``owner``: moved aside first, and put back if another process
    has replaced it in the meantime with a lock of its own."""
    aside = lock.with_name(f"{lock.name}.{os.getpid()}.{threading.get_ident()}.old")
    try:
        os.replace(lock, aside)
    except FileNotFoundError:
        return
    try:
        if aside.read_text(encoding="utf-8") != owner:
            try:
                os.link(aside, lock)  # a live owner's lock: back in place, unless a newer one is there
            except OSError:
                pass
    finally:
        aside.unlink(missing_ok=True)


if __name__ == "__main__":
    _main()
