"""odeinfer.model.native: a model's C callbacks lowered straight to LLVM IR.

The shared solver kernels call a model through C callbacks; numba compiled them in about a second
each, this lowering in milliseconds. The claim is that they are the numba callbacks' bits (same
operations, same order, same intrinsics). References: the numba callbacks (``numba_callbacks``,
compiled from the same source by numba: equality of bits), and sympy's own numerical evaluation of
the model's expressions (``Model.lambdify``, independent of both: agreement to rounding).
"""

import ctypes
import sys

import numpy as np
import pytest

import odeinfer as oi
from odeinfer.model.native import NotLowerable, compile_callbacks
from odeinfer.solve import _inputs
from odeinfer.solve.shared import callback_spec, model_handle, numba_callbacks

# every construct of the lowered subset: pow, exp, log, sqrt, trigonometric and hyperbolic
# functions, abs, min/max, comparisons and conditionals (heaviside, where), unary minus, t
CONSTRUCTS = oi.Model.from_equations({
    "x": "-a*x + b*sqrt(abs(y) + 1)*exp(-t/5) + where(x > 0.5, c*x**2, -c*x)",
    "y": "a*tanh(x) - log(1 + y**2)*b + max(x, y) - min(c, x*y) + heaviside(y - 0.1)*sin(t)",
    "z": "pow(abs(x), 1.5)*cos(z) - tan(0.1*z)/(1 + c) + x**3 - y/x + -z",
}, params=["a", "b", "c"], name="constructs")


def _call(addr, args):
    proto = ctypes.CFUNCTYPE(None, ctypes.c_double, *([ctypes.c_void_p] * (len(args) - 1)))
    proto(addr)(args[0], *[a.ctypes.data for a in args[1:]])


def _inputs_for(args, rng):
    vals = []
    for name, shape in args:
        if shape is None:
            vals.append(float(rng.uniform(0.0, 5.0)))
        elif name == "out":
            vals.append(np.full(shape, 7.0))  # every entry must be written (zeros included)
        else:
            vals.append(rng.uniform(-2.0, 3.0, size=shape))
    return vals


def _mismatches(model, full, trials=25, seed=1):
    """Callbacks of ``model`` whose native bits differ from numba's on random inputs."""
    source, kernels = callback_spec(model, full)
    native = compile_callbacks(source, kernels, model.name)
    reference = numba_callbacks(model, full)
    rng = np.random.default_rng(seed)
    bad = set()
    for _ in range(trials):
        for cname, (_, args) in kernels.items():
            vals = _inputs_for(args, rng)
            a = [v.copy() if isinstance(v, np.ndarray) else v for v in vals]
            b = [v.copy() if isinstance(v, np.ndarray) else v for v in vals]
            _call(native[cname], a)
            _call(reference[cname], b)
            same = np.array_equal(a[-1].view(np.int64), b[-1].view(np.int64)) or (
                np.array_equal(np.isnan(a[-1]), np.isnan(b[-1]))
                and np.array_equal(np.nan_to_num(a[-1]).view(np.int64), np.nan_to_num(b[-1]).view(np.int64)))
            if not same:
                bad.add(cname)
    return sorted(bad)


def test_every_construct_gives_numbas_bits():
    assert _mismatches(CONSTRUCTS, full=True) == []


def test_the_callbacks_agree_with_sympys_evaluation():
    """Independent of numba: the right-hand side and its Jacobians against Model.lambdify."""
    source, kernels = callback_spec(CONSTRUCTS, True)
    native = compile_callbacks(source, kernels, "constructs")
    f, jy, jp = (CONSTRUCTS.lambdify(k) for k in ("f", "jac_y", "jac_p"))
    rng = np.random.default_rng(2)
    for _ in range(20):
        t, y, p = float(rng.uniform(0, 5)), rng.uniform(0.2, 3.0, 3), rng.uniform(0.5, 2.0, 3)
        for cname, ref in (("model_f_c", f), ("model_jac_y_c", jy), ("model_jac_p_c", jp)):
            out = np.full(np.shape(ref(t, y, p)), np.nan)
            _call(native[cname], [t, y.copy(), p.copy(), out])
            np.testing.assert_allclose(out, np.asarray(ref(t, y, p), float), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("name", ["lotka_volterra", "nicholson_blowflies"])
def test_zoo_models_give_numbas_bits(name):
    model = oi.zoo.get(name).model
    assert _mismatches(model, full=not model.delays) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", oi.zoo.available("all"))
def test_every_zoo_model_gives_numbas_bits(name):
    model = oi.zoo.get(name).model
    assert _mismatches(model, full=not model.delays) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", ["Boehm_JProteomeRes2014", "Crauste_CellSystems2017", "Elowitz_Nature2000",
                                  "Fujita_SciSignal2010", "Perelson_Science1996", "Zheng_PNAS2012"])
def test_petab_models_give_numbas_bits(name):
    from pathlib import Path

    pp = oi.petab.load(Path(__file__).parent / "data" / "petab" / name / f"{name}.yaml")
    assert _mismatches(pp.problem.solve_model, full=True, trials=5) == []


def test_a_construct_outside_the_subset_is_refused_and_the_handle_falls_back_to_numba(monkeypatch):
    source = "def model_f(t, y, p, out):\n    out[0] = math.floor(y[0])\n"
    with pytest.raises(NotLowerable, match="floor"):
        compile_callbacks(source, {"model_f_c": ("model_f", [("t", None), ("y", (1,)), ("p", (0,)),
                                                               ("out", (1,))])}, "floor")
    with pytest.raises(NotLowerable, match="model_g"):
        compile_callbacks(source, {"model_g_c": ("model_g", [("t", None)])}, "missing")
    # a model the lowering refuses still gets a working handle (numba's callbacks)
    model = oi.Model.from_equations({"x": "-k*x"}, params=["k"], name="fallback")

    def refuse(*args, **kwargs):
        raise NotLowerable("test")

    monkeypatch.setattr(sys.modules["odeinfer.model.native"], "compile_callbacks", refuse)
    handle = model_handle(_inputs.compiled_model(model))
    out = np.zeros(1)
    _call(handle[2], [0.0, np.array([2.0]), np.array([0.5]), out])
    assert out[0] == -1.0 and handle[3] != 0
