"""The kernels' calling convention (odeinfer.solve.abi) is written twice: the kernel files
cannot import Python modules. The Python side's names must agree with every generated module's
constants and argument names, the shared module's ``ptr_*`` kernels take the same arguments after
the model handle, and the adapters (the only positional calls of kernels) must put each value at
its place. Reference: the kernel sources themselves (their signatures and size rules)."""

import inspect
import re
from pathlib import Path

import numpy as np
import pytest

from odeinfer import zoo
from odeinfer.solve import abi
from odeinfer.solve.abi import DDE_INFO_SIZE, INFO_SIZE, SIGNATURES, Info, Status
from odeinfer.solve.shared import shared_module


def test_ode_kernels_agree_with_status_and_info():
    module = zoo.get("lotka_volterra").model.compile().module
    for status in Status:
        assert getattr(module, f"ST_{status.name}") == status.value
    for entry in (Info.T_REACHED, Info.N_STEPS, Info.N_REJECTED, Info.N_RHS, Info.H_NEXT, Info.N_LU):
        assert getattr(module, f"INFO_{entry.name}") == entry.value
    assert module.INFO_SIZE == INFO_SIZE


def test_delay_kernels_agree_with_status_and_info():
    module = zoo.get("logistic_delay").model.compile().module
    for status in Status:
        assert getattr(module, f"ST_{status.name}") == status.value
    for entry in (Info.T_REACHED, Info.N_STEPS, Info.N_REJECTED, Info.N_RHS):
        assert getattr(module, f"INFO_{entry.name}") == entry.value
    assert module.DDE_INFO_N_STORED == Info.N_STORED
    assert module.DDE_INFO_BUF_FULL == Info.BUF_FULL
    assert module.DDE_INFO_SIZE == DDE_INFO_SIZE


def test_every_kernel_takes_the_arguments_of_the_abi_table():
    """The model kernels and the shared ``ptr_*`` kernels (model handle first) against SIGNATURES."""
    ode = zoo.get("lotka_volterra").model.compile().module
    dde = zoo.get("logistic_delay").model.compile().module
    shared = shared_module()
    for name, args in SIGNATURES.items():
        module = dde if name.startswith("dde") else ode
        assert tuple(inspect.signature(getattr(module, name).py_func).parameters) == args, name
        ptr = getattr(shared, "ptr_" + name)
        assert tuple(inspect.signature(ptr.py_func).parameters) == ("mh", *args), name


def _recorded(adapter, run_args, *flags, read_at_call=(), **bound):
    """The arguments ``adapter``'s closure passes to its kernel, each bound value being its own name (those named in
    ``read_at_call``: a one-element list of it, as an adapter that reads the value at each call is given)."""
    calls = []
    run = adapter(lambda *a: calls.append(a), *flags, **{k: [k] if k in read_at_call else k for k in bound})
    run(*run_args)
    return calls[0]


def test_the_python_adapters_pass_each_value_at_its_place():
    sig = SIGNATURES
    solve = dict.fromkeys(("t0", "t_eval", "rtol", "atol", "first_step", "max_steps", "sens_err", "z_out", "work",
                           "info"))
    for kernel, flags, run_args in (("dopri5_solve", (False, False), ("p", "y0")),
                                    ("dopri5_solve_sens", (True, False), ("p", "y0")),
                                    ("dopri5_solve_dir", (True, True), ("p", "y0", "pdir", "s0"))):
        assert _recorded(abi.ode_solve_call, run_args, *flags, read_at_call=("max_steps",), **solve) == sig[kernel]
    assert _recorded(abi.fixed_step_call, ("p", "y0"), t0=1, t_eval=1, sens=1, h=1, z_out=1, work=1,
                     info=1) == sig["dopri5_fixed"]
    assert _recorded(abi.adjoint_vjp_call, ("p", "y0", "g"), t0=1, t_eval=1, rtol=1, atol=1, max_steps=1, nsub=1,
                     z_out=1, rec=1, grad=1, work=1, info=1) == sig["dopri5_adjoint_vjp"]
    assert _recorded(abi.dde_solve_call, ("p", "phi", "buf"), t0=1, t_eval=1, hkind=1, hb=1, hc=1, k=1, sens_err=1,
                     rtol=1, atol=1, first_step=1, max_steps=1, z_out=1, work=1, info=1) == sig["dde_solve"]
    assert _recorded(abi.dde_adjoint_vjp_call, ("p", "phi", "g", "buf", "nbuf", "grad"), t0=1, t_obs=1, hkind=1,
                     hb=1, hc=1, nsub=1) == sig["dde_adjoint_vjp"]
    assert _recorded(abi.dde_adjoint_gradient_call,
                     ("p", "phi", "buf", "nbuf", "nsub", "grad", "anodes", "adnodes", "work"),
                     t0=1, t_end=1, hkind=1, hb=1, hc=1, tb=1, tc=1, wl=1, paper=1) == sig["dde_adjoint_gradient"]
    assert _recorded(abi.normal_eq_call, (("t", "X", "D"), "p", "w", "want_meat",
                                          ("jtj", "jte", "meat", "acc"))) == sig["gm_normal_eq"]


