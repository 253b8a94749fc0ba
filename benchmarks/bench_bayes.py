"""Bayesian stage benchmark on Stan's lynx-hare case study (21 points, 4 params + 2 initial
states + 2 noise scales): log density + gradient with odeinfer's Op vs PyMC's
``pm.ode.DifferentialEquation`` on the same model, and NUTS effective samples per second.

Run:  python benchmarks/bench_bayes.py [--ode-draws 25] [--draws 1000] [--skip-nutpie]

Prints per-evaluation times and their ratio (same process, same point), then for each
sampler: wall time of sampling (compile excluded), min bulk ESS over the 8 free
parameters, ESS/s, divergences. The pm.ode NUTS run is short (``--ode-draws`` tuning and
draws, one chain): its ESS/s is a rough figure.
"""

import argparse
import time
import warnings

import numpy as np

warnings.filterwarnings("ignore")

import arviz as az  # noqa: E402
import pymc as pm  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
from pymc.blocking import DictToArrayBijection  # noqa: E402

import odeinfer as oi  # noqa: E402
from odeinfer.bayes.build import lynx_hare_stan  # noqa: E402

FREE = ["alpha", "beta", "gamma", "delta", "x0[hare]", "x0[lynx]", "sigma[hare]", "sigma[lynx]"]


def pm_ode_model(data):
    """The same case-study model with pm.ode.DifferentialEquation (scipy odeint + sensitivities)."""
    def rhs(y, t, p):
        return [(p[0] - p[1] * y[1]) * y[0], (-p[2] + p[3] * y[0]) * y[1]]

    ode = pm.ode.DifferentialEquation(func=rhs, times=data.t[1:], n_states=2, n_theta=4, t0=0.0)
    with pm.Model() as m:
        a = pm.TruncatedNormal("alpha", 1.0, 0.5, lower=0.0)
        b = pm.TruncatedNormal("beta", 0.05, 0.05, lower=0.0)
        g = pm.TruncatedNormal("gamma", 1.0, 0.5, lower=0.0)
        d = pm.TruncatedNormal("delta", 0.05, 0.05, lower=0.0)
        u0 = pm.LogNormal("x0[hare]", np.log(10.0), 1.0)
        v0 = pm.LogNormal("x0[lynx]", np.log(10.0), 1.0)
        sh = pm.LogNormal("sigma[hare]", -1.0, 1.0)
        sl = pm.LogNormal("sigma[lynx]", -1.0, 1.0)
        z0 = pt.stack([u0, v0])
        z = ode(y0=z0, theta=pt.stack([a, b, g, d]))
        zz = pt.concatenate([z0[None, :], z], axis=0)
        pm.LogNormal("y_obs", mu=pt.log(zz), sigma=pt.stack([sh, sl]), observed=np.asarray(data.y))
    return m


def log_least_squares(model, data, start):
    """Frequentist estimate for seeding: least squares on the log scale over the solver (scipy
    least_squares, Jacobian from odeinfer's sensitivities), cov = s^2 (J^T J)^-1."""
    from scipy.optimize import least_squares

    from odeinfer.results import Estimate

    solver = oi.bind(oi.Problem(model, data.t), solver=oi.Dopri5(rtol=1e-8, atol=1e-10), gradient=oi.Forward())
    logy = np.log(np.asarray(data.y))

    def run(v):
        return solver(np.ascontiguousarray(v[:4]), np.ascontiguousarray(v[4:]))

    def fun(v):
        return (np.log(run(v)[0]) - logy).ravel()

    def jac(v):
        y, s, _ = run(v)
        return (s / y[:, :, None]).reshape(-1, 6)

    r = least_squares(fun, start, jac=jac, x_scale="jac")
    res, J = fun(r.x), jac(r.x)
    cov = res @ res / (res.size - 6) * np.linalg.inv(J.T @ J)
    sigma = {s: float(np.sqrt(np.mean(res.reshape(-1, 2)[:, j] ** 2))) for j, s in enumerate(("hare", "lynx"))}
    names = ["alpha", "beta", "gamma", "delta", "x0[hare]", "x0[lynx]"]
    return Estimate("LogLeastSquares", model, names, r.x, cov, "converged", nobs=res.size, sigma=sigma)


