"""Real problems (issue 14): Benchmark-Models-PEtab problems fitted by odeinfer and by scipy.

For each problem (loaded with ``oi.petab.load``):

1. warm negative log-likelihood + gradient at the published nominal parameters (median of
   repeated calls) and the NLL itself against the collection's reference;
2. the same ``--starts`` random starts (uniform in the bounds on the parameters' scales, one
   seed) fitted by ``oi.Embedding`` (trust region on the exact gradient and Fisher information)
   and by scipy ``least_squares`` (trf, bounds, 2-point Jacobian) over ``solve_ivp`` (LSODA,
   rtol 1e-8, atol 1e-10, exact Jacobian from the same sympy model), whose residuals are the
   weighted residuals on the noise scale plus, for parameter-dependent noise sds, the exact
   pseudo-residuals ``sqrt(2 ln sigma + 2 K)`` (so that ``0.5 ||r||^2`` is the NLL up to a constant).
   Both optima are scored with the same NLL (odeinfer's objective), so the numbers compare.

Prints, per problem and method: best NLL, starts within 0.1 of the overall best, failed starts,
median and total time per start.

    python benchmarks/bench_petab.py --problems Boehm_JProteomeRes2014 --starts 20
    python benchmarks/bench_petab.py --starts 100 --jobs 2       # the issue's multistart
    python benchmarks/bench_petab.py --problems Boehm_JProteomeRes2014 --starts 20 --no-scipy --sample

``--sample``: after the fits, NUTS on the posterior (uniform priors in the bounds on the
parameters' scales) seeded at the best fit, 4 chains x 1000 draws; prints r_hat, bulk ESS and time.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PETAB = HERE.parent / "tests" / "data" / "petab"
REFERENCE_NLL = {  # -log-likelihood at the nominal parameters (shared/petab/README.md, from AMICI's benchmarks)
    "Boehm_JProteomeRes2014": 138.222, "Fujita_SciSignal2010": -53.084, "Crauste_CellSystems2017": 190.965,
    "Elowitz_Nature2000": -63.203, "Zheng_PNAS2012": -278.334,
}


def load(name):
    import odeinfer as oi

    return oi.petab.load(PETAB / name / f"{name}.yaml")


def nominal_u(problem, obj):
    from odeinfer.likelihood.parameters import to_scale

    return to_scale(problem.nominal(problem.estimated), obj.scales)


def time_nll(obj, u, n=50):
    obj(u)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        obj(u)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


# --- the scipy baseline ----------------------------------------------------------------------
class ScipyProblem:
    """Residuals of a FitProblem evaluated with scipy's solve_ivp (see the module docstring)."""

    def __init__(self, problem, rtol=1e-8, atol=1e-10):
        import sympy as sp

        from odeinfer.model.trace import T_SYMBOL, symbols_for

        self.problem, self.rtol, self.atol = problem, rtol, atol
        m = problem.model
        self.m = m
        self.f, self.jac = m.lambdify("f"), m.lambdify("jac_y")
        xs, ps, qs = symbols_for(m.states), symbols_for(m.params), symbols_for(m.obs_params)
        args = [T_SYMBOL, list(xs), list(ps), list(qs)]
        self.h = [sp.lambdify(args, o.expr, "numpy") for o in m.observables]
        self.s = [sp.lambdify([list(ps), list(qs), o.symbol], o.sigma_expr, "numpy") for o in m.observables]
        self.sigma_fixed = all(not (o.sigma_expr.free_symbols & set(ps) | o.sigma_expr.free_symbols & set(qs))
                               for o in m.observables)
        syms = [problem.symbols[n] for n in problem.names]
        self.v = []
        for plan in problem.plans:
            if plan.preequilibrate or plan.doses or plan.inputs:
                raise NotImplementedError("the scipy baseline covers plain conditions only")
            self.v.append(sp.lambdify([syms], list(plan.exprs), "numpy"))
        self.K = 30.0  # pseudo-residual offset: sqrt(2 ln sigma + 2K) is real for sigma > exp(-30)
        from odeinfer.likelihood import Objective

        obj = Objective(problem)
        self.scales, self.theta, self.est = obj.scales, obj.theta.copy(), obj.est_index
        self.lower, self.upper = obj.lower, obj.upper

    def natural(self, u):
        from odeinfer.likelihood.parameters import from_scale

        th = self.theta.copy()
        th[self.est] = from_scale(u, self.scales)
        return th

    def residuals(self, u):
        from scipy.integrate import solve_ivp

        m, out = self.m, []
        th = self.natural(u)
        for plan, vfun in zip(self.problem.plans, self.v):
            v = np.asarray(vfun(th), float)
            p, q = v[:m.n_params], v[m.n_params:m.n_params + len(m.obs_params)]
            x0 = v[m.n_params + len(m.obs_params):m.n_params + len(m.obs_params) + m.n_states]
            times = np.unique(plan.t_rows)
            sol = solve_ivp(lambda t, x: self.f(t, x, p), (plan.t0, times[-1]), x0, method="LSODA",
                            t_eval=times, rtol=self.rtol, atol=self.atol, jac=lambda t, x: self.jac(t, x, p))
            if not sol.success or sol.y.shape[1] != times.size:
                return np.full(self.n_res, 1e6)
            X = sol.y.T[np.searchsorted(times, plan.t_rows)]
            for k, o in enumerate(m.observables):
                rows = plan.obs_rows == k
                if not rows.any():
                    continue
                h = np.broadcast_to(self.h[k](plan.t_rows[rows], list(X[rows].T), list(p), list(q)), rows.sum())
                s = np.broadcast_to(self.s[k](list(p), list(q), h), rows.sum())
                y = plan.y_rows[rows]
                z = {"lin": lambda a: a, "log": np.log, "log10": np.log10}[o.noise.scale]
                with np.errstate(invalid="ignore", divide="ignore"):
                    out.append((z(y) - z(h)) / s)
                    if not self.sigma_fixed:
                        out.append(np.sqrt(2 * np.log(s) + 2 * self.K))
        r = np.concatenate(out)
        return np.where(np.isfinite(r), r, 1e6)

    def fit(self, u0, max_nfev=2000):
        from scipy.optimize import least_squares

        self.n_res = self.residuals(u0).size
        return least_squares(self.residuals, u0, bounds=(self.lower, self.upper), method="trf", max_nfev=max_nfev)