def test_work_sizes_are_the_kernels_own():
    """The model-independent size rules give what each model's own kernels ask for."""
    cm = zoo.get("lotka_volterra").model.compile()
    n, m, mod = cm.n_states, cm.n_params, cm.module
    for sens in (False, True):
        k = n + m if sens else 0
        assert abi.ode_work_size("dopri5", n, m, k) == mod.dopri5_work_size(sens)
        assert abi.ode_work_size("rodas", n, m, k) == mod.rodas_work_size(sens)
    assert abi.ode_work_size("dopri5", n, m, 3) == mod.dopri5_work_size_dir(3)
    assert abi.ode_work_size("rodas", n, m, 3) == mod.rodas_work_size_dir(3)
    assert abi.adjoint_work_size(n, m) == mod.dopri5_adjoint_work_size()
    dm = zoo.get("cheyne_stokes").model
    dmod = dm.compile().module
    for k, q in ((0, 1), (dm.n_params + 2, 2)):
        assert abi.dde_work_size(dm, k, q) == dmod.dde_work_size(k, q)
    assert abi.dde_adjoint_work_size(dm, 3) == dmod.dde_adjoint_work_size(3)


def _echo(name):
    """An ``@njit`` stand-in for kernel ``name``: takes its arguments (by SIGNATURES) and returns them."""
    from numba import njit

    args = ", ".join(SIGNATURES[name])
    ns = {}
    exec(f"def echo({args}):\n    return ({args},)\n", ns)  # noqa: S102 - test-generated text from the table
    return njit(ns["echo"])


def _check_echo(out, name, expected):
    assert len(out) == len(SIGNATURES[name])
    for arg, value in zip(SIGNATURES[name], out):
        want = expected[arg]
        if isinstance(want, np.ndarray):
            assert isinstance(value, np.ndarray) and value.shape == want.shape and np.array_equal(value, want), arg
        else:
            assert value == want, arg  # the scalars of one call are all distinct


