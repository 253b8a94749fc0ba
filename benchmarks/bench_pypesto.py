"""odeinfer side by side with pyPESTO + AMICI on the Benchmark-Models-PEtab problems (issue 15).

For each problem in tests/data/petab (both tools read the same PEtab files):

1. the same ``--starts`` starts, drawn once (Sobol, ``--seed``, uniform in the bounds on the
   parameters' estimation scales), fitted one after the other in this process by
   * odeinfer: ``oi.Embedding(starts=n).fit(problem, start=starts)`` (fides trust region on the
     exact gradient and the Fisher information, default tolerances, ``oi.Auto(rtol=1e-8,
     atol=1e-10)``);
   * pyPESTO: ``pypesto.optimize.minimize`` with ``FidesOptimizer()`` (pyPESTO's default:
     fides with the hybrid Fisher-information / BFGS Hessian) over
     ``pypesto.petab.PetabImporter(...).create_problem()`` (AMICI, forward sensitivities, AMICI's
     default tolerances rtol 1e-8, atol 1e-16), the starts given as ``x_guesses``;
2. per tool: best objective (each tool's own PEtab negative log-likelihood; the other tool's
   value at that point is printed as a cross-check), starts converged (final objective within
   0.1 of the best of both tools), failed starts, median time per start, the whole multistart's
   wall time and the time per converged start (whole multistart time / converged starts);
3. the issue's target per problem: odeinfer's best objective at most 0.01 above pyPESTO's
   (equal to the published values' 3 decimals, or better), and pyPESTO's time per converged start
   at least 10 times odeinfer's;
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
SPEEDUP = 10.0  # the target on the time per converged start


def yaml_of(name):
    return PETAB / name / f"{name}.yaml"


def draw_starts(pp, n, seed):
    """``(U, names)``: n starts on the estimation scales (Sobol, uniform in the bounds), odeinfer's order."""
    from odeinfer.inference.multistart import sample_starts

    obj = pp.objective()
    return sample_starts(obj.lower, obj.upper, n, rng=seed), list(pp.problem.estimated)


def run_odeinfer(pp, U):
    import odeinfer as oi
    from odeinfer.likelihood.parameters import from_scale

    t = time.perf_counter()
    pp.nll_nominal()  # the model's kernels compiled (or loaded from the cache) before the clock starts
    setup = time.perf_counter() - t
    scales = pp.objective().scales
    X = np.array([from_scale(u, scales) for u in U])
    t = time.perf_counter()
    fit = oi.Embedding(starts=len(U)).fit(pp, start=X)
    wall = time.perf_counter() - t
    tab = fit.extras["starts"]
    order = np.argsort(tab["start"])
    f = np.array(tab["nll"], float)[order]
    f[np.array(tab["status"])[order] == "failed"] = np.nan
    best_u = fit.extras["u"]
    return {"f": f, "time": np.array(tab["time_s"], float)[order], "wall": wall, "setup": setup,
            "status": list(np.array(tab["status"])[order]), "best_u": None if best_u is None else np.asarray(best_u)}


def pypesto_problem(name, folder):
    import amici.sim.sundials  # noqa: F401  (amici 1.0.1 loads the model module's swig types only after it)
    import pypesto.petab

    for logger in ("amici", "pypesto", "fides"):
        logging.getLogger(logger).setLevel(logging.WARNING)
    importer = pypesto.petab.PetabImporter.from_yaml(str(yaml_of(name)), output_folder=str(folder / name),
                                                     model_name=name)
    return importer.create_problem()


def run_pypesto(problem, U, names):
    import pypesto.engine
    import pypesto.optimize

    free = [problem.x_names[i] for i in problem.x_free_indices]
    missing = sorted(set(names) ^ set(free))
    if missing:
        raise SystemExit(f"pyPESTO and odeinfer estimate different parameters: {missing}")
    full = np.zeros((len(U), problem.dim_full))
    full[:, problem.x_fixed_indices] = problem.x_fixed_vals
    for k, n in enumerate(names):
        full[:, problem.x_names.index(n)] = U[:, k]
    problem.set_x_guesses(full)
    optimizer = pypesto.optimize.FidesOptimizer(verbose=logging.ERROR)
    t = time.perf_counter()
    result = pypesto.optimize.minimize(problem, optimizer, n_starts=len(U), engine=pypesto.engine.SingleCoreEngine(),
                                       progress_bar=False)
    wall = time.perf_counter() - t
    f, times, x0s, xs = np.full(len(U), np.nan), np.full(len(U), np.nan), [None] * len(U), [None] * len(U)
    perm = [free.index(n) for n in names]
    for r in result.optimize_result.list:
        x0 = np.asarray(r.x0, float)
        x0 = x0[problem.x_free_indices] if x0.size == problem.dim_full else x0
        x0 = x0[perm]
        i = int(np.argmin(np.max(np.abs(U - x0), axis=1)))  # pyPESTO sorts its results: match the start
        if np.max(np.abs(U[i] - x0)) > 1e-9:
            raise SystemExit("pyPESTO started from a point that is not one of the given starts")
        f[i] = r.fval if r.fval is not None and math.isfinite(r.fval) else np.nan
        times[i] = r.time
        x = np.asarray(r.x, float)
        xs[i] = (x[problem.x_free_indices] if x.size == problem.dim_full else x)[perm]
    best = int(np.nanargmin(f)) if np.any(np.isfinite(f)) else None
    return {"f": f, "time": times, "wall": wall, "best_u": None if best is None else xs[best],
            "status": ["failed" if not math.isfinite(v) else "ok" for v in f]}