def time_logp_dlogp(m, point, n, mode=None):
    for k, v in point.items():
        m.set_initval(m[k], v)
    kwargs = {} if mode is None else {"mode": mode}
    f = m.logp_dlogp_function(ravel_inputs=True, **kwargs)
    f.set_extra_values({})
    ip = m.initial_point()
    q = DictToArrayBijection.map({v.name: ip[v.name] for v in m.value_vars}).data
    out = f(q)
    t0 = time.perf_counter()
    for _ in range(n):
        f(q)
    return (time.perf_counter() - t0) / n, out


def ess_report(label, idata, wall):
    summ = az.summary(idata, var_names=FREE, kind="diagnostics")
    ess = float(summ["ess_bulk"].min())
    rhat = float(summ["r_hat"].max())
    div = int(idata.sample_stats["diverging"].sum())
    grads = int(idata.sample_stats["n_steps"].sum()) if "n_steps" in idata.sample_stats else -1
    print(f"{label:34s} wall {wall:8.2f} s  min ESS_bulk {ess:7.1f}  ESS/s {ess / wall:9.1f}  "
          f"max r_hat {rhat:.3f}  divergences {div}  grad evals {grads}")
    return ess / wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ode-draws", type=int, default=25)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--skip-nutpie", action="store_true")
    ap.add_argument("--skip-pm-ode-nuts", action="store_true")
    args = ap.parse_args()

    lv, data, priors = lynx_hare_stan()
    point = {"alpha": 0.55, "beta": 0.028, "gamma": 0.8, "delta": 0.024, "x0[hare]": 33.9, "x0[lynx]": 5.9,
             "sigma[hare]": 0.25, "sigma[lynx]": 0.25}
    ours = oi.bayes.build_model(lv, data, priors=priors, likelihood="lognormal")
    timing = oi.bayes.build_model(lv, data, priors=priors, likelihood="lognormal")  # gets initvals
    t_ours, out_ours = time_logp_dlogp(timing, point, 2000, mode="NUMBA")
    t_c, _ = time_logp_dlogp(oi.bayes.build_model(lv, data, priors=priors, likelihood="lognormal"), point, 2000)
    t_base, out_base = time_logp_dlogp(pm_ode_model(data), point, 5)
    base = pm_ode_model(data)
    print("log density + gradient, lynx-hare (Stan case study), one evaluation:")
    print(f"  pm.ode.DifferentialEquation      {t_base * 1e3:10.3f} ms   (logp {float(out_base[0]):.6f})")
    print(f"  odeinfer Op, PyTensor C mode     {t_c * 1e3:10.4f} ms   ratio {t_base / t_c:8.0f}x")
    print(f"  odeinfer Op, PyTensor NUMBA mode {t_ours * 1e3:10.4f} ms   ratio {t_base / t_ours:8.0f}x"
          f"   (logp {float(out_ours[0]):.6f})")

    print(f"\nNUTS, 2 chains on 2 cores, {args.draws} draws (pm.ode: 1 chain, {args.ode_draws} tune + draws):")
    if not args.skip_pm_ode_nuts:
        with base:
            t0 = time.perf_counter()
            idata = pm.sample(draws=args.ode_draws, tune=args.ode_draws, chains=1, cores=1, random_seed=1,
                              progressbar=False, compute_convergence_checks=False,
                              initvals=point)
        ess_report("pm.ode (short run)", idata, idata.posterior.attrs["sampling_time"])
    t0 = time.perf_counter()
    est = log_least_squares(lv, data, np.array([0.5, 0.03, 0.8, 0.03, 30.0, 4.0]))
    print(f"seed estimate (log least squares, {time.perf_counter() - t0:.2f} s): {est}")
    runs = [("PyMC NUTS + Op, default adaptation", {"sampler": "pymc", "seed_mass_matrix": False, "tune": 1000}),
            ("PyMC NUTS + Op, seeded (tune 500)", {"sampler": "pymc", "tune": 500}),
            ("nutpie + numba Op", {"sampler": "nutpie", "tune": 1000})]
    for label, kwargs in runs:
        if kwargs["sampler"] == "nutpie" and args.skip_nutpie:
            continue
        t0 = time.perf_counter()
        idata = oi.bayes.sample(ours, init=est, draws=args.draws, chains=2, cores=2, rng=1,
                                posterior_predictive=False, **kwargs)
        total = time.perf_counter() - t0
        sampling = idata.posterior.attrs["sampling_time"]
        ess_report(label + " [sampling]", idata, sampling)
        ess_report(label + " [incl. compile]", idata, total)


if __name__ == "__main__":
    main()
