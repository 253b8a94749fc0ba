"""odeinfer side by side with pyPESTO + AMICI on the Benchmark-Models-PEtab problems (issue 15).

For each problem in tests/data/petab (both tools read the same PEtab files):

1. the same ``--starts`` starts, drawn once (Sobol, ``--seed``, uniform in the bounds on the
   parameters' estimation scales), each fitted in this process by both tools, one after the other,
   alternating which goes first (so that both meet the same load on a shared machine):
   * odeinfer: one local fit of ``oi.Embedding(starts=n).fit(problem, start=starts)``'s multistart
     (a trust region as fides' on the exact gradient and the Fisher information, default tolerances and
     iteration budget, the likelihood's default solver ``oi.Auto(rtol=1e-6, atol=1e-8)``); after the
     last start, the best start's fit is continued as the multistart continues it (its time added to
     that start's);
   * pyPESTO: ``pypesto.optimize.minimize(problem, FidesOptimizer(), n_starts=1)`` with the start
     as ``x_guesses`` (pyPESTO's default fides Hessian: hybrid Fisher information / BFGS) over
     ``pypesto.petab.PetabImporter(...).create_problem()`` (AMICI, forward sensitivities, AMICI's
     default tolerances rtol 1e-8, atol 1e-16);
2. per tool: best objective (each tool's own PEtab negative log-likelihood; the other tool's
   value at that point is printed as a cross-check), starts converged (final objective within
   0.1 of the best of both tools), failed starts, median wall time per start, the whole
   multistart's time (the sum of the starts' wall times) and the time per converged start (whole
   multistart time / converged starts); each start's process CPU time is printed and kept in the
   JSON too (both tools run single-threaded in this process; on an oversubscribed machine it is
   the fairer measure of work);
3. the issue's target per problem: odeinfer's best objective at most 0.01 above pyPESTO's
   (equal to the published values' 3 decimals, or better), and pyPESTO's time per converged start
   at least 10 times odeinfer's, with a 95% bootstrap interval of that ratio over the starts
   (``--intervals FILE`` prints it again for an earlier ``--json`` report);
4. ``--warm``: Boehm's warm NLL + gradient at the nominal parameters (median of 200 calls):
   odeinfer's Objective, AMICI's ``run_simulations`` alone (llh and sllh, the data already
   filled in) and pyPESTO's objective call (AMICI plus pyPESTO's parameter mapping).

Model compilation (AMICI's C++ build, odeinfer's kernels) happens before the clocks start and is
reported separately. Needs the ``bench`` extra (``pip install ".[bench]"``: pyPESTO, AMICI, PEtab;
AMICI builds from source and needs swig, a BLAS, HDF5, cmake and a C++ compiler; the AMICI model
is compiled with the ``swig`` on PATH, which must be the one AMICI itself was built with).

    python benchmarks/bench_pypesto.py --starts 100             # the issue's comparison (hours)
    python benchmarks/bench_pypesto.py --starts 10 --warm       # the recorded short version
    python benchmarks/bench_pypesto.py --problems Boehm_JProteomeRes2014 --starts 5

Output: a table per problem on stdout and, with ``--json FILE``, every start's figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PETAB = HERE.parent / "tests" / "data" / "petab"
PROBLEMS = ("Perelson_Science1996", "Boehm_JProteomeRes2014", "Crauste_CellSystems2017", "Elowitz_Nature2000",
            "Fujita_SciSignal2010", "Zheng_PNAS2012")
WITHIN = 0.1  # a start has converged when its final objective is within 0.1 of the best of both tools
EQUAL = 0.01  # "equal best objective": the published values' 3 decimals
SPEEDUP = 10.0  # the issue's target on the time per converged start


def yaml_of(name):
    return PETAB / name / f"{name}.yaml"


def draw_starts(pp, n, seed):
    """``(U, names)``: n starts on the estimation scales (Sobol, uniform in the bounds), odeinfer's order."""
    from odeinfer.inference.multistart import sample_starts

    obj = pp.objective()
    return sample_starts(obj.lower, obj.upper, n, rng=seed), list(pp.problem.estimated)


