"""Real problems (issues 14, 15): Benchmark-Models-PEtab problems fitted by odeinfer and by scipy.

For each problem (loaded with ``oi.petab.load``):

1. the NLL at the published nominal parameters against the collection's reference, and the warm
   negative log-likelihood + gradient with the default (``likelihood`` role) solver: median and
   best of repeated calls, the solver's steps, and where the time goes (the solver kernel with
   its directional sensitivities, the states-only solve at the same tolerance, the Python
   assembly); ``--accuracy`` adds the NLL and gradient errors of several tolerances against
   rtol 1e-11 (the measurement the default tolerance was chosen from);
2. the same ``--starts`` random starts (scrambled Sobol, ``--seed``, uniform in the bounds on the
   parameters' scales) fitted by ``oi.Embedding``'s likelihood fit (trust region on the exact
   gradient and Fisher information) and by scipy ``least_squares`` (trf, bounds, 2-point
   Jacobian) over ``solve_ivp`` (LSODA, rtol 1e-8, atol 1e-10, exact Jacobian from the same sympy
   model), whose residuals are the weighted residuals on the noise scale plus, for
   parameter-dependent noise sds, the exact pseudo-residuals ``sqrt(2 ln sigma + 2 K)`` (so that
   ``0.5 ||r||^2`` is the NLL up to a constant; experiments with the same trajectory share one
   solve, as in odeinfer's objective). Both run on ``--jobs`` processes; every end
   point of both is scored by the same tight objective (Rodas, rtol 1e-10, atol 1e-12), so the
   numbers compare.

Prints, per problem and method: best NLL, starts within 0.1 of the overall best (both methods),
failed starts (counted, not dropped), median time per start, time per converged start (the
CPU time of all starts over the number within 0.1 of the best) and the wall time.
``--reference FILE`` writes these tables (markdown) with the command that made them.

    python benchmarks/bench_petab.py --problems Boehm_JProteomeRes2014 --starts 20
    python benchmarks/bench_petab.py --starts 100 --jobs 2 --reference tests/reference/petab_benchmarks.md
    python benchmarks/bench_petab.py --problems Boehm_JProteomeRes2014 --starts 20 --no-scipy --sample

``--log DIR`` writes each start's record (start, end point, status, error, evaluations, wall and CPU
seconds) to ``DIR/<problem>.<method>.jsonl`` as soon as the start ends; a rerun with the same
``--log``, ``--starts`` and ``--seed`` skips the recorded starts (an interrupted run resumes, and a run
with ``--no-scipy`` followed by one without it adds only scipy's starts). ``--report-only`` scores and
reports the recorded starts without running any: a partial run is reported as "k of N starts run".

    python benchmarks/bench_petab.py --problems Elowitz_Nature2000 --starts 50 --log runs/ --no-scipy
    python benchmarks/bench_petab.py --problems Elowitz_Nature2000 --starts 50 --log runs/ --reference out.md

``--sample``: after the fits, NUTS on the posterior (uniform priors in the bounds on the
parameters' scales; ``oi.bayes.sample(problem, init=fit)``) seeded at the best fit (with ``--starts 0``:
at the fit started from the nominal parameters), ``--chains`` x ``--draws`` (default 4 x 1000, default
tuning, 2 cores); prints (and writes to ``--sample-out``) wall and CPU time, r_hat, bulk and tail ESS per
parameter, divergences, tree depth, step size and ``oi.diagnostics.check``'s verdict.
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
    """(median, best) seconds of ``obj(u)`` (NLL, gradient and Fisher information), warm."""
    obj(u)
    times = []
    for _ in range(n):
        t = time.perf_counter()
        obj(u)
        times.append(time.perf_counter() - t)
    return float(np.median(times)), float(np.min(times))


def leaders(obj):
    """The solved runs of ``obj`` (experiments sharing a trajectory are solved once)."""
    return [r for r in obj.runs if r.share is None]


def profile(obj, u, n=50):
    """Where one warm evaluation's time goes: ``(steps, kernel s, states-only s)``, medians over ``n``
    repeats of each segment solve (kernel: the solver call with its directional sensitivities;
    states-only: the same solve without sensitivities, same tolerances)."""
    import odeinfer as oi

    obj(u)
    theta = obj.natural(u)
    steps, kern, plain = 0, 0.0, 0.0
    for run in leaders(obj):
        v, Jv = run.mapping(theta)
        p = v[:run.n_p].copy()
        x = v[run.n_p + run.n_q:run.n_p + run.n_q + run.n_s].copy()
        for seg in run.segments:  # segment calls as run.states makes them (the first: x, p as mapped)
            cols = run.traj_cols
            pdir = np.zeros((seg.solver.compiled.n_params, max(cols.size, 1)))
            pdir[:run.n_p, :cols.size] = Jv[:run.n_p][:, cols]
            s0 = np.zeros((run.n_s, pdir.shape[1]))
            s0[:, :cols.size] = Jv[run.n_p + run.n_q:run.n_p + run.n_q + run.n_s][:, cols]
            pj = np.zeros(seg.solver.compiled.n_params)
            pj[:run.n_p] = p
            for k, val, r, rate in seg.p_inputs:
                pj[k] = val
                pdir[k] = 0.0
                if r is not None:
                    pj[r] = rate
            solver = seg.solver
            method = oi.Rodas if getattr(solver, "stiff", solver.method == "rodas") else oi.Dopri5
            states_only = oi.bind(oi.Problem(solver.compiled.model, solver.t, t0=solver.t0),
                                  solver=method(rtol=solver.rtol, atol=solver.atol))
            for fn, args, slot in ((solver, (pj, x, pdir, s0), 0), (states_only, (pj, x), 1)):
                fn(*args)
                ts = []
                for _ in range(n):
                    t = time.perf_counter()
                    fn(*args)
                    ts.append(time.perf_counter() - t)
                if slot == 0:
                    kern += float(np.median(ts))
                    steps += int(solver.info[1])
                else:
                    plain += float(np.median(ts))
            y, _, _ = solver(pj, x, pdir, s0)
            x = np.ascontiguousarray(y[-1])
    return steps, kern, plain


def accuracy(problem, u, tolerances=((1e-8, 1e-10), (1e-7, 1e-9), (1e-6, 1e-8), (1e-5, 1e-7))):
    """Per tolerance: ``(rtol, atol, |NLL error|, stationarity excess, steps)`` against Rodas at rtol
    1e-11 (atol 1e-13). The stationarity excess ``dg^T F^+ dg / 2`` (``dg`` the gradient's error,
    ``F`` the Fisher information of the reference) is how far above the optimum, in NLL units, a
    point where the computed gradient vanishes can be."""
    import odeinfer as oi
    from odeinfer.likelihood import Objective

    ref = Objective(problem, solver=oi.Rodas(rtol=1e-11, atol=1e-13, max_steps=10**6))(u)
    w, V = np.linalg.eigh(ref.fim)
    keep = w > w.max() * 1e-12
    Fp = (V[:, keep] / w[keep]) @ V[:, keep].T
    out = []
    for rtol, atol in tolerances:
        obj = Objective(problem, solver=oi.Auto(rtol=rtol, atol=atol))
        ev = obj(u)
        dg = ev.grad - ref.grad
        steps = sum(int(seg.solver.info[1]) for run in leaders(obj) for seg in run.segments)
        out.append((rtol, atol, abs(ev.nll - ref.nll), 0.5 * float(dg @ Fp @ dg), steps))
    return out


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
        self.s = [sp.lambdify(args + [o.symbol], o.sigma_expr, "numpy") for o in m.observables]
        self.sigma_fixed = all(not o.sigma_expr.free_symbols & (set(xs) | set(ps) | set(qs) | {o.symbol})
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
        n_p, n_q = m.n_params, len(m.obs_params)
        vs = [np.asarray(vfun(th), float) for vfun in self.v]
        # experiments with the same start, parameters and initial states (e.g. a condition split by
        # its per-measurement noise parameters) share one solve over the union of their times
        keys = [(plan.t0, v[:n_p].tobytes(), v[n_p + n_q:n_p + n_q + m.n_states].tobytes())
                for plan, v in zip(self.problem.plans, vs)]
        solved = {}
        for key, plan, v in zip(keys, self.problem.plans, vs):
            if key in solved:
                continue
            times = np.unique(np.concatenate([pl.t_rows for k, pl in zip(keys, self.problem.plans) if k == key]))
            p, x0 = v[:n_p], v[n_p + n_q:n_p + n_q + m.n_states]
            sol = solve_ivp(lambda t, x: self.f(t, x, p), (plan.t0, times[-1]), x0, method="LSODA",
                            t_eval=times, rtol=self.rtol, atol=self.atol, jac=lambda t, x: self.jac(t, x, p))
            if not sol.success or sol.y.shape[1] != times.size:
                return np.full(self.n_res, 1e6)
            solved[key] = (times, sol.y.T)
        for key, plan, v in zip(keys, self.problem.plans, vs):
            p, q = v[:n_p], v[n_p:n_p + n_q]
            times, Y = solved[key]
            X = Y[np.searchsorted(times, plan.t_rows)]
            for k, o in enumerate(m.observables):
                rows = plan.obs_rows == k
                if not rows.any():
                    continue
                h = np.broadcast_to(self.h[k](plan.t_rows[rows], list(X[rows].T), list(p), list(q)), rows.sum())
                s = np.broadcast_to(self.s[k](plan.t_rows[rows], list(X[rows].T), list(p), list(q), h), rows.sum())
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
def scoring_objective(problem):
    """The objective every end point is scored with (tight tolerances, the same for both methods)."""
    import odeinfer as oi
    from odeinfer.likelihood import Objective

    return Objective(problem, solver=oi.Rodas(rtol=1e-10, atol=1e-12, max_steps=10**6))


def score(obj, U, cache=None):
    """The scoring NLL of each end point (NaN: none, or not computable). ``cache``: a JSON-lines file of
    ``{"u": end point, "nll": score}`` read first and appended to, so a rerun of a report does not
    score the same end points again."""
    import json

    known = {}
    if cache is not None and cache.exists():
        for line in cache.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            known[tuple(r["u"])] = math.nan if r["nll"] is None else float(r["nll"])
    out = []
    for u in U:
        key = tuple(float(v) for v in u)
        if np.all(np.isfinite(u)) and key in known:
            out.append(known[key])
            continue
        ev = obj(u, grad=False) if np.all(np.isfinite(u)) else None
        out.append(ev.nll if ev is not None and ev.ok else math.nan)
        if cache is not None and np.all(np.isfinite(u)):
            with open(cache, "a") as fh:
                fh.write(json.dumps({"u": list(key), "nll": out[-1] if math.isfinite(out[-1]) else None}) + "\n")
    return np.array(out)


def run_starts_logged(kind, problem, U, jobs, log=None, run=True):
    """Fit ``problem`` from each row of ``U`` with ``kind`` ("odeinfer": the Embedding's local likelihood
    fit, its multistart worker and default solver; "scipy": :class:`ScipyProblem`) on ``jobs`` processes.

    With ``log`` (a JSON-lines file), each start's record is appended as soon as it ends, and the starts
    already recorded there (same index, same start vector) are not run again, so an interrupted run
    resumes and a partial one can be reported (``run=False``: only read ``log``). Returns the records of every start in ``U`` that has
    one, ordered by index, and the wall time of this call."""
    from odeinfer.inference.multistart import run_starts

    done = read_log(log, U) if log is not None else {}
    todo = np.array([i for i in range(U.shape[0]) if i not in done], int)
    t = time.perf_counter()
    if todo.size and run:
        for r in run_starts(_worker, (kind, problem, todo, log), U[todo], n_jobs=jobs):
            done[r["index"]] = r
    return [done[i] for i in sorted(done)], time.perf_counter() - t


def read_log(log, U):
    """``{index: record}`` of the starts recorded in ``log`` (JSON lines); a record whose start is not
    ``U``'s row of the same index (another seed or problem) is an error, not silently mixed in."""
    import json

    out = {}
    if not log.exists():
        return out
    for line in log.read_text().splitlines():
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError:  # a line cut by an interrupted write: that start runs again
            continue
        i = int(r["index"])
        if i >= U.shape[0] or not np.array_equal(np.asarray(r["start"], float), U[i]):
            raise SystemExit(f"{log.name}: start {i} was recorded from another start vector (another seed, problem "
                             "or start count); use another --log directory")
        out[i] = r
    return out


