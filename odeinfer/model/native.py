"""A model's C callbacks lowered straight to LLVM IR: a new model answers in milliseconds.

The shared solver kernels call a model through C callbacks (``void(double t, double *y,
double *p, double *out)`` and the variants of :mod:`odeinfer.solve.kernels.cfuncs`,
``cfuncs_rodas`` and ``dde_cfuncs``). Compiled by numba, they cost about a second each on a
new model (typing and lowering dominate; a model needs three to eight of them). Their bodies
are the straight-line float code that :mod:`odeinfer.model.codegen` generates from sympy, so
this module lowers that code itself: it walks each generated function's Python syntax tree
(text we generated from sympy; nothing is executed) and emits the LLVM IR numba would emit
for it, then lets numba's own code generator optimise and link it (its target machine, its
pass pipeline, no fast-math flags).

Same operations, same order, same intrinsics as numba's lowering: ``+ - * /`` as ``fadd``
``fsub`` ``fmul`` ``fdiv``, unary minus as ``fsub -0.0, x``, ``**`` as ``llvm.pow``,
``math.exp/log/log10/log2/sin/cos`` and ``abs``/``math.fabs`` as their ``llvm.*`` intrinsics,
``math.sqrt/tan/atan/tanh/...`` as the C library functions, ``math.copysign`` as
``llvm.copysign``, comparisons as ordered ``fcmp`` (``!=`` unordered), ``max``/``min`` as
numba's ``select(b > a, b, a)``, conditional expressions as a select. Results are therefore
bitwise those of the numba callbacks (``tests/test_native_callbacks.py`` checks it on every zoo
and PEtab model). Anything outside this subset raises :class:`NotLowerable` before any code is
generated, and the caller falls back to numba.
"""

from __future__ import annotations

import ast
import math
import threading

__all__ = ["NotLowerable", "compile_callbacks"]

_LOCK = threading.Lock()
_LIBRARIES = []  # compiled code stays alive for the process (its addresses are in model handles)

# math.<name> -> ("intrinsic" | "extern", symbol); as numba's cpython/mathimpl.py lowers them
_MATH = {
    "exp": ("intrinsic", "llvm.exp"), "log": ("intrinsic", "llvm.log"), "log10": ("intrinsic", "llvm.log10"),
    "log2": ("intrinsic", "llvm.log2"), "sin": ("intrinsic", "llvm.sin"), "cos": ("intrinsic", "llvm.cos"),
    "fabs": ("intrinsic", "llvm.fabs"), "sqrt": ("extern", "sqrt"), "tan": ("extern", "tan"),
    "asin": ("extern", "asin"), "acos": ("extern", "acos"), "atan": ("extern", "atan"),
    "sinh": ("extern", "sinh"), "cosh": ("extern", "cosh"), "tanh": ("extern", "tanh"),
    "asinh": ("extern", "asinh"), "acosh": ("extern", "acosh"), "atanh": ("extern", "atanh"),
    "log1p": ("extern", "log1p"), "expm1": ("extern", "expm1"), "erf": ("extern", "erf"),
    "erfc": ("extern", "erfc"), "lgamma": ("extern", "lgamma"),
}
_CONSTANTS = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan, "tau": math.tau}
_CMP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


class NotLowerable(Exception):
    """The generated source uses a construct this lowering does not cover (numba compiles it)."""


def compile_callbacks(source: str, kernels: dict, name: str) -> dict:
    """Compile C callbacks for functions of ``source`` (generated model source, see module docstring).

    Parameters
    ----------
    source : str
        Python source holding the ``def model_*`` functions.
    kernels : dict
        ``{callback name: (function name, [(argument, shape or None for the scalar t), ...])}``:
        each callback is ``void(double, double *, ...)`` with the function's arguments in order;
        arrays are C-contiguous with the given shapes.
    name : str
        Name of the code library (shown by numba's diagnostics only).

    Returns
    -------
    dict
        ``{callback name: address}``.

    Raises
    ------
    NotLowerable
        When a function is missing or uses a construct outside the covered subset.
    """
    from llvmlite import ir

    tree = ast.parse(source)
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    module = ir.Module(name=name)
    for cname, (fname, args) in kernels.items():
        node = functions.get(fname)
        if node is None:
            raise NotLowerable(f"no function {fname!r} in the source")
        _Lowering(module, cname, node, args).run()
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target

    with _LOCK, global_compiler_lock:
        library = cpu_target.target_context.codegen().create_library(name)
        library.add_ir_module(module)
        library.finalize()
        _LIBRARIES.append(library)
        return {cname: library.get_pointer_to_function(cname) for cname in kernels}


