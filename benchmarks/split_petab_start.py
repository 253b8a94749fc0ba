"""Where a multistart fit's CPU time goes on a PEtab problem: per start, the numba solves (the bound
solvers' calls: kernel with sensitivities), the Python work of the objective around them
(parameter maps, observables, noise model, assembly call, checks) and the rest (the trust region:
fides' iterations and odeinfer's wrapper), measured with ``time.process_time`` around each part.

The starts are those of ``bench_petab.py`` (scrambled Sobol, ``--seed``), fitted one after the other
in this process by the same worker code (``oi.Embedding``'s likelihood fit, default solver), after
``--warm`` starts run once to fill the caches. ``--out FILE`` writes each start's end point, NLL,
status and evaluations (JSON) to compare two versions of the code start by start.

    python benchmarks/split_petab_start.py --problem Boehm_JProteomeRes2014 --starts 20
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problem", default="Boehm_JProteomeRes2014")
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm", type=int, default=2, help="starts run once before measuring")
    ap.add_argument("--out", help="write the starts' end points and statuses (JSON) to this file")
    args = ap.parse_args(argv)
    os.environ.setdefault("ODEINFER_TIERED", "0")  # the model's own kernels, as bench_petab.py
    import odeinfer as oi
    from bench_petab import load
    from odeinfer.estimators._likelihood_fit import _one, likelihood_solver, make_objective
    from odeinfer.inference.multistart import sample_starts

    est = oi.Embedding()
    obj = make_objective(load(args.problem).problem, likelihood_solver(est))
    U = sample_starts(obj.lower, obj.upper, args.starts, rng=args.seed)
    max_iter = est.iterations("likelihood")
    for u0 in U[:args.warm]:
        _one(obj, -1, u0, max_iter)
    clock, spent = time.process_time, {"solve": 0.0, "objective": 0.0}

    def timed(call, key):
        def wrapper(*a, **k):
            t = clock()
            try:
                return call(*a, **k)
            finally:
                spent[key] += clock() - t
        return wrapper

    classes = {type(seg.solver) for run in obj.runs for seg in run.segments} | {type(obj)}
    saved = {cls: cls.__call__ for cls in classes}
    for cls in classes:
        cls.__call__ = timed(saved[cls], "objective" if cls is type(obj) else "solve")
    rows, out = [], []
    try:
        for i, u0 in enumerate(U):
            before, t = dict(spent), clock()
            r = _one(obj, i, u0, max_iter)
            total = clock() - t
            solve, objective = (spent[k] - before[k] for k in ("solve", "objective"))
            rows.append((total, solve, objective - solve, total - objective, r.get("n_eval") or 0))
            out.append({"index": i, "u": None if r.get("u") is None else [float(v) for v in r["u"]],
                        "nll": r.get("nll"), "status": r.get("status"), "n_eval": r.get("n_eval")})
    finally:
        for cls, call in saved.items():
            cls.__call__ = call
    a = np.array(rows)
    n_eval = a[:, 4].sum()
    print(f"{args.problem}: {args.starts} starts (seed {args.seed}), {n_eval:.0f} evaluations, load "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"median start {np.median(a[:, 0]):.3f} s CPU ({np.median(a[:, 4]):.0f} evaluations); "
          f"{1e3 * a[:, 0].sum() / n_eval:.3f} ms CPU per evaluation")
    for k, label in ((1, "numba solves"), (2, "objective's Python"), (3, "trust region (fides + wrapper)")):
        print(f"  {label:32s} {1e3 * a[:, k].sum() / n_eval:6.3f} ms per evaluation "
              f"({100 * a[:, k].sum() / a[:, 0].sum():3.0f}%), median start {np.median(a[:, k]):.3f} s")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh)


if __name__ == "__main__":
    main()
