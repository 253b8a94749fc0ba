"""odeinfer.model._inliner: numba's ``inline="always"`` inliner with one scope copy per inline.

Reference: numba's own inliner (the wrapper removed) and plain Python on the same float64
operations (+, -, *, / only, so every result is an exactly rounded IEEE operation in both)."""

import copy
import re

import numpy as np
from numba import njit
from numba.core import inline_closurecall, ir

from odeinfer.model import _inliner

import odeinfer.model.cache  # noqa: F401  (installs the wrapper, as every solve does)


def _callee(x, n):
    # loops, branches and many variables: many blocks, one scope
    acc = 0.0
    for i in range(n):
        a = x[i] * 1.0000001 - 0.5
        if a > 0.0:
            b = a * a / (1.0 + a)
        elif a < -0.25:
            b = -a / 3.0 + 0.125
        else:
            b = a - a * a * a / 6.0
        c = b * 0.75 + acc * 0.25
        acc = c / (1.0 + c * c)
    return acc


def _caller(x, n):
    return _callee(x, n) - 2.0 * _callee(x[::-1], n)


def _compiled(inliner):
    """``_caller`` compiled by a new dispatcher (nothing cached) with ``inliner`` as numba's ``inline_ir``."""
    saved = inline_closurecall.InlineWorker.inline_ir
    inline_closurecall.InlineWorker.inline_ir = inliner
    try:
        callee = njit(inline="always")(_callee)
        caller = njit(lambda x, n: callee(x, n) - 2.0 * callee(x[::-1], n))
        x = np.random.default_rng(3).normal(size=40)
        return caller(x, 40), x, _instructions(caller)
    finally:
        inline_closurecall.InlineWorker.inline_ir = saved


def _instructions(dispatcher):
    """The machine instructions of ``dispatcher``'s one compiled version, symbol names and constant
    addresses (which differ between any two compilations) left out."""
    (asm,) = dispatcher.inspect_asm().values()
    lines = [line.split("#")[0].strip() for line in asm.splitlines() if line.startswith("\t")]
    return [re.sub(r'\$?"[^"]*"|[._$]\S*', "", line) for line in lines if not line.startswith(".")]


def test_the_wrapper_is_installed_on_the_supported_numba():
    # pyproject.toml's numba range has the inliner this wrapper expects; a numba that changes it
    # still compiles correctly (install returns False), only slower: this test is how we learn of it
    assert _inliner.install() is True
    assert inline_closurecall.InlineWorker.inline_ir.__wrapped__ is not None
    assert "__deepcopy__" not in vars(ir.Scope)  # set only during an inline


def test_inlined_code_is_numba_s_own_machine_code_and_gives_python_s_bits():
    wrapped = inline_closurecall.InlineWorker.inline_ir
    ours, x, ours_code = _compiled(wrapped)
    numba_s, _, numba_s_code = _compiled(wrapped.__wrapped__)
    assert ours == numba_s == _caller(list(x), 40)
    assert ours_code == numba_s_code and len(ours_code) > 50  # the same machine code


def test_each_scope_is_copied_once_per_copy_of_the_callee(monkeypatch):
    seen = []
    reconstruct = copy._reconstruct

    def counting(x, memo, *args, **kwargs):
        if isinstance(x, ir.Scope):
            seen.append(id(x))
        return reconstruct(x, memo, *args, **kwargs)

    monkeypatch.setattr(copy, "_reconstruct", counting)
    _compiled(inline_closurecall.InlineWorker.inline_ir)
    ours = len(seen)
    seen.clear()
    _compiled(inline_closurecall.InlineWorker.inline_ir.__wrapped__)
    # two inlines, each copying the callee's IR twice (numba's working copy and its unmodified copy),
    # each IR copy copying its two scopes (the function's and its parent) once, where numba's own
    # copy copies them once per block
    assert ours == 2 * 2 * 2
    assert len(seen) > 5 * ours


def _generated_callee():
    """``_callee`` as a function of a generated module (the memo's domain: fixed text, constant globals)."""
    import inspect

    namespace = {"__name__": "odeinfer_generated_test_inliner"}
    exec(compile(inspect.getsource(_callee), "<generated>", "exec"), namespace)  # our own source, not user text
    return namespace["_callee"]


def _compiled_generated(inline_function):
    """A caller inlining the generated ``_callee`` at two sites (and a third time through a second
    caller), compiled with ``inline_function`` as numba's: (values, machine code of both callers)."""
    saved = inline_closurecall.InlineWorker.inline_function
    inline_closurecall.InlineWorker.inline_function = inline_function
    try:
        callee = njit(inline="always")(_generated_callee())
        first = njit(lambda x, n: callee(x, n) - 2.0 * callee(x[::-1], n))
        second = njit(lambda x, n: callee(x, n) * 0.5)
        x = np.random.default_rng(3).normal(size=40)
        return (first(x, 40), second(x, 40)), _instructions(first) + _instructions(second)
    finally:
        inline_closurecall.InlineWorker.inline_function = saved


def test_a_generated_callee_is_translated_once_and_inlined_as_numba_inlines_it(monkeypatch):
    """The memo of ``inline_function``: the callee's bytecode is translated once for its three inlines,
    and the callers' machine code and values are those of numba's own inliner (and Python's bits)."""
    translated = []
    run = inline_closurecall.InlineWorker.run_untyped_passes

    def counting(self, func, enable_ssa=False):
        translated.append(func.__name__)
        return run(self, func, enable_ssa)

    monkeypatch.setattr(inline_closurecall.InlineWorker, "run_untyped_passes", counting)
    memo = inline_closurecall.InlineWorker.inline_function
    ours, ours_code = _compiled_generated(memo)
    assert translated.count("_callee") == 1
    translated.clear()
    numba_s, numba_s_code = _compiled_generated(memo.__wrapped__)
    assert translated.count("_callee") == 3
    x = list(np.random.default_rng(3).normal(size=40))
    assert ours == numba_s == (_caller(x, 40), _callee(x, 40) * 0.5)
    assert ours_code == numba_s_code and len(ours_code) > 100
