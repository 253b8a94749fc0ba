"""A faster copy step in numba's ``inline="always"`` inliner, for the solver kernels' compile time.

Before it inlines a callee, numba's inliner (``InlineWorker.inline_ir``) deep-copies the callee's
IR one block at a time, each block with its own copy memo, so every block drags along its own
copy of the callee's whole variable scope: blocks x variables objects copied, twice per inline.
For the solver kernels (a run function such as ``_dopri5_run`` has hundreds of blocks and thousands
of variables once its own helpers are inlined into it) that copy was 40-50% of the compile time of
a model's kernel. :func:`install` wraps ``inline_ir`` so that, during one call, every block's copy
shares one copy of each scope, which is what the callee's IR had before the copy (all its blocks
share one scope). Nothing else changes: the inliner's steps, the IR it produces and the machine
code are numba's own.

And before each inline, numba runs the callee's untyped pipeline again (``inline_function`` calls
``run_untyped_passes``): the same helper inlined at ten call sites, or into ten kernels of a module,
was translated from bytecode ten times, its own inlines included. For the functions of odeinfer's
generated modules (fixed source text, constant globals), :func:`install` keeps the callee's IR of
the first translation per compile configuration and hands it to ``inline_ir``, which copies it
before any change ("Always copy the callee IR, it gets mutated").

Installed once per process by :mod:`odeinfer.model.cache` (which builds every generated kernel
module); left out, with everything still correct, on a numba whose inliner does not have the
expected shape.
"""

import collections
import copy
import functools
import inspect

_EXPECTED = ("self", "caller_ir", "block", "i", "callee_ir", "callee_freevars", "arg_typs")
_EXPECTED_FUNCTION = ("self", "caller_ir", "block", "i", "function", "arg_typs")
_STATE = {"installed": False}
_GENERATED = "odeinfer_generated_"  # the generated modules' names (odeinfer.model.cache)
_MEMO_SIZE = 256  # callee IRs kept (least recently used dropped): a few MB


def install() -> bool:
    """Wrap numba's ``InlineWorker.inline_ir`` (once); ``True`` if the wrapper is in place."""
    if _STATE["installed"]:
        return True
    from numba.core import inline_closurecall, ir

    worker = inline_closurecall.InlineWorker
    original = worker.inline_ir
    if (tuple(inspect.signature(original).parameters) != _EXPECTED or "__deepcopy__" in vars(ir.Scope)
            or not hasattr(copy, "_reconstruct")
            or tuple(inspect.signature(worker.inline_function).parameters) != _EXPECTED_FUNCTION
            or not hasattr(worker, "run_untyped_passes")):
        return False

    @functools.wraps(original)
    def inline_ir(self, caller_ir, block, i, callee_ir, callee_freevars, arg_typs=None):
        copies = {}

        def copy_scope_once(scope, memo):
            hit = copies.get(id(scope))
            if hit is None:  # the default deep copy (the memo breaks the scope <-> variable cycle)
                hit = copies[id(scope)] = copy._reconstruct(scope, memo, *scope.__reduce_ex__(4))
            memo[id(scope)] = hit
            return hit

        outer = vars(ir.Scope).get("__deepcopy__")  # numba compiles under its global lock: one at a time
        ir.Scope.__deepcopy__ = copy_scope_once
        try:
            return original(self, caller_ir, block, i, callee_ir, callee_freevars, arg_typs)
        finally:
            if outer is None:
                del ir.Scope.__deepcopy__
            else:
                ir.Scope.__deepcopy__ = outer

    inline_closurecall.InlineWorker.inline_ir = inline_ir
    inline_closurecall.InlineWorker.inline_function = _memo_inline_function(worker.inline_function)
    _STATE["installed"] = True
    return True


def _memo_inline_function(original):
    memo = collections.OrderedDict()  # used under numba's global compile lock: one compile at a time

    @functools.wraps(original)
    def inline_function(self, caller_ir, block, i, function, arg_typs=None):
        if not getattr(function, "__module__", "").startswith(_GENERATED):
            return original(self, caller_ir, block, i, function, arg_typs)
        self.flags.enable_ssa = False  # as run_untyped_passes leaves it
        key = (function, self._compiler_pipeline, repr(self.flags), repr(sorted(self.locals.items(), key=str)))
        callee_ir = memo.get(key)
        if callee_ir is None:
            callee_ir = memo[key] = self.run_untyped_passes(function)
            if len(memo) > _MEMO_SIZE:
                memo.popitem(last=False)
        else:
            memo.move_to_end(key)
        return self.inline_ir(caller_ir, block, i, callee_ir, function.__code__.co_freevars, arg_typs=arg_typs)

    return inline_function