def _worker(payload, chunk):
    """Worker (top level, picklable): the fits of ``chunk`` (local indices into ``todo``), one fitter
    per process; each record appended to ``log`` as soon as its fit ends. A start that raises is failed."""
    import json

    kind, problem, todo, log = payload
    try:
        fit = _fitter(kind, problem)
    except Exception as exc:
        fit = None
        err = f"{type(exc).__name__}: {exc}"
    out = []
    for i, u0 in chunk:
        r = fit(int(todo[i]), u0) if fit is not None else {"index": int(todo[i]), "status": "failed", "error": err}
        r = {"index": int(todo[i]), "start": [float(v) for v in u0], "u": None if r.get("u") is None else
             [float(v) for v in r["u"]], "status": r.get("status"), "error": r.get("error"),
             "message": r.get("message"), "nll": r.get("nll"), "n_eval": r.get("n_eval"), "time": r.get("time"),
             "cpu_time": r.get("cpu_time")}
        if log is not None:
            with open(log, "a") as fh:
                fh.write(json.dumps(r) + "\n")
        out.append(r)
    return out


def _fitter(kind, problem):
    """``fit(index, u0) -> record`` for one process (its objective or scipy problem built once)."""
    if kind == "odeinfer":
        import odeinfer as oi
        from odeinfer.estimators._likelihood_fit import _one, likelihood_solver, make_objective

        est = oi.Embedding()
        obj = make_objective(problem, likelihood_solver(est))
        return lambda i, u0: _one(obj, i, u0, est.iterations("likelihood"))
    sp_ = ScipyProblem(problem)

    def fit(i, u0):
        t1, c1 = time.perf_counter(), time.process_time()
        try:
            res = sp_.fit(u0)
            return {"index": i, "u": res.x, "status": "converged" if res.status > 0 else "max_iter",
                    "n_eval": res.nfev, "time": time.perf_counter() - t1, "cpu_time": time.process_time() - c1}
        except Exception as exc:
            return {"index": i, "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                    "time": time.perf_counter() - t1, "cpu_time": time.process_time() - c1}
    return fit


def _collect(res, k):
    """End points, (wall, CPU) seconds per start, statuses, evaluations per start."""
    X = np.array([r["u"] if r.get("status") != "failed" and r.get("u") is not None else np.full(k, np.nan)
                  for r in res]).reshape(len(res), k)
    def num(r, key):
        return math.nan if r.get(key) is None else float(r[key])

    times = np.array([[num(r, "time"), num(r, "cpu_time")] for r in res]).reshape(len(res), 2)
    return X, times, [r.get("status") for r in res], np.array([num(r, "n_eval") for r in res], float)


def summarise(label, nll, times, statuses, evals, wall, best):
    """One row: best, starts within 0.1 of ``best``, failed (no end point or no finite NLL), times
    (CPU seconds of the worker processes per start: the work, whatever the machine's load; and the
    wall time of the whole multistart)."""
    n = len(nll)
    within = int(np.sum(nll <= best + 0.1))
    failed = int(sum(s == "failed" or not math.isfinite(v) for s, v in zip(statuses, nll)))
    cpu = float(np.nansum(times[:, 1]))
    return {"method": label, "starts": n, "best": float(np.nanmin(nll)) if np.isfinite(nll).any() else math.nan,
            "within": within, "failed": failed, "median_cpu_s": float(np.nanmedian(times[:, 1])),
            "median_wall_s": float(np.nanmedian(times[:, 0])), "median_evals": float(np.nanmedian(evals)),
            "per_converged_s": cpu / within if within else math.inf, "cpu_s": cpu, "wall_s": wall}


def main(argv=None):
    import sys

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", nargs="*", default=["Boehm_JProteomeRes2014", "Crauste_CellSystems2017",
                                                      "Elowitz_Nature2000", "Fujita_SciSignal2010"])
    ap.add_argument("--starts", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--no-scipy", action="store_true")
    ap.add_argument("--no-odeinfer", action="store_true", help="with --log: run no odeinfer start (report the "
                    "recorded ones), e.g. to run scipy's starts in another process")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-timing", action="store_true", help="skip the warm NLL timing and its profile")
    ap.add_argument("--sample", action="store_true",
                    help="NUTS seeded at the best fit (at the fit from the nominal parameters with --starts 0)")
    ap.add_argument("--draws", type=int, default=1000, help="--sample: kept draws per chain")
    ap.add_argument("--tune", type=int, default=None, help="--sample: tuning steps (default oi.bayes.sample's)")
    ap.add_argument("--chains", type=int, default=4, help="--sample: chains (on 2 cores)")
    ap.add_argument("--sample-out", type=Path, help="--sample: also write the sampling summary to this file")
    ap.add_argument("--accuracy", action="store_true", help="NLL and gradient errors of several tolerances")
    ap.add_argument("--reference", type=Path, help="write the multistart tables (markdown) to this file")
    ap.add_argument("--append", action="store_true", help="append to --reference instead of rewriting it")
    ap.add_argument("--log", type=Path, help="directory of per-start records (<problem>.<method>.jsonl), each "
                    "written as its start ends; a rerun skips the starts recorded there")
    ap.add_argument("--report-only", action="store_true", help="with --log: score and report the recorded "
                    "starts, run none")
    args = ap.parse_args(argv)
    if (args.report_only or args.no_odeinfer) and args.log is None:
        ap.error("--report-only and --no-odeinfer read the records of --log DIR; give --log")
    if args.log is not None:
        args.log.mkdir(parents=True, exist_ok=True)
    # the models' own compiled kernels, not the shared tier that answers while they compile in the
    # background: the warm-up below compiles them (into the disk cache the worker processes load)
    os.environ.setdefault("ODEINFER_TIERED", "0")
    from odeinfer.inference.multistart import sample_starts
    from odeinfer.likelihood import Objective

    command = "python benchmarks/bench_petab.py " + " ".join(sys.argv[1:] if argv is None else argv)
    load_avg = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    print(f"cpus={os.cpu_count()} starts={args.starts} seed={args.seed} jobs={args.jobs} load={load_avg:.1f}")
    tables = []
    for name in args.problems:
        pp = load(name)
        problem = pp.problem
        obj = Objective(problem)
        u_nom = nominal_u(problem, obj)
        ev = obj(u_nom)
        ref = REFERENCE_NLL.get(name, math.nan)
        print(f"\n== {name}: {len(problem.estimated)} estimated, {obj.n_data} data, solver {obj.solver!r}")
        print(f"NLL at nominal {ev.nll:.4f} (reference {ref})")
        if not args.no_timing:
            med, best_t = time_nll(obj, u_nom)
            steps, kern, plain = profile(obj, u_nom)
            print(f"NLL+grad+FIM warm: median {1e3 * med:.3f} ms, best {1e3 * best_t:.3f} ms; {steps} solver steps: "
                  f"kernel with sensitivities {1e3 * kern:.3f} ms ({1e6 * kern / max(steps, 1):.2f} us/step), states "
                  f"only {1e3 * plain:.3f} ms, assembly {1e3 * (med - kern):.3f} ms")
        if args.accuracy:
            for rtol, atol, dnll, stat, st in accuracy(problem, u_nom):
                print(f"  rtol {rtol:g} atol {atol:g}: |NLL error| {dnll:.1e}, stationarity excess {stat:.1e}, "
                      f"{st} steps")
        if args.starts < 1:
            if args.sample:
                sample(problem, u_nom, draws=args.draws, tune=args.tune, chains=args.chains, out=args.sample_out)
            continue
        U = sample_starts(obj.lower, obj.upper, args.starts, rng=args.seed)
        scorer = scoring_objective(problem)
        runs = []
        for kind, label in (("odeinfer", "odeinfer Embedding"), ("scipy", "scipy least_squares/LSODA")):
            if kind == "scipy" and args.no_scipy:
                continue
            log = None if args.log is None else args.log / f"{name}.{kind}.jsonl"
            run = not (args.report_only or kind == "odeinfer" and args.no_odeinfer)
            recs, wall = run_starts_logged(kind, problem, U, args.jobs, log, run=run)
            if not recs:
                continue
            X, t_, st_, ev_ = _collect(recs, U.shape[1])
            nll = score(scorer, X, None if log is None else log.with_suffix(".scores.jsonl"))
            if kind == "odeinfer":
                X_o = X
            if len(recs) < args.starts:
                label += f" ({len(recs)} of {args.starts} starts run)"
            if log is not None:  # the starts may have run in several calls: the sum of their wall times
                wall = float(np.nansum(t_[:, 0]))
            runs.append((label, nll, t_, st_, ev_, wall))
            for r, v in zip(recs, nll):
                if r.get("status") == "failed" or not math.isfinite(v):
                    print(f"  {kind} start {r['index']} failed: status {r.get('status')}, scored NLL {v}, "
                          f"error {r.get('error')}, message {r.get('message')}")
        if not runs:
            continue
        best = np.nanmin(np.concatenate([r[1] for r in runs]))
        rows = [summarise(*r, best) for r in runs]
        for r in rows:
            print(f"{r['method']:26s} best {r['best']:10.4f}  within 0.1 of {best:.4f}: {r['within']:3d}/{r['starts']}  "
                  f"failed {r['failed']:3d}  per start median {r['median_cpu_s']:7.3f} s CPU ({r['median_wall_s']:.2f} s "
                  f"wall, {r['median_evals']:.0f} evaluations)  per converged start {r['per_converged_s']:8.2f} s CPU  "
                  f"wall {r['wall_s']:7.1f} s on {args.jobs} process(es)")
        tables.append((name, ref, best, rows))
        if args.sample:
            sample(problem, X_o[int(np.nanargmin(runs[0][1]))], draws=args.draws, tune=args.tune, chains=args.chains,
                   out=args.sample_out)
    if args.reference:
        write_reference(args.reference, tables, command, args, load_avg)


def write_reference(path, tables, command, args, load_avg):
    head = ["# Benchmark-Models-PEtab: multistart odeinfer vs scipy", ""] if not (args.append and path.exists()) else []
    lines = head + [
             f"Written by `{command}` ({args.starts} starts per problem, scrambled Sobol, seed {args.seed}, uniform in",
             "the bounds on the parameters' scales; the same starts for both methods; "
             f"{args.jobs} process(es), load average {load_avg:.1f} at the start on {os.cpu_count()} cores).",
             "odeinfer: `oi.Embedding()`'s likelihood fit (fides' trust region, exact gradient and Fisher information,",
             "default `likelihood` solver). scipy: `least_squares` (trf, 2-point Jacobian) over `solve_ivp` (LSODA,",
             "rtol 1e-8, atol 1e-10). Every end point is scored by the same objective (Rodas rtol 1e-10, atol 1e-12).",
             "*within 0.1*: end points within 0.1 of the best NLL of both methods; *failed*: starts with no end point",
             "or a non-finite NLL (counted, not dropped); *CPU s per converged start*: CPU time of all starts over the",
             "number within 0.1. Times per start are CPU seconds of the worker process (the machine is shared: wall",
             "times per start are inflated by the load, quoted in brackets); *wall s*: " + (
                 "the sum of the starts' wall times (their records, `--log`, may come from several calls)."
                 if args.log is not None else "the whole multistart."), ""]
    for name, ref, best, rows in tables:
        lines += [f"## {name} (published NLL {ref})", "",
                  "| method | best NLL | within 0.1 of best | failed | median CPU s/start (wall) | median evaluations | "
                  "CPU s per converged start | wall s |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['method']} | {r['best']:.4f} | {r['within']}/{r['starts']} ({r['within'] / r['starts']:.0%}) "
                         f"| {r['failed']} | {r['median_cpu_s']:.2f} ({r['median_wall_s']:.2f}) | {r['median_evals']:.0f} | "
                         f"{r['per_converged_s']:.2f} | {r['wall_s']:.0f} |")
        lines.append("")
    if args.append and path.exists():
        lines = [path.read_text().rstrip("\n"), ""] + lines
    path.write_text("\n".join(lines))


def sample(problem, u_best, *, draws=1000, tune=None, chains=4, cores=2, out=None):
    """NUTS on ``problem``'s posterior seeded at the fit from ``u_best``: prints (and writes to ``out``)
    wall and CPU time (this process and its chain processes), the summary per parameter (r_hat,
    bulk and tail ESS), divergences, tree depth, step size and ``oi.diagnostics.check``'s verdict."""
    import resource

    import arviz as az

    import odeinfer as oi
    from odeinfer.likelihood.parameters import from_scale

    start = dict(zip(problem.estimated, from_scale(u_best, [problem.params[n].scale for n in problem.estimated])))
    fit = oi.Embedding().fit(problem, start=start)
    t, cpu = time.perf_counter(), time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    idata = oi.bayes.sample(problem, init=fit, draws=draws, tune=tune, chains=chains, cores=cores, rng=0)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_children = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    post, ss = idata.posterior, idata.sample_stats
    names = [v for v in post.data_vars if v not in problem.estimated]
    summ = az.summary(idata, var_names=names, round_to="none")  # unrounded: r_hat 1.004 is not 1.00
    depth, size, eps = (np.asarray(ss[k]) for k in ("tree_depth", "n_steps", "step_size"))
    lines = [
        f"NUTS {chains} x {draws} draws (tune {post.attrs['odeinfer_tune']}, cores {cores}, rng 0), seeded at the "
        f"fit NLL {fit.nll:.4f} ({fit.status}); load average {os.getloadavg()[0]:.1f} at the end",
        f"wall {wall:.0f} s; CPU {cpu:.0f} s in this process + {cpu_children:.0f} s in the chain processes; "
        f"failed evaluations (parent process) {post.attrs['odeinfer_failed_evaluations']}",
        summ[["mean", "sd", "hdi_3%", "hdi_97%", "ess_bulk", "ess_tail", "r_hat"]].to_string(
            float_format=lambda v: f"{v:.4g}"),
        f"max r_hat {summ['r_hat'].max():.3f}, min bulk ESS {summ['ess_bulk'].min():.0f}, min tail ESS "
        f"{summ['ess_tail'].min():.0f}, divergences {int(ss['diverging'].sum())}",
        f"tree depth per chain: mean {np.round(depth.mean(axis=1), 2).tolist()}, max {depth.max(axis=1).tolist()}; "
        f"at max depth {float(np.mean(np.asarray(ss['reached_max_treedepth']))):.1%}; leapfrog steps in all kept "
        f"draws {int(size.sum())} (mean {size.mean():.1f} per draw); step size per chain "
        f"{np.round(eps[:, -1], 4).tolist()}",
        repr(oi.diagnostics.check(idata)),
    ]
    text = "\n".join(lines)
    print(text)
    if out is not None:
        out.write_text(text + "\n")


if __name__ == "__main__":
    main()
