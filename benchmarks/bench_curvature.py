"""The trust region's curvature on the Benchmark-Models-PEtab problems: the Fisher information throughout
(odeinfer's likelihood fits) against fides' ``HybridFixed`` (``curvature="hybrid"``: the Fisher information
until 20 iterations in a row leave the radius unchanged, then BFGS; pyPESTO's default).

For each problem, the same ``--starts`` starts (Sobol, ``--seed``, uniform in the bounds on the estimation scales;
the first 100 of seed 0 are issue 15's) are fitted by :func:`odeinfer.estimators._trust.trust_region` on the
problem's likelihood objective (the default likelihood solver, exact gradient and Fisher information) with the
likelihood fits' tolerances and iteration budget, once per curvature. Prints per curvature: the best NLL minus the
NLL at the collection's nominal parameters, the starts within 0.1 of that nominal NLL (or below it), the starts
that end at the iteration budget, the iterations and the wall time (no continuation of the best start, no
multistart bookkeeping: the local fits alone).

    python benchmarks/bench_curvature.py --problems Elowitz_Nature2000 --starts 100 --seed 2
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def run(name, starts, seed, curvatures):
    import odeinfer as oi
    from odeinfer.estimators._likelihood_fit import TOLERANCES, likelihood_solver, make_objective
    from odeinfer.estimators._trust import trust_region
    from odeinfer.inference.multistart import sample_starts

    est = oi.Embedding()
    pp = oi.petab.load(oi.datasets.petab_problem(name))
    obj = make_objective(pp.problem, likelihood_solver(est))
    nominal = obj(pp.u_nominal).nll
    U = sample_starts(obj.lower, obj.upper, starts, rng=seed)

    def fun(u):
        ev = obj(u)
        return (ev.nll, ev.grad, ev.curvature) if ev.ok else ev.failure

    for curvature in curvatures:
        t0, ends = time.perf_counter(), []
        for u in U:
            r = trust_region(fun, u, obj.lower, obj.upper, max_iter=est.iterations("likelihood"), curvature=curvature,
                             **TOLERANCES)
            ends.append((r.f - nominal, r.stop, r.n_iter))
        d = np.array([e[0] for e in ends])
        print(f"| {name} | {seed} | {curvature} | {np.nanmin(d):.4f} | {int(np.sum(d < 0.1))} | "
              f"{sum(e[1] == 'MAXITER' for e in ends)} | {sum(e[2] for e in ends)} | {time.perf_counter() - t0:.1f} |",
              flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", default="Boehm_JProteomeRes2014,Crauste_CellSystems2017,Elowitz_Nature2000")
    ap.add_argument("--starts", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--curvatures", default="given,hybrid")
    a = ap.parse_args(argv)
    print("| problem | seed | curvature | best - nominal NLL | within 0.1 of nominal | at max_iter | iterations | "
          "wall s |\n|---|---|---|---|---|---|---|---|")
    for name in a.problems.split(","):
        run(name, a.starts, a.seed, a.curvatures.split(","))


if __name__ == "__main__":
    main()