def pypesto_f(problem, u, names):
    """pyPESTO's objective at odeinfer's point ``u`` (odeinfer's order, estimation scale)."""
    free = [problem.x_names[i] for i in problem.x_free_indices]
    x = np.empty(len(free))
    for k, n in enumerate(names):
        x[free.index(n)] = u[k]
    return float(problem.objective(x))


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
    pobj = problem.objective
    f_p, _ = pobj(x, sensi_orders=(0, 1))
    amici_obj = pobj
    solver = amici_obj.amici_solver
    solver.set_sensitivity_order(asd.SensitivityOrder.first)

    def amici_alone():
        return asd.run_simulations(amici_obj.amici_model, solver, amici_obj.edatas)

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
    args = ap.parse_args(argv)
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
              f"{w['pypesto_fval']:.6f}, AMICI -llh {w['amici_minus_llh']:.6f}")
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
        ours = run_odeinfer(pp, U)
        print(f"  odeinfer done: {ours['wall']:.1f} s (kernels ready in {ours['setup']:.1f} s)", flush=True)
        theirs = run_pypesto(problem, U, names)
        print(f"  pyPESTO + AMICI done: {theirs['wall']:.1f} s", flush=True)
        best_all = np.nanmin(np.concatenate([ours["f"], theirs["f"]]))
        so, sp = summary(ours, best_all), summary(theirs, best_all)
        cross_o = pypesto_f(problem, ours["best_u"], names) if ours["best_u"] is not None else math.nan
        cross_p = float(pp.objective()(theirs["best_u"], grad=False).nll) if theirs["best_u"] is not None else math.nan
        equal = so["best"] <= sp["best"] + EQUAL
        speed = sp["s_per_converged"] / so["s_per_converged"] if so["converged"] else 0.0
        rows.append((name, so, sp, speed, equal))
        for label, s, cross in (("odeinfer", so, cross_o), ("pyPESTO+AMICI", sp, cross_p)):
            print(f"  {label:14s} best {s['best']:.4f} (other tool's value there {cross:.4f}); converged "
                  f"{s['converged']}/{args.starts}; failed {s['failed']}; median {s['median_s']:.2f} s/start; "
                  f"whole {s['wall_s']:.1f} s; {s['s_per_converged']:.2f} s per converged start")
        print(f"  target: best objective equal or better: {'met' if equal else 'NOT met'}; time per converged "
              f"start {speed:.2f}x less than pyPESTO+AMICI: {'met' if speed >= SPEEDUP else 'NOT met'} (>= 10x)",
              flush=True)
        report["problems"][name] = {
            "odeinfer": {**so, "f": ours["f"].tolist(), "time": ours["time"].tolist(), "status": ours["status"],
                         "pypesto_f_at_best": cross_o, "setup_s": ours["setup"]},
            "pypesto": {**sp, "f": theirs["f"].tolist(), "time": theirs["time"].tolist(),
                        "odeinfer_f_at_best": cross_p, "setup_s": amici_setup},
            "speedup_per_converged": speed, "best_equal_or_better": bool(equal)}
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
    if rows:
        print("\n| problem | odeinfer best | pyPESTO best | converged (oi / pP) | s per converged start (oi / pP) | "
              "whole multistart s (oi / pP) | speed-up | target |")
        print("|---|---|---|---|---|---|---|---|")
        for name, so, sp, speed, equal in rows:
            met = "met" if equal and speed >= SPEEDUP else "NOT met"
            print(f"| {name} | {so['best']:.4f} | {sp['best']:.4f} | {so['converged']} / {sp['converged']} | "
                  f"{so['s_per_converged']:.2f} / {sp['s_per_converged']:.2f} | {so['wall_s']:.1f} / {sp['wall_s']:.1f} | "
                  f"{speed:.2f}x | {met} |")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
