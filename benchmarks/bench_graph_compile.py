"""Compile time of a new model's PyMC log density + gradient in PyTensor's NUMBA mode on the shared
solver kernels, and its warm per-call time: Stan's lynx-hare case study (``build_model(...,
likelihood="lognormal")``), the NUTS step's function (logp and dlogp of the free variables).

Run:  ODEINFER_TIERED=shared PYTENSOR_FLAGS=base_compiledir=<an empty directory> \\
      python benchmarks/bench_graph_compile.py [forward|adjoint]

``ODEINFER_TIERED=shared`` keeps the shared kernels (the model's own are not compiled); with an
empty PyTensor compile directory the first figure is the graph's compile (plus its first call);
with the same directory again, it is the load of the cached graph. The values are printed in full
so that two versions' bits can be compared.
"""

import sys
import time
import warnings

warnings.filterwarnings("ignore")

import pytensor  # noqa: E402

import odeinfer as oi  # noqa: E402
from odeinfer.bayes.build import build_model, lynx_hare_stan  # noqa: E402
from odeinfer.solve.shared import recorded_tiers  # noqa: E402

gradient = oi.Adjoint() if sys.argv[1:] == ["adjoint"] else None
model, data, priors = lynx_hare_stan()
pmodel = build_model(model, data, priors=priors, likelihood="lognormal", gradient=gradient)
point = pmodel.initial_point()
values = [point[v.name] for v in pmodel.value_vars]
with recorded_tiers() as tiers:
    start = time.perf_counter()
    f = pytensor.function(pmodel.value_vars, [pmodel.logp(), pmodel.dlogp()], mode="NUMBA")
    out = f(*values)
    compile_s = time.perf_counter() - start
print(f"tiers {tiers}; compile + first call {compile_s:.2f} s")
print(f"logp {float(out[0])!r}; dlogp {out[1].tolist()!r}")
for _ in range(50):
    f(*values)
batches = []
for _ in range(7):
    start = time.perf_counter()
    for _ in range(300):
        f(*values)
    batches.append((time.perf_counter() - start) / 300)
batches.sort()
print(f"warm call: min {batches[0] * 1e6:.1f} us, median {batches[3] * 1e6:.1f} us")
