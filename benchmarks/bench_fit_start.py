"""Issue 14 (performance): CPU time of one Embedding likelihood fit per start, in one process.

The same scrambled Sobol starts as ``bench_petab.py`` (uniform in the bounds on the parameters'
scales, ``--seed``), fitted one after the other by the Embedding's local likelihood fit (fides on
the exact gradient and Fisher information, the ``likelihood`` role's default solver) in this
process after a warm-up start: prints the median CPU seconds per start, the evaluations per start,
the CPU per evaluation and, with ``--split``, a second pass that times the objective's evaluations
alone (so ``per start - evaluations`` is the optimiser's own overhead). ``--save FILE`` writes the
end points and NLLs (``.npz``) and ``--compare FILE`` checks them against a saved run (same end
points: the optimisation path did not change). ``--profile N`` runs cProfile over the first N
starts and prints the top functions. ``--adjoint`` fits as ``Embedding(gradient=oi.Adjoint())`` does (the
adjoint's gradient, BFGS curvature).

    python benchmarks/bench_fit_start.py --problem Boehm_JProteomeRes2014 --starts 20 --split
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PETAB = HERE.parent / "tests" / "data" / "petab"


def fits(obj, U, max_iter, timed_obj=None, polished=True):
    """Per start: (CPU s, evaluations, end point, NLL, CPU s inside the objective); each start's local fit
    is continued as a single-start fit's is (:func:`~odeinfer.estimators._likelihood_fit.polish`) unless
    ``polished`` is false."""
    from odeinfer.estimators._likelihood_fit import _local, polish

    out = []
    for u0 in U:
        spent = [0.0]

        def counted(u, grad=True, _obj=obj, _spent=spent):
            c = time.process_time()
            try:
                return _obj(u, grad=grad)
            finally:
                _spent[0] += time.process_time() - c

        counted.lower, counted.upper, counted.adjoint = obj.lower, obj.upper, obj.adjoint
        n0 = obj.n_eval
        c = time.process_time()
        fobj = counted if timed_obj else obj
        r = _local(fobj, np.asarray(u0, float), max_iter)
        x, f = r.x, r.f
        if polished and np.isfinite(f):
            run = polish(fobj, {"u": x, "nll": f, "stop": r.stop, "message": r.message, "n_iter": r.n_iter}, max_iter)
            x, f = run["u"], run["nll"]
        out.append((time.process_time() - c, obj.n_eval - n0, x, f, spent[0]))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problem", default="Boehm_JProteomeRes2014")
    ap.add_argument("--folder", type=Path, default=PETAB,
                    help="the folder of the problem folders (default: tests/data/petab; or the collection's)")
    ap.add_argument("--max-iter", type=int, help="iterations per start (default: Embedding's for likelihood fits)")
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", action="store_true", help="also time the objective's evaluations alone")
    ap.add_argument("--profile", type=int, default=0, help="cProfile the first N starts")
    ap.add_argument("--adjoint", action="store_true",
                    help="gradient by the adjoint, curvature by BFGS (Embedding(gradient=oi.Adjoint()))")
    ap.add_argument("--rtol", type=float, help="the solver oi.Auto(rtol, atol=rtol/100) instead of the default")
    ap.add_argument("--no-polish", action="store_true",
                    help="the local fit alone, without the continuation a single-start fit adds after a "
                         "small-step stop")
    ap.add_argument("--show", action="store_true", help="print each start's NLL, evaluations and CPU seconds")
    ap.add_argument("--save", type=Path)
    ap.add_argument("--compare", type=Path)
    args = ap.parse_args(argv)
    os.environ.setdefault("ODEINFER_TIERED", "0")
    import odeinfer as oi
    from odeinfer.estimators._likelihood_fit import likelihood_solver
    from odeinfer.inference.multistart import sample_starts
    from odeinfer.likelihood import Objective

    problem = oi.petab.load(args.folder / args.problem / f"{args.problem}.yaml").problem
    est = oi.Embedding()
    solver = oi.Auto(rtol=args.rtol, atol=args.rtol / 100) if args.rtol else likelihood_solver(est)
    obj = Objective(problem, solver=solver, gradient=oi.Adjoint() if args.adjoint else None)
    U = sample_starts(obj.lower, obj.upper, args.starts, rng=args.seed)
    budget = args.max_iter or est.iterations("likelihood")
    fits(obj, U[:1], 2)  # warm-up: compile / load the kernels, import the optimiser
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        fits(obj, U[:args.profile], budget)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return
    res = fits(obj, U, budget, timed_obj=args.split, polished=not args.no_polish)
    cpu = np.array([r[0] for r in res])
    ne = np.array([r[1] for r in res])
    inside = np.array([r[4] for r in res])
    how = f"{' (adjoint, BFGS)' if args.adjoint else ''} {obj.solver!r}"
    line = (f"{args.problem}{how}: {args.starts} starts, median {cpu.size and np.median(cpu):.4f} s CPU per start "
            f"(mean {cpu.mean():.4f}), median {np.median(ne):.0f} evaluations, "
            f"{1e3 * cpu.sum() / ne.sum():.3f} ms CPU per evaluation incl. optimiser")
    if args.split:
        line += (f"; objective alone {1e3 * inside.sum() / ne.sum():.3f} ms per evaluation, optimiser "
                 f"{(cpu - inside).mean():.4f} s per start")
    X = np.array([r[2] for r in res])
    f = np.array([r[3] for r in res])
    if args.show:
        for i, r in enumerate(res):
            print(f"  start {i}: NLL {r[3]:.4f}, {r[1]} evaluations, {r[0]:.2f} s CPU", flush=True)
    line += f"; best NLL {np.min(f):.4f}, {int(np.sum(f <= np.min(f) + 0.1))}/{f.size} starts within 0.1 of it"
    print(line, flush=True)
    if args.save:
        np.savez(args.save, X=X, f=f, n_eval=ne)
    if args.compare:
        ref = np.load(args.compare)
        same_n = int(np.sum(ref["n_eval"] == ne))
        dx = np.max(np.abs(ref["X"] - X))
        df = np.max(np.abs(ref["f"] - f))
        print(f"against {args.compare.name}: {same_n}/{ne.size} starts with the same evaluation count, "
              f"max |dx| {dx:.2e}, max |dNLL| {df:.2e}")


if __name__ == "__main__":
    main()