# --- runs ------------------------------------------------------------------------------------
def run_odeinfer(problem, U, jobs):
    """The Embedding's local likelihood fit from each start (its multistart worker), ``jobs`` processes."""
    import odeinfer as oi
    from odeinfer.estimators._likelihood_fit import _chunk
    from odeinfer.inference.multistart import run_starts

    est = oi.Embedding()
    t = time.perf_counter()
    res = run_starts(_chunk, (problem, est.solver, est.max_iter), U, n_jobs=jobs)
    wall = time.perf_counter() - t
    nll = np.array([r.get("nll", math.nan) if r.get("status") != "failed" else math.nan for r in res])
    times = np.array([r.get("time", math.nan) for r in res])
    return nll, times, sum(r.get("status") == "failed" for r in res), wall


def run_scipy(problem, U):
    from odeinfer.likelihood import Objective

    sp_ = ScipyProblem(problem)
    obj = Objective(problem)
    nll, times, failed = [], [], 0
    for u0 in U:
        t1 = time.perf_counter()
        try:
            res = sp_.fit(u0)
            ev = obj(res.x, grad=False)
            nll.append(ev.nll if ev.ok else math.nan)
            failed += not ev.ok
        except Exception:
            nll.append(math.nan)
            failed += 1
        times.append(time.perf_counter() - t1)
    return np.array(nll), np.array(times), failed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", nargs="*", default=["Boehm_JProteomeRes2014", "Crauste_CellSystems2017",
                                                      "Elowitz_Nature2000", "Fujita_SciSignal2010"])
    ap.add_argument("--starts", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--no-scipy", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample", action="store_true")
    args = ap.parse_args(argv)
    from odeinfer.inference.multistart import sample_starts
    from odeinfer.likelihood import Objective

    print(f"cpus={os.cpu_count()} starts={args.starts} seed={args.seed}")
    for name in args.problems:
        pp = load(name)
        problem = pp.problem
        obj = Objective(problem)
        u_nom = nominal_u(problem, obj)
        ev = obj(u_nom)
        ref = REFERENCE_NLL.get(name, math.nan)
        print(f"\n== {name}: {len(problem.estimated)} estimated, {obj.n_data} data")
        print(f"NLL at nominal {ev.nll:.4f} (reference {ref}); NLL+grad warm {1e3 * time_nll(obj, u_nom):.3f} ms")
        U = sample_starts(obj.lower, obj.upper, args.starts, rng=args.seed)
        a_nll, a_t, a_fail, a_wall = run_odeinfer(problem, U, args.jobs)
        print(f"odeinfer wall time for {args.starts} starts on {args.jobs} process(es): {a_wall:.1f} s")
        rows = [("odeinfer Embedding", a_nll, a_t, a_fail)]
        if not args.no_scipy:
            s_nll, s_t, s_fail = run_scipy(problem, U)
            rows.append(("scipy least_squares/LSODA", s_nll, s_t, s_fail))
        best = np.nanmin(np.concatenate([r[1] for r in rows]))
        for label, nll, t, fail in rows:
            within = int(np.sum(nll <= best + 0.1))
            print(f"{label:28s} best {np.nanmin(nll):10.4f}  within 0.1 of {best:.4f}: {within:3d}/{len(nll)}  "
                  f"failed {fail:3d}  per start median {np.median(t):7.2f} s  total {np.sum(t):8.1f} s")
        if args.sample:
            sample(problem, U[int(np.nanargmin(a_nll))])


def sample(problem, u_best):
    import arviz as az

    import odeinfer as oi
    from odeinfer.likelihood.parameters import from_scale

    start = dict(zip(problem.estimated, from_scale(u_best, [problem.params[n].scale for n in problem.estimated])))
    fit = oi.Embedding().fit(problem, start=start)
    t = time.perf_counter()
    idata = oi.bayes.sample(problem, init=fit, draws=1000, chains=4, rng=0)
    wall = time.perf_counter() - t
    names = [v for v in idata.posterior.data_vars if v not in problem.estimated]
    summ = az.summary(idata, var_names=names)
    print(f"NUTS 4 x 1000 draws (tune {idata.posterior.attrs['odeinfer_tune']}), seeded at NLL {fit.nll:.4f}: "
          f"{wall:.0f} s wall, failed evaluations {idata.posterior.attrs['odeinfer_failed_evaluations']}")
    print(summ[["mean", "sd", "ess_bulk", "ess_tail", "r_hat"]].to_string())
    div = int(idata.sample_stats["diverging"].sum())
    print(f"max r_hat {summ['r_hat'].max():.3f}, min bulk ESS {summ['ess_bulk'].min():.0f}, divergences {div}")


if __name__ == "__main__":
    main()