def test_the_numba_adapters_pass_each_value_at_its_place(monkeypatch):
    """... and the adapters declare (to choose the model's or the shared kernel) exactly the numba
    signature their call has."""
    declared = {}

    def stand_in(compiled, name, sig):
        declared[name] = (sig, _echo(name))
        return declared[name][1]

    monkeypatch.setattr(abi, "_njit_kernel", stand_in)
    rng = np.random.default_rng(0)
    arr = {k: rng.standard_normal(shape) for k, shape in (
        ("t_eval", (3,)), ("p", (4,)), ("y0", (2,)), ("z_out", (3, 5)), ("work", (7,)), ("info", (6,)), ("g", (3, 2)),
        ("rec", (9, 13)), ("grad", (8,)), ("phi", (1,)), ("hb", (5,)), ("hc", (4, 4, 2)), ("buf", (11, 12)))}
    for name in ("dopri5_solve_sens", "dopri5_solve"):
        run = abi.njit_ode_solve(None, "dopri5", name.endswith("sens"), 0.5, arr["t_eval"], 1e-3, 1e-4, 77, True)
        out = run(arr["p"], arr["y0"], arr["z_out"], arr["work"], arr["info"])
        _check_echo(out, name, dict(arr, t0=0.5, rtol=1e-3, atol=1e-4, first_step=0.0, max_steps=77, sens_err=True))
    run = abi.njit_adjoint_vjp(None, 0.5, arr["t_eval"], 1e-3, 1e-4, 3)
    out = run(arr["p"], arr["y0"], arr["g"], 55, arr["z_out"], arr["rec"], arr["grad"], arr["work"], arr["info"])
    _check_echo(out, "dopri5_adjoint_vjp", dict(arr, t0=0.5, rtol=1e-3, atol=1e-4, max_steps=55, nsub=3))

    run = abi.njit_dde_solve(None, 0.5, arr["t_eval"], 3, arr["hb"], arr["hc"], 4, True, 1e-3, 1e-4, 77)
    out = run(arr["p"], arr["phi"], arr["z_out"], arr["work"], arr["buf"], arr["info"])
    _check_echo(out, "dde_solve", dict(arr, t0=0.5, hkind=3, k=4, sens_err=True, rtol=1e-3, atol=1e-4,
                                       first_step=0.0, max_steps=77))
    run = abi.njit_dde_adjoint_vjp(None, 0.5, arr["t_eval"], 3, arr["hb"], arr["hc"], 2)
    out = run(arr["p"], arr["phi"], arr["g"], arr["buf"], 9, arr["grad"])
    _check_echo(out, "dde_adjoint_vjp", dict(arr, t0=0.5, t_obs=arr["t_eval"], hkind=3, nbuf=9, nsub=2))
    for name, (sig, echo) in declared.items():
        assert [tuple(s) for s in echo.signatures] == [sig], name
    assert len(declared) == 5


def test_the_keyword_adapter_orders_the_estimators_kernel_arguments_by_the_table():
    for name in ("coll_constraints", "gm_residuals", "gm_normal_eq", "nc_obs_accumulate"):
        values = {arg: k for k, arg in enumerate(SIGNATURES[name])}
        assert abi.call(lambda *a: a, name, **values) == tuple(range(len(SIGNATURES[name])))
    with pytest.raises(TypeError, match=r"gm_residuals: expected the arguments \['t', 'X', 'D', 'p', 'E'\], got "
                                        r"\['D', 'X', 'p', 't'\]"):
        abi.call(lambda *a: a, "gm_residuals", t=0, X=1, D=2, p=3)


def test_the_numba_adapters_are_inlined_into_their_callers(monkeypatch):
    """Numba links a callee's whole machine-code module into each function that calls it and optimises
    it again there: every wrapper level between a PyTensor graph and a kernel compiles the kernel's code
    once more (a new delay problem's forward wrapper: 15 s of CPU with two more levels, 7.5 s without).
    The adapters and the delay problem's forward step are therefore inlined (numba IR) into the one
    function that calls them: the problem's ``numba_solve`` / ``numba_vjp`` function, which a graph calls
    and which stays a function of its own. (The bits are unchanged: tests/test_bayes_op.py and
    tests/test_bayes_dde.py compare those functions with the Python path bit for bit.)"""
    from odeinfer.bayes.dde_problem import DDEProblem
    from odeinfer.model import History

    monkeypatch.setattr(abi, "_njit_kernel", lambda compiled, name, sig: None)  # nothing is called here
    t = np.array([0.0, 0.5])
    hb, hc = np.zeros(1), np.zeros((1, 1, 1))
    adapters = [abi.njit_ode_solve(None, "dopri5", True, 0.0, t, 1e-3, 1e-4, 7, True),
                abi.njit_ode_solve(None, "dopri5", False, 0.0, t, 1e-3, 1e-4, 7, True),
                abi.njit_adjoint_vjp(None, 0.0, t, 1e-3, 1e-4, 1),
                abi.njit_dde_solve(None, 0.0, t, 0, hb, hc, 0, True, 1e-3, 1e-4, 7),
                abi.njit_dde_adjoint_vjp(None, 0.0, t, 0, hb, hc, 1)]
    assert [a.targetoptions.get("inline") for a in adapters] == ["always"] * 5
    z = zoo.get("delay_exponential_decay")
    problem = DDEProblem(z.model, z.t, History.constant([1.0]), 0.0)
    assert problem._numba_forward(0).targetoptions.get("inline") == "always"
    for outer in (problem.numba_solve(), problem.numba_vjp()):  # what a graph calls: compiled on its own
        assert outer.targetoptions.get("inline", "never") == "never"