def pypesto_problem(name, folder):
    """pyPESTO's problem of ``name`` (AMICI model compiled into ``folder`` on first use)."""
    import amici.sim.sundials  # noqa: F401  (amici 1.0.1 loads the model module's swig types only after it)
    import pypesto.petab

    for logger in ("amici", "pypesto", "fides"):
        logging.getLogger(logger).setLevel(logging.WARNING)
    importer = pypesto.petab.PetabImporter.from_yaml(str(yaml_of(name)), output_folder=str(folder / name),
                                                     model_name=name)
    return importer.create_problem()


def odeinfer_runner(pp):
    """``(one(u) -> (f, u_opt, status), finish(), setup seconds)``: one local fit of odeinfer's multistart
    (the worker ``Embedding(starts=n).fit`` runs per start: default solver, tolerances, max_iter);
    ``finish()`` then does what the multistart does after its starts, continuing the best start's fit
    (``_likelihood_fit.polish``), and returns ``(start index, NLL, point, wall s, CPU s, the polish record)``."""
    import odeinfer as oi
    from odeinfer.estimators._likelihood_fit import _one, likelihood_solver, make_objective, polish

    est = oi.Embedding()
    t = time.perf_counter()
    obj = make_objective(pp.problem, likelihood_solver(est))
    obj(pp.u_nominal)  # the model's kernels compiled (or loaded from the cache) before the clocks start
    _one(obj, -1, pp.u_nominal, 2)  # and the trust region's compiled step (odeinfer.estimators._trust_step)
    setup = time.perf_counter() - t

    runs = []

    def one(u):
        r = _one(obj, len(runs), u, est.iterations("likelihood"))
        runs.append(r)
        ok = r["status"] != "failed" and math.isfinite(r.get("nll", math.nan))
        return (r["nll"] if ok else math.nan), r.get("u"), r["status"] + f": {r.get('error') or r.get('message')}"

    def finish():
        ok = [r for r in runs if math.isfinite(r.get("nll", math.nan))]
        if not ok:
            return None
        t, c = time.perf_counter(), time.process_time()
        best = polish(obj, min(ok, key=lambda r: r["nll"]), est.iterations("likelihood"))
        return (best["index"], best["nll"], best["u"], time.perf_counter() - t, time.process_time() - c,
                best.get("polish"))

    return one, finish, setup


def pypesto_runner(problem, names):
    """``one(u) -> (f, u_opt, status)``: ``pypesto.optimize.minimize`` from the start ``u`` (odeinfer's
    order, estimation scale) with fides (pyPESTO's default Hessian: hybrid FIM / BFGS)."""
    import pypesto.engine
    import pypesto.optimize

    free = [problem.x_names[i] for i in problem.x_free_indices]
    missing = sorted(set(names) ^ set(free))
    if missing:
        raise SystemExit(f"pyPESTO and odeinfer estimate different parameters: {missing}")
    perm = [free.index(n) for n in names]
    optimizer = pypesto.optimize.FidesOptimizer(verbose=logging.ERROR)

    def one(u):
        full = np.zeros((1, problem.dim_full))
        full[0, problem.x_fixed_indices] = problem.x_fixed_vals
        for k, n in enumerate(names):
            full[0, problem.x_names.index(n)] = u[k]
        problem.set_x_guesses(full)
        res = pypesto.optimize.minimize(problem, optimizer, n_starts=1, engine=pypesto.engine.SingleCoreEngine(),
                                        progress_bar=False).optimize_result.list[0]
        x0 = np.asarray(res.x0, float)
        x0 = (x0[problem.x_free_indices] if x0.size == problem.dim_full else x0)[perm]
        if np.max(np.abs(x0 - u)) > 1e-9:
            raise SystemExit("pyPESTO started from another point than the one given")
        f = res.fval if res.fval is not None and math.isfinite(res.fval) else math.nan
        if res.x is None or not math.isfinite(f):  # a failed start (e.g. AMICI could not integrate at x0)
            return math.nan, None, f"failed: {res.message}"
        x = np.asarray(res.x, float)
        return f, (x[problem.x_free_indices] if x.size == problem.dim_full else x)[perm], str(res.exitflag)

    return one