class _Lowering:
    """Emits one callback: loads, local assignments and stores of one generated function."""

    def __init__(self, module, cname, node, args):
        from llvmlite import ir

        self.ir, self.module, self.node = ir, module, node
        self.f64 = ir.DoubleType()
        names = [a.arg for a in node.args.args]
        if names != [a for a, _ in args]:
            raise NotLowerable(f"{node.name}: arguments {names} differ from {[a for a, _ in args]}")
        types_ = [self.f64 if shape is None else self.f64.as_pointer() for _, shape in args]
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), types_), name=cname)
        self.builder = ir.IRBuilder(fn.append_basic_block("entry"))
        self.shapes = {a: shape for a, shape in args}
        self.values = {}
        self.arrays = {}
        for (a, shape), value in zip(args, fn.args):
            (self.values if shape is None else self.arrays)[a] = value

    # --- statements ----------------------------------------------------------------------
    def run(self):
        for stmt in self.node.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # a docstring
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
                raise NotLowerable(f"{self.node.name}: statement {type(stmt).__name__}")
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                self.values[target.id] = self.as_float(self.expr(stmt.value))
            elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                self.store(target, stmt.value)
            else:
                raise NotLowerable(f"{self.node.name}: assignment target {type(target).__name__}")
        self.builder.ret_void()

    def store(self, target, value):
        arr = target.value.id
        if arr not in self.arrays:
            raise NotLowerable(f"{self.node.name}: store into {arr!r}")
        index = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
        if all(isinstance(i, ast.Slice) and i.lower is i.upper is i.step is None for i in index):
            zero = self.ir.Constant(self.f64, 0.0)
            for k in range(math.prod(self.shapes[arr])):
                self.builder.store(zero, self.element(arr, k))
            return
        self.builder.store(self.as_float(self.expr(value)), self.element(arr, self.flat(arr, index)))

    def flat(self, arr, index):
        shape = self.shapes[arr]
        if len(index) != len(shape) or not all(isinstance(i, ast.Constant) and type(i.value) is int
                                                 for i in index):
            raise NotLowerable(f"{self.node.name}: index of {arr!r}")
        k = 0
        for i, size in zip(index, shape):
            if not 0 <= i.value < size:
                raise NotLowerable(f"{self.node.name}: index {i.value} out of {arr!r}'s shape {shape}")
            k = k * size + i.value
        return k

    def element(self, arr, k):
        return self.builder.gep(self.arrays[arr], [self.ir.Constant(self.ir.IntType(64), k)])

    # --- expressions ---------------------------------------------------------------------
    def expr(self, e):
        b, ir = self.builder, self.ir
        if isinstance(e, ast.Constant):
            if type(e.value) in (int, float) and not isinstance(e.value, bool):
                return ir.Constant(self.f64, float(e.value))
            raise NotLowerable(f"{self.node.name}: constant {type(e.value).__name__}")
        if isinstance(e, ast.Name):
            if e.id in self.values:
                return self.values[e.id]
            raise NotLowerable(f"{self.node.name}: name {e.id!r}")
        if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Name) and e.value.id in self.arrays:
            index = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
            return b.load(self.element(e.value.id, self.flat(e.value.id, index)))
        if isinstance(e, ast.Attribute) and _is_math(e.value) and e.attr in _CONSTANTS:
            return ir.Constant(self.f64, _CONSTANTS[e.attr])
        if isinstance(e, ast.BinOp):
            if all(isinstance(x, ast.Constant) and type(x.value) is int for x in (e.left, e.right)):
                raise NotLowerable(f"{self.node.name}: integer arithmetic")  # numba keeps it in int64
            x, y = self.as_float(self.expr(e.left)), self.as_float(self.expr(e.right))
            if isinstance(e.op, ast.Add):
                return b.fadd(x, y)
            if isinstance(e.op, ast.Sub):
                return b.fsub(x, y)
            if isinstance(e.op, ast.Mult):
                return b.fmul(x, y)
            if isinstance(e.op, ast.Div):
                return b.fdiv(x, y)
            if isinstance(e.op, ast.Pow):
                return b.call(self.binary_intrinsic("llvm.pow"), [x, y])
            raise NotLowerable(f"{self.node.name}: operator {type(e.op).__name__}")
        if isinstance(e, ast.UnaryOp):
            x = self.expr(e.operand)
            if isinstance(e.op, ast.Not):
                return b.not_(self.as_bool(x))
            x = self.as_float(x)
            if isinstance(e.op, ast.USub):
                return b.fsub(ir.Constant(self.f64, -0.0), x)
            if isinstance(e.op, ast.UAdd):
                return x
            raise NotLowerable(f"{self.node.name}: unary {type(e.op).__name__}")
        if isinstance(e, ast.Call):
            return self.call(e)
        if isinstance(e, ast.Compare):
            out, left = None, self.as_float(self.expr(e.left))
            for op, right_e in zip(e.ops, e.comparators):
                right = self.as_float(self.expr(right_e))
                sym = _CMP.get(type(op))
                if sym is None:
                    raise NotLowerable(f"{self.node.name}: comparison {type(op).__name__}")
                c = b.fcmp_unordered(sym, left, right) if sym == "!=" else b.fcmp_ordered(sym, left, right)
                out = c if out is None else b.and_(out, c)
                left = right
            return out
        if isinstance(e, ast.BoolOp):
            vals = [self.as_bool(self.expr(v)) for v in e.values]
            out = vals[0]
            for v in vals[1:]:
                out = b.and_(out, v) if isinstance(e.op, ast.And) else b.or_(out, v)
            return out
        if isinstance(e, ast.IfExp):
            cond = self.as_bool(self.expr(e.test))
            return b.select(cond, self.as_float(self.expr(e.body)), self.as_float(self.expr(e.orelse)))
        raise NotLowerable(f"{self.node.name}: expression {type(e).__name__}")

    def call(self, e):
        b = self.builder
        if e.keywords:
            raise NotLowerable(f"{self.node.name}: keyword arguments")
        args = [self.as_float(self.expr(a)) for a in e.args]
        f = e.func
        if isinstance(f, ast.Attribute) and _is_math(f.value):
            if f.attr in _MATH and len(args) == 1:
                kind, symbol = _MATH[f.attr]
                if kind == "intrinsic":
                    return b.call(self.module.declare_intrinsic(symbol, [self.f64]), args)
                return b.call(self.extern(symbol, 1), args)
            if f.attr == "copysign" and len(args) == 2:
                return b.call(self.binary_intrinsic("llvm.copysign"), args)
            if f.attr == "pow" and len(args) == 2:
                return b.call(self.binary_intrinsic("llvm.pow"), args)
            if f.attr == "atan2" and len(args) == 2:
                return b.call(self.extern("atan2", 2), args)
        if isinstance(f, ast.Name):
            if f.id == "abs" and len(args) == 1:
                return b.call(self.module.declare_intrinsic("llvm.fabs", [self.f64]), args)
            if f.id in ("max", "min") and len(args) >= 2:
                acc = args[0]
                for v in args[1:]:  # numba's do_minmax: select(v > acc, v, acc) (min: v < acc)
                    acc = b.select(b.fcmp_ordered(">" if f.id == "max" else "<", v, acc), v, acc)
                return acc
            if f.id == "float" and len(args) == 1:
                return args[0]
        raise NotLowerable(f"{self.node.name}: call of {ast.unparse(f)}")

    def binary_intrinsic(self, name):
        return self.module.declare_intrinsic(name, [self.f64], self.ir.FunctionType(self.f64, [self.f64] * 2))

    def extern(self, symbol, n_args):
        ir = self.ir
        fn = self.module.globals.get(symbol)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(self.f64, [self.f64] * n_args), name=symbol)
            fn.attributes.add("nounwind")
            fn.attributes.add("readnone")
        return fn

    def as_float(self, v):
        if v.type == self.f64:
            return v
        return self.builder.uitofp(v, self.f64)  # a boolean in arithmetic, as numba casts it

    def as_bool(self, v):
        if v.type == self.f64:
            return self.builder.fcmp_unordered("!=", v, self.ir.Constant(self.f64, 0.0))
        return v


def _is_math(node):
    return isinstance(node, ast.Name) and node.id == "math"