def test_work_view_is_reshape_of_the_slice():
    """``work_view`` (the kernels' views of their work buffer, strides computed inline) against numpy's
    slice-and-reshape, in 2 and 3 dimensions; a buffer too short or a negative dimension raises, as numba's
    reshape does (the reference: numpy itself)."""
    module = zoo.get("lotka_volterra").model.compile().module
    work = np.arange(40.0)
    for off, shape in ((0, (2, 3)), (5, (3, 4)), (7, (2, 3, 4)), (40, (0, 0)), (3, (1, 1))):
        view = module.work_view(work, off, shape)
        size = int(np.prod(shape))
        np.testing.assert_array_equal(view, work[off:off + size].reshape(shape))
        if size:
            assert view.strides == work[off:off + size].reshape(shape).strides
            view[(0,) * len(shape)] = -1.0  # a view, not a copy
            assert work[off] == -1.0
            work[off] = float(off)
    for off, shape in ((35, (2, 3)), (-1, (2, 2)), (0, (-2, -3))):
        with pytest.raises(ValueError, match="work_view"):
            module.work_view(work, off, shape)


def _kernel_functions():
    """``{name: [(file, decorator, its options, body)]}`` of every ``@njit`` / ``@intrinsic`` function of the
    kernel files (a name can be defined in several files: ``direct.py`` and ``pointer.py``)."""
    from odeinfer.solve import kernels

    defs = {}
    for path in sorted(Path(kernels.__file__).parent.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"@(njit|intrinsic)(\([^)]*\))?\s*\ndef (\w+)\((.*?)(?=\n@|\n# ----|\Z)", text, re.S):
            defs.setdefault(m.group(3), []).append((path.name, m.group(1), m.group(2) or "", m.group(4)))
    return defs


def test_kernels_without_reference_counting_neither_allocate_nor_call_functions_that_may():
    """A ``_nrt=False`` kernel (numba's reference counting off: see the rules in odeinfer.solve.kernels) must not
    allocate an array nor call a non-inlined kernel that counts references (which may return a new array, whose
    reference the caller would then never release). Reference: the kernel sources."""
    defs = _kernel_functions()
    no_rc = {name for name, versions in defs.items() if any("_nrt=False" in o for _, _, o, _ in versions)}
    assert {"lu_solve", "lu_solve_transposed", "mh_jac_y", "_rodas_stage_adjoint", "_dde_rhs"} <= no_rc
    for name in sorted(no_rc):
        for path, _, options, body in defs[name]:
            if "_nrt=False" not in options:
                continue
            assert not re.search(r"np\.(empty|zeros|ones|array|full|copy)\w*\(|\.copy\(\)", body), (path, name)
            for callee in set(re.findall(r"\b(\w+)\(", body)) & defs.keys() - {name}:
                inlined = all('inline="always"' in o for _, _, o, _ in defs[callee])
                intrinsic = all(kind == "intrinsic" for _, kind, _, _ in defs[callee])
                assert callee in no_rc or inlined or intrinsic, (path, name, callee)


def test_generated_model_kernels_count_no_references():
    """Every generated model kernel (they are called in the solvers' loops) is compiled with ``_nrt=False``."""
    from odeinfer.model.codegen import model_source

    text = model_source(zoo.get("lotka_volterra").model.derivatives)
    decorators = re.findall(r"@njit\(([^)]*)\)\s*\ndef (model_\w+)", text)
    assert len(decorators) >= 8 and all("_nrt=False" in options for options, _ in decorators)
