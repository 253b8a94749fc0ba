"""The likelihood's gradient by the adjoint against forward sensitivities, on PEtab problems, in one run.

Usage::

    python benchmarks/bench_likelihood_adjoint.py [--problems A,B] [--folder DIR] [--calls 20]
        [--no-forward A,B]

Per problem (``tests/data/petab/<name>`` or ``DIR/<name>``, e.g. a clone of the Benchmark-Models-PEtab
collection): the warm NLL + gradient with the likelihood's default solver (``oi.Auto(rtol=1e-6,
atol=1e-8)``) by forward sensitivities (``pp.objective()``: NLL, gradient and Fisher information, what the
trust-region fits use) and by the adjoint (``pp.objective(gradient=oi.Adjoint())``: Rodas with the same
tolerances, NLL and gradient), each the median of ``--calls`` calls at new parameters (the nominal ones moved by
1e-9 per call on the estimation scale, so nothing is reused), after one call at the nominal point (compilation
excluded); and each gradient's error at a point 1% off the nominal one (normal steps on the estimation scales,
seed 0; at the nominal point, often an optimum, the gradient is nearly zero) against forward sensitivities with
Rodas at rtol 1e-10, atol 1e-12, as the largest difference relative to the reference's largest entry. Problems
in ``--no-forward`` skip the forward sensitivities and the reference (hundreds of estimated parameters: the
reason for the adjoint). The machine's load is printed: timings on a shared machine are indicative.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parent.parent / "tests" / "data" / "petab"
DEFAULT = ("Boehm_JProteomeRes2014", "Fujita_SciSignal2010", "Zheng_PNAS2012", "Brannmark_JBC2010",
           "Bruno_JExpBot2016", "Elowitz_Nature2000")


def warm(obj, u, calls):
    """(median ms, first call s) of ``obj`` at ``u`` moved by 1e-9 per call."""
    t = time.perf_counter()
    ev = obj(u)
    first = time.perf_counter() - t
    if not ev.ok:
        raise RuntimeError(ev.failure)
    times = []
    for k in range(calls):
        v = u + 1e-9 * (k + 1)
        t = time.perf_counter()
        obj(v)
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times)), first, ev


def main():
    import odeinfer as oi

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default=",".join(DEFAULT))
    ap.add_argument("--folder", default=str(TESTS))
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--no-forward", default="")
    args = ap.parse_args()
    skip = set(filter(None, args.no_forward.split(",")))
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("| problem | states | estimated | forward NLL+grad+FIM ms | adjoint NLL+grad ms | ratio | "
          "gradient error forward / adjoint |")
    print("|---|---|---|---|---|---|---|")
    for name in filter(None, args.problems.split(",")):
        folder = Path(args.folder) / name
        pp = oi.petab.load(next(folder.glob("*.yaml")))
        u = pp.u_nominal
        adj_obj = pp.objective(gradient=oi.Adjoint())
        adj_ms, _, _ = warm(adj_obj, u, args.calls)
        if name in skip:
            fwd_ms, ratio, diff = None, "", "not run"
        else:
            fwd_obj = pp.objective()
            fwd_ms, _, _ = warm(fwd_obj, u, args.calls)
            ratio = f"{fwd_ms / adj_ms:.2f}x"
            off = u + 0.01 * np.random.default_rng(0).normal(size=u.size)
            ref = pp.objective(oi.Rodas(rtol=1e-10, atol=1e-12, max_steps=10**6))(off).grad
            diff = " / ".join(f"{np.abs(o(off).grad - ref).max() / np.abs(ref).max():.1e}" for o in (fwd_obj, adj_obj))
        fwd_txt = "" if fwd_ms is None else f"{fwd_ms:.2f}"
        print(f"| {name} | {pp.problem.model.n_states} | {len(pp.problem.estimated)} | {fwd_txt} | {adj_ms:.2f} | "
              f"{ratio} | {diff} |", flush=True)


if __name__ == "__main__":
    main()