def run_both(one_o, one_p, U):
    """Every start by both tools, alternating which goes first (both meet the same machine load);
    wall time around each local fit."""
    out = {k: {"f": np.full(len(U), np.nan), "time": np.full(len(U), np.nan), "cpu": np.full(len(U), np.nan),
               "status": [None] * len(U), "u": [None] * len(U)} for k in ("odeinfer", "pypesto")}
    for i, u in enumerate(U):
        order = (("odeinfer", one_o), ("pypesto", one_p))
        for key, one in (order if i % 2 == 0 else order[::-1]):
            t, c = time.perf_counter(), time.process_time()
            f, x, status = one(np.array(u, float))
            r = out[key]
            r["time"][i], r["cpu"][i] = time.perf_counter() - t, time.process_time() - c
            r["f"][i], r["u"][i], r["status"][i] = f, x, status
        print(f"    start {i}: odeinfer {out['odeinfer']['f'][i]:.4f} in {out['odeinfer']['time'][i]:.1f} s "
              f"(CPU {out['odeinfer']['cpu'][i]:.1f} s); pyPESTO {out['pypesto']['f'][i]:.4f} in "
              f"{out['pypesto']['time'][i]:.1f} s (CPU {out['pypesto']['cpu'][i]:.1f} s)"
              + "".join(f"; {k}: {out[k]['status'][i]}" for k in out if not np.isfinite(out[k]["f"][i])), flush=True)
    for r in out.values():
        r["wall"] = float(np.sum(r["time"]))
        r["best_u"] = r["u"][int(np.nanargmin(r["f"]))] if np.any(np.isfinite(r["f"])) else None
    return out["odeinfer"], out["pypesto"]


def pypesto_f(problem, u, names):
    """pyPESTO's objective at odeinfer's point ``u`` (odeinfer's order, estimation scale)."""
    free = [problem.x_names[i] for i in problem.x_free_indices]
    x = np.empty(len(free))
    for k, n in enumerate(names):
        x[free.index(n)] = u[k]
    return float(problem.objective(x))


def speed_up(so, sp):
    """``(ratio, kind)``: pyPESTO's time per converged start over odeinfer's. Where pyPESTO has no
    converged start its time per converged start is above its whole multistart time: the ratio is a
    lower bound (kind ">="); where odeinfer has none, 0 (kind "=")."""
    if not so["converged"]:
        return 0.0, "="
    if not sp["converged"]:
        return sp["wall_s"] / so["s_per_converged"], ">="
    return sp["s_per_converged"] / so["s_per_converged"], "="


def speed_up_interval(f_o, t_o, f_p, t_p, best_all, n_boot=2000, seed=0, level=0.95):
    """Percentile bootstrap interval of the speed-up per converged start over the starts: the same start
    indices drawn with replacement for both tools (the starts are paired), each tool's whole time (the sum of
    the drawn starts' times) over its converged starts among them (final objective within ``WITHIN`` of
    ``best_all``, held fixed). A draw where odeinfer converges nowhere counts 0, where pyPESTO converges
    nowhere +inf (its time per converged start is unbounded). With a few converged starts, the ratio is
    mostly the ratio of two binomial counts: this interval says how far a target read off one run can be
    trusted."""
    f_o, t_o, f_p, t_p = (np.asarray(a, float) for a in (f_o, t_o, f_p, t_p))
    conv_o = np.isfinite(f_o) & (f_o <= best_all + WITHIN)
    conv_p = np.isfinite(f_p) & (f_p <= best_all + WITHIN)
    idx = np.random.default_rng(seed).integers(0, len(f_o), size=(n_boot, len(f_o)))
    co, cp = conv_o[idx].sum(axis=1), conv_p[idx].sum(axis=1)
    wo, wp = t_o[idx].sum(axis=1), t_p[idx].sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(co == 0, 0.0, np.where(cp == 0, np.inf, (wp / cp) / (wo / co)))
    a = (1.0 - level) / 2.0  # quantiles taken among the draws (no interpolation towards an infinite draw)
    return tuple(float(np.quantile(ratio, q, method="inverted_cdf")) for q in (a, 1.0 - a))


def interval_text(ci):
    return f"95% bootstrap interval over the starts {ci[0]:.2f}x to {ci[1]:.2f}x"


