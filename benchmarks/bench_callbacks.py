"""A new model's C callbacks (what the shared solver kernels call): odeinfer.model.native's
lowering to LLVM IR against numba's cfuncs, compiled from the same generated source, each in a
fresh empty cache (so numba cannot load machine code from disk).

    python benchmarks/bench_callbacks.py                     # four zoo models
    python benchmarks/bench_callbacks.py --models lorenz sir

Prints per model: callbacks built (f, jac_y, jac_p; with Rodas's five more), the time to generate
their source (common to both), native ms, numba s (source excluded), ratio. Both sets give the same bits (tests/test_native_callbacks.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=["lotka_volterra", "alpha_pinene", "fitzhugh_nagumo",
                                                    "nicholson_blowflies"])
    args = ap.parse_args(argv)
    os.environ["ODEINFER_CACHE_DIR"] = tempfile.mkdtemp(prefix="odeinfer-callbacks-")
    import odeinfer as oi
    from odeinfer.model.native import compile_callbacks
    from odeinfer.solve.shared import callback_spec, numba_callbacks

    print(f"python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}")
    print(f"{'model':22s} {'callbacks':>9s} {'source (ms)':>12s} {'native (ms)':>12s} {'numba (s)':>10s} "
          f"{'ratio':>7s}")
    compile_callbacks("def model_f(t, out):\n    out[0] = t\n", {"warm_c": ("model_f", [("t", None), ("out", (1,))])},
                      "warm-up")  # numba's code generator initialises once per process
    for name in args.models:
        model = oi.zoo.get(name).model
        full = not model.delays
        callback_spec(model, full)  # the model's sympy derivatives, computed once per model
        t = time.perf_counter()
        source, kernels = callback_spec(model, full)  # the generated source, as numba_callbacks makes it
        src = time.perf_counter() - t
        t = time.perf_counter()
        compile_callbacks(source, kernels, name)
        native = time.perf_counter() - t
        t = time.perf_counter()
        numba_callbacks(model, full)
        nb = time.perf_counter() - t - src  # numba_callbacks generates the source again
        print(f"{name:22s} {len(kernels):9d} {src * 1e3:12.1f} {native * 1e3:12.1f} {nb:10.2f} {nb / native:6.0f}x")


if __name__ == "__main__":
    main()