def intervals_of(path):
    """Per problem of a ``--json`` report: (speed-up, its kind, its 95% interval over the starts)."""
    out = {}
    for name, rec in json.loads(Path(path).read_text())["problems"].items():
        o, p = rec["odeinfer"], rec["pypesto"]
        f_o, f_p = (np.array([math.nan if v is None else v for v in r["f"]], float) for r in (o, p))
        best_all = float(np.nanmin(np.concatenate([f_o, f_p])))
        out[name] = (rec["speedup_per_converged"], rec["speedup_kind"],
                     speed_up_interval(f_o, o["time"], f_p, p["time"], best_all))
    return out


def summary(res, best_all):
    f = res["f"]
    ok = np.isfinite(f)
    conv = int(np.sum(f[ok] <= best_all + WITHIN))
    return {"best": float(np.nanmin(f)) if ok.any() else math.nan, "converged": conv, "failed": int(np.sum(~ok)),
            "median_s": float(np.nanmedian(res["time"])), "wall_s": res["wall"],
            "s_per_converged": res["wall"] / conv if conv else math.inf}


def warm_boehm(folder, n=200):
    """Warm NLL + gradient of Boehm at the nominal parameters: odeinfer, AMICI alone, pyPESTO + AMICI."""
    import amici.sim.sundials as asd

    import odeinfer as oi

    name = "Boehm_JProteomeRes2014"
    pp = oi.petab.load(yaml_of(name))
    obj, u = pp.objective(), pp.u_nominal
    problem = pypesto_problem(name, folder)
    free = [problem.x_names[i] for i in problem.x_free_indices]
    x = np.array([u[list(pp.problem.estimated).index(k)] for k in free])
    pobj = problem.objective  # pyPESTO's AmiciObjective
    f_p, _ = pobj(x, sensi_orders=(0, 1))  # fills the parameters into its ExpData
    solver = pobj.amici_solver
    solver.set_sensitivity_order(asd.SensitivityOrder.first)

    def amici_alone():
        return asd.run_simulations(pobj.amici_model, solver, pobj.edatas)

    rdatas = amici_alone()
    llh = sum(r["llh"] for r in rdatas)
    out = {}
    for label, call in (("odeinfer Objective (NLL + gradient + FIM)", lambda: obj(u)),
                        ("AMICI run_simulations (llh + sllh)", amici_alone),
                        ("pyPESTO objective over AMICI (fval + grad)", lambda: pobj(x, sensi_orders=(0, 1)))):
        call()
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            call()
            ts.append(time.perf_counter() - t)
        out[label] = float(np.median(ts))
    return {"odeinfer_nll": float(obj(u, grad=False).nll), "pypesto_fval": float(f_p), "amici_minus_llh": -float(llh),
            "median_s": out}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=PROBLEMS)
    ap.add_argument("--starts", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warm", action="store_true", help="also time Boehm's warm NLL + gradient")
    ap.add_argument("--no-fits", action="store_true", help="skip the multistart fits (with --warm)")
    ap.add_argument("--amici-dir", default=None, help="where AMICI compiles the models (default: a temporary folder)")
    ap.add_argument("--json", default=None, help="write every start's figures to this file")
    ap.add_argument("--intervals", default=None, metavar="JSON",
                    help="only print the speed-ups of an earlier --json report with their bootstrap intervals")
    args = ap.parse_args(argv)
    if args.intervals:
        for name, (speed, kind, ci) in intervals_of(args.intervals).items():
            print(f"{name}: {'>= ' if kind == '>=' else ''}{speed:.2f}x ({interval_text(ci)})")
        return
    if args.starts < 1:
        ap.error(f"--starts: expected an integer >= 1, got {args.starts}")
    import odeinfer as oi

    folder = Path(args.amici_dir) if args.amici_dir else Path(tempfile.mkdtemp(prefix="amici_models_"))
    print(f"odeinfer {oi.__version__}; {args.starts} starts per problem, seed {args.seed}; cores {os.cpu_count()}; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    report = {"starts": args.starts, "seed": args.seed, "problems": {}}
    if args.warm:
        w = warm_boehm(folder)
        report["warm_boehm"] = w
        print(f"\nBoehm at the nominal parameters: odeinfer NLL {w['odeinfer_nll']:.6f}, pyPESTO fval "
              f"{w['pypesto_fval']:.6f}, AMICI -llh {w['amici_minus_llh']:.6f}", flush=True)
        base = w["median_s"]["odeinfer Objective (NLL + gradient + FIM)"]
        for label, s in w["median_s"].items():
            print(f"  warm {label}: {1e3 * s:.3f} ms median ({s / base:.2f} x odeinfer)")
    rows = []
    for name in ([] if args.no_fits else args.problems):
        pp = oi.petab.load(yaml_of(name))
        U, names = draw_starts(pp, args.starts, args.seed)
        t = time.perf_counter()
        problem = pypesto_problem(name, folder)
        amici_setup = time.perf_counter() - t
        print(f"\n{name}: {len(names)} parameters; AMICI import + compile {amici_setup:.1f} s", flush=True)
        one_o, finish_o, setup = odeinfer_runner(pp)
        print(f"  odeinfer kernels ready in {setup:.1f} s", flush=True)
        ours, theirs = run_both(one_o, pypesto_runner(problem, names), U)
        ours["setup"] = setup
        done = finish_o()
        if done is not None:  # the best start as odeinfer's multistart reports it: continued, its time added
            i, f, u, seconds, cpu, polished = done
            ours["f"][i], ours["u"][i], ours["best_u"] = f, u, u
            ours["time"][i] += seconds
            ours["cpu"][i] += cpu
            ours["wall"] += seconds
            ours["polish"] = polished
            print(f"  odeinfer's best start ({i}) continued in {seconds:.2f} s: {polished}", flush=True)
        best_all = np.nanmin(np.concatenate([ours["f"], theirs["f"]]))
        so, sp = summary(ours, best_all), summary(theirs, best_all)
        cross_o = pypesto_f(problem, ours["best_u"], names) if ours["best_u"] is not None else math.nan
        cross_p = float(pp.objective()(theirs["best_u"], grad=False).nll) if theirs["best_u"] is not None else math.nan
        equal = so["best"] <= sp["best"] + EQUAL
        speed, bound = speed_up(so, sp)
        rows.append((name, so, sp, speed, bound, equal))
        for label, s, cross in (("odeinfer", so, cross_o), ("pyPESTO+AMICI", sp, cross_p)):
            print(f"  {label:14s} best {s['best']:.4f} (other tool's value there {cross:.4f}); converged "
                  f"{s['converged']}/{args.starts}; failed {s['failed']}; median {s['median_s']:.2f} s/start; "
                  f"whole {s['wall_s']:.1f} s; {s['s_per_converged']:.2f} s per converged start")
        fast = "met" if speed >= SPEEDUP else "NOT met"
        ci = speed_up_interval(ours["f"], ours["time"], theirs["f"], theirs["time"], best_all)
        print(f"  target: best objective equal or better: {'met' if equal else 'NOT met'}; time per converged "
              f"start {bound if bound == '>=' else ''}{speed:.2f}x less than pyPESTO+AMICI "
              f"({interval_text(ci)}): {fast} (>= 10x)", flush=True)
        report["problems"][name] = {
            "odeinfer": {**so, "f": ours["f"].tolist(), "time": ours["time"].tolist(), "cpu": ours["cpu"].tolist(),
                         "status": ours["status"], "polish": ours.get("polish"),
                         "pypesto_f_at_best": cross_o, "setup_s": ours["setup"]},
            "pypesto": {**sp, "f": theirs["f"].tolist(), "time": theirs["time"].tolist(), "cpu": theirs["cpu"].tolist(),
                        "odeinfer_f_at_best": cross_p, "setup_s": amici_setup},
            "speedup_per_converged": speed, "speedup_kind": bound, "speedup_interval_95": list(ci),
            "best_equal_or_better": bool(equal)}
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
    if rows:
        print("\n| problem | odeinfer best | pyPESTO best | converged (oi / pP) | s per converged start (oi / pP) | "
              "whole multistart s (oi / pP) | speed-up | target |")
        print("|---|---|---|---|---|---|---|---|")
        for name, so, sp, speed, bound, equal in rows:
            met = "met" if equal and speed >= SPEEDUP else "NOT met"
            print(f"| {name} | {so['best']:.4f} | {sp['best']:.4f} | {so['converged']} / {sp['converged']} | "
                  f"{so['s_per_converged']:.2f} / {sp['s_per_converged']:.2f} | "
                  f"{so['wall_s']:.1f} / {sp['wall_s']:.1f} | "
                  f"{'>= ' if bound == '>=' else ''}{speed:.2f}x | {met} |")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
