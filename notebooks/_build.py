"""Write the example notebooks (``notebooks/*.ipynb``) from the cell lists below.

The notebooks are generated, without outputs, so that they are reviewed as Python here and
diffs stay readable. After editing a cell list, regenerate them::

    python notebooks/_build.py            # writes notebooks/NN_*.ipynb next to this file
    python notebooks/_build.py --check    # exit status 1 if a committed notebook is stale

Every notebook runs top to bottom in a fresh kernel in well under a minute on 2 cores once the
model kernels are in the numba cache (``tests/test_notebooks.py`` executes them all). Each one
sets its seeds, checks its key claims with ``assert`` (so a regression fails CI, not only a
reader's eye) and ends with a standalone HTML report. The first cell runs ``%matplotlib inline``:
``odeinfer.plots`` makes figures without pyplot, and a kernel only renders those as images once
the inline backend is active.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def md(text: str) -> tuple[str, str]:
    return ("markdown", text.strip("\n"))


def code(text: str) -> tuple[str, str]:
    return ("code", text.strip("\n"))


# ---- 01 ---------------------------------------------------------------------------------------
QUICKSTART = [
    md("""
# Quick start: Lotka-Volterra on the Hudson's Bay lynx-hare data

From a plain Python function to a fitted ODE with confidence bands, in a few cells:

1. a model from a function (traced once with sympy; numba kernels cached on disk),
2. the bundled data (21 yearly pelt counts, 1900-1920),
3. fast *matching* estimators (no ODE solve) for a first estimate,
4. the maximum-likelihood *trajectory* fit (`oi.Embedding`) with log-normal noise and
   estimated initial states,
5. predicted trajectories with delta-method bands, plots, and profile-likelihood intervals
   next to the Wald intervals,
6. a standalone HTML report.
"""),
    code("""
%matplotlib inline
import numpy as np
import pandas as pd

import odeinfer as oi
"""),
    md("""
## 1. The model

A right-hand side written with attribute access (`y.hare`, `p.alpha`). `noise="log"` says the
counts have multiplicative (log-normal) noise: the fits then compare `log y` with
`log x(t)`.
"""),
    code("""
@oi.model(states=["hare", "lynx"], params=["alpha", "beta", "gamma", "delta"], noise="log")
def lotka_volterra(t, y, p):
    return {"hare": (p.alpha - p.beta * y.lynx) * y.hare,
            "lynx": (-p.gamma + p.delta * y.hare) * y.lynx}

lotka_volterra
"""),
    md("## 2. The data (with its provenance)"),
    code("""
data = oi.datasets.lynx_hare()          # t = year - 1900, thousands of pelts
print(oi.datasets.citation("lynx_hare"))
data
"""),
    md("""
## 3. Matching estimators: a start in milliseconds

Orthogonal conditions (Brunel, Clairon & d'Alché-Buc) and two-step gradient matching
smooth each series with a spline and match the model to the smoothed curve, with no ODE
solve. Lotka-Volterra is linear in its parameters, so both are closed form.
"""),
    code("""
oc = oi.OrthogonalConditions().fit(lotka_volterra, data)
print(oc.summary())
"""),
    md("""
With 21 yearly points the smoothed curves are rough, so the matching estimates are only
approximate (OC chooses its number of test functions by how well the integrated trajectory
fits; `oc.extras["L_scan"]` lists every candidate). Gradient matching, for comparison:
"""),
    code("""
gm = oi.GradientMatching().fit(lotka_volterra, data)
print(gm.summary())
"""),
    md("""
## 4. The trajectory fit

`oi.Embedding` fits the ODE solution itself to the data (maximum likelihood under the
model's noise), by Levenberg-Marquardt with exact forward sensitivities. The initial states
`x0[hare]`, `x0[lynx]` are estimated too (the default). Started at OC, with the rates
estimated on the log scale (`log_params=True` keeps them positive; the covariance is mapped
back by the delta method). Always look at `status`:
"""),
    code("""
fit = oi.Embedding(log_params=True).fit(lotka_volterra, data, start=oc)
assert fit.converged, fit.status
fit          # in Jupyter: an HTML summary table
"""),
    md("""
## 5. Predictions with bands, plots

`predict` solves the ODE at the estimate and propagates the covariance through the forward
sensitivities (delta method): a pointwise 95% confidence band for the *trajectory*.
"""),
    code("""
t = np.linspace(0.0, 20.0, 201)
band = fit.predict(t)
pd.DataFrame({"t": band.t, "hare": band.y[:, 0], "lower": band.lower[:, 0],
              "upper": band.upper[:, 0]}).iloc[::40]
"""),
    code("""
fig = oi.plots.trajectories(data, gm, fit)
fig
"""),
    code("""
oi.plots.residuals(fit, data)
"""),
    md("""
## 6. Profile-likelihood intervals vs Wald

Wald intervals come from the curvature at the optimum (symmetric in natural units). Profile
intervals re-optimise all other unknowns along each quantity and follow the likelihood
(asymmetric where the model is nonlinear in that direction).
"""),
    code("""
wald = fit.conf_int()
profile = fit.conf_int(method="profile")
table = pd.concat({"wald": wald, "profile": profile}, axis=1)
table[("ratio", "profile/wald width")] = ((profile["upper"] - profile["lower"])
                                          / (wald["upper"] - wald["lower"]))
assert ((profile["lower"] < fit.params) & (fit.params < profile["upper"])).all()
table
"""),
    md("## 7. A standalone HTML report (no network needed to view it)"),
    code("""
table.attrs["title"] = "Embedding: Wald vs profile 95% intervals"
path = oi.report.export_html([lotka_volterra, data, gm, fit, table, fig], "01_quickstart.html",
                             title="Quick start: lynx-hare")
print("wrote", path)
"""),
]

# ---- 02 ---------------------------------------------------------------------------------------
ALPHA_PINENE = [
    md("""
# Alpha-pinene: matching estimators vs nonlinear least squares, against Box et al. (1973)

Seed paper 001 (Brunel, Clairon & d'Alché-Buc, *Parametric estimation of ODEs with
orthogonality conditions*) uses the alpha-pinene isomerisation network. Here the three
estimators run on the **real data** of Fuguitt & Hawkins (1947) (8 times, in minutes; known
initial state 100% alpha-pinene) and are compared with the published nonlinear least-squares
estimates of Box, Hunter, MacGregor & Erjavec (1973):
theta = (5.93, 2.96, 2.05, 27.5, 4.00) x 1e-5 per minute.
"""),
    code("""
%matplotlib inline
import time
import warnings

import numpy as np
import pandas as pd

import odeinfer as oi

zoo = oi.zoo.get("alpha_pinene")          # the model (linear in theta) and x0 = (100, 0, 0, 0, 0)
model, x0 = zoo.model, zoo.x0
data = oi.datasets.alpha_pinene()
print(oi.datasets.citation("alpha_pinene"))
model
"""),
    code("""
data
"""),
    md("""
## The three fits

* `OrthogonalConditions` with B-spline test functions (the paper's method),
* `GradientMatching` (two-step: spline derivative vs right-hand side),
* `Embedding` (trajectory least squares with exact sensitivities, started at OC): the
  classical NLS fit.

Each is run once to warm up (first use loads the numba kernels from the cache) and then
timed over a few repetitions.
"""),
    code("""
def timed(fit, repeat=3):
    est = fit()                                   # warm-up (kernel loading)
    t0 = time.perf_counter()
    for _ in range(repeat):
        est = fit()
    return est, (time.perf_counter() - t0) / repeat

fits, seconds = {}, {}
fits["OC (B-spline tests)"], seconds["OC (B-spline tests)"] = timed(
    lambda: oi.OrthogonalConditions(test_functions="bspline").fit(model, data, x0=x0))
fits["gradient matching"], seconds["gradient matching"] = timed(
    lambda: oi.GradientMatching().fit(model, data, x0=x0))
oc = fits["OC (B-spline tests)"]
fits["Embedding (NLS)"], seconds["Embedding (NLS)"] = timed(
    lambda: oi.Embedding(estimate_x0=False).fit(model, data, x0=x0, start=oc))
for name, est in fits.items():
    print(f"{name:22s} {est.status:10s} {1e3 * seconds[name]:8.1f} ms")
"""),
    md("""
## Against the published estimates (units 1e-5 / min, standard errors in parentheses)

The last column says whether each 95% Wald interval contains Box et al.'s value.
"""),
    code("""
box = pd.Series([5.93, 2.96, 2.05, 27.5, 4.00], index=model.params) * 1e-5

rows = {"Box et al. (1973), published NLS": {p: f"{1e5 * v:.2f}" for p, v in box.items()}}
covers = {}
for name, est in fits.items():
    rows[name] = {p: f"{1e5 * est.params[p]:.2f} ({1e5 * est.bse[p]:.2f})" for p in model.params}
    ci = est.conf_int().loc[list(model.params)]
    covers[name] = "".join("y" if lo <= b <= hi else "n"
                           for lo, hi, b in zip(ci["lower"], ci["upper"], box))
    rows[name]["Box inside 95% CI"] = covers[name]
    rows[name]["time (ms)"] = f"{1e3 * seconds[name]:.1f}"
comparison = pd.DataFrame(rows).T.fillna("")
comparison
"""),
    md("""
What the table shows:

* **Embedding reproduces Box et al.** to the printed digits, and every published value is inside
  its interval: with the ODE solved exactly, this *is* the published NLS problem.
* The matching estimators recover `theta1` (and `theta1 + theta2`, the decay of alpha-pinene)
  from the two large states, but not the minor pathways `theta3..theta5` (through
  alloocimene, at most 6% of the mass): with 8 time points the smoothing proxy can only be a
  cubic, and its bias dominates. Their intervals miss the published values. See
  `tests/reference/oc_tables.md` for the simulation study of seed 001, where OC does well
  with 50-400 points.
* All three take milliseconds once the kernels are loaded.
"""),
    code("""
nls = fits["Embedding (NLS)"]
assert nls.converged
assert np.allclose(nls.params[list(model.params)], box, rtol=0.02)   # the published fit, to print precision
assert covers["Embedding (NLS)"] == "yyyyy"
"""),
    code("""
fig = oi.plots.trajectories(data, *fits.values(), x0=x0)   # x0 is known, not estimated
fig
"""),
    code("""
comparison.attrs["title"] = "Estimates vs Box et al. (1973), units 1e-5 / min"
path = oi.report.export_html([model, data, *fits.values(), comparison, fig], "02_alpha_pinene.html",
                             title="Alpha-pinene: matching vs NLS")
print("wrote", path)
"""),
]

# ---- 03 ---------------------------------------------------------------------------------------
LORENZ = [
    md("""
# Lorenz: single shooting gets lost, multiple shooting and Bock's method do not

On a chaotic system the least-squares landscape of *single shooting* (solve from `x0` over the
whole record, compare) is full of local minima: a start a little off lands in one of them.
Osborne (2008) and Bock (1983) cure this by giving the optimiser the states themselves:

* **multiple shooting** (`oi.Embedding(segments=...)`): the record is cut into segments whose
  initial states are unknowns, tied by continuity conditions;
* **Bock's simultaneous method** (`oi.Simultaneous`): every state on a collocation grid is an
  unknown, the ODE becomes equality constraints (generalised Gauss-Newton on the KKT system).

Data are simulated from the zoo's Lorenz setting (sigma = 10, rho = 28, beta = 8/3;
201 points on [0, 10]; noise sd sqrt(2) on every state).
"""),
    code("""
%matplotlib inline
import time

import numpy as np
import pandas as pd

import odeinfer as oi

zoo = oi.zoo.get("lorenz")
model = zoo.model
sim = oi.simulate(model, zoo.params, zoo.x0, zoo.t, noise=zoo.sigma, rng=3)
data = sim.data
truth = pd.Series({**zoo.params, **{f"x0[{s}]": v for s, v in zoo.x0.items()}})
model
"""),
    md("A poor start: every parameter off by a factor of 1.4 to 2.7."),
    code("""
poor = {"a1": 5.0, "a2": 20.0, "a3": 1.0}
estimators = {
    "single shooting": oi.Embedding(),
    "multiple shooting (20 segments)": oi.Embedding(segments=20),
    "Bock (Hermite-Simpson collocation)": oi.Simultaneous(scheme="hermite-simpson"),
}
fits, seconds = {}, {}
for name, estimator in estimators.items():
    t0 = time.perf_counter()
    fits[name] = estimator.fit(model, data, start=poor)
    seconds[name] = time.perf_counter() - t0

summary = pd.DataFrame({name: est.params for name, est in fits.items()}).T
summary.insert(0, "status", [est.status for est in fits.values()])
summary["iterations"] = [est.n_iter for est in fits.values()]
summary["seconds"] = pd.Series(seconds)
pd.concat([summary, truth.to_frame("truth").T])
"""),
    md("""
Single shooting reports convergence, but to a *local* optimum far from the truth (compare the
parameters, and the fitted trajectory below). Multiple shooting and Bock's method reach the
global one from the same start, and agree with each other. (Bock's default trapezoid rule on
this 0.05 grid is only second order and biases `a1` by about 5% on a chaotic system; the
fourth-order Hermite-Simpson scheme removes that.)
"""),
    code("""
single = fits["single shooting"].params[list(model.params)]
for name in ("multiple shooting (20 segments)", "Bock (Hermite-Simpson collocation)"):
    est = fits[name]
    assert est.converged, (name, est.status)
    assert np.allclose(est.params[list(model.params)], truth[list(model.params)], rtol=0.1), name
assert not np.allclose(single, truth[list(model.params)], rtol=0.1)
"""),
    md("In the plot the estimates are labelled by estimator: `Embedding#1` is single shooting, "
       "`Embedding#2` multiple shooting, `Simultaneous` Bock's method."),
    code("""
fig = oi.plots.trajectories(data, *fits.values())
fig
"""),
    md("""
## Convergence histories

`est.history` records every iteration. Left: the least-squares cost of the two shooting
fits (phase 1 of multiple shooting is the segmented problem with its continuity penalty,
the last iterations are the single-shooting polish). Single shooting creeps along for
dozens of iterations and stops on a plateau far above the optimum. Right: Bock's method
works on an *infeasible path*: it starts with the states at the (smoothed) data, so the
ODE constraints are violated, and drives the violation to zero while fitting.
"""),
    code("""
from matplotlib.figure import Figure

hist_fig = Figure(figsize=(10, 3.6), layout="constrained")
left, right = hist_fig.subplots(1, 2)
for name in ("single shooting", "multiple shooting (20 segments)"):
    cost = np.asarray(fits[name].history["cost"], dtype=float)
    left.semilogy(np.arange(1, cost.size + 1), cost, marker=".", label=name)
left.set(xlabel="iteration", ylabel="cost (0.5 RSS)", title="shooting")
left.legend()
bock = fits["Bock (Hermite-Simpson collocation)"].history
it = np.arange(1, len(bock["cost"]) + 1)
right.semilogy(it, np.asarray(bock["cost"], dtype=float), marker=".", label="cost")
right.semilogy(it, np.asarray(bock["constraint"], dtype=float), marker=".", label="constraint violation")
right.set(xlabel="iteration", title="Bock")
right.legend()
hist_fig
"""),
    code("""
path = oi.report.export_html([model, data, *fits.values(), fig, hist_fig], "03_lorenz.html",
                             title="Lorenz: shooting and Bock")
print("wrote", path)
"""),
]

# ---- 04 ---------------------------------------------------------------------------------------
BAYES = [
    md("""
# Bayesian lynx-hare: Stan's case study, seeded NUTS, and intervals side by side

Carpenter (2018), *Predator-Prey Population Dynamics: the Lotka-Volterra model in Stan*:
log-normal observations, truncated-normal priors on the rates, log-normal priors on the
initial states and noise scales. `odeinfer.bayes.build.lynx_hare_stan()` returns exactly that
model, data and priors. The posterior is sampled by PyMC's NUTS through a numba-backed ODE
operator, **started at the maximum-likelihood fit with a dense mass matrix seeded from its
covariance**, so short chains suffice (2 chains x 500 draws here, to keep the notebook fast;
use more for real work).
"""),
    code("""
%matplotlib inline
import numpy as np
import pandas as pd

import odeinfer as oi
from odeinfer.bayes.build import lynx_hare_stan

model, data, priors = lynx_hare_stan()
priors
"""),
    md("## The maximum-likelihood fit that seeds the sampler"),
    code("""
start = {"alpha": 0.5, "beta": 0.025, "gamma": 0.8, "delta": 0.025}
fit = oi.Embedding(log_params=True).fit(model, data, start=start)
assert fit.converged
print(fit.summary())
"""),
    md("## Seeded NUTS"),
    code("""
idata = oi.bayes.sample(model, data, init=fit, priors=priors, likelihood="lognormal",
                        draws=500, tune=300, chains=2, rng=2018)
idata
"""),
    md("""
## Diagnostics

R-hat, bulk and tail effective sample sizes, divergences, E-BFMI and tree depth, each with
pass/fail and what to do about a failure.
"""),
    code("""
report = oi.diagnostics.check(idata)
report
"""),
    md("""
## Confidence vs credible intervals

Every estimator's Wald interval next to the posterior's equal-tailed and HDI intervals, with
their overlap and the Mahalanobis distance of the estimate from the posterior. With 21 years
of data and weak priors the two agree closely.
"""),
    code("""
table = oi.compare_intervals([fit], idata)
table
"""),
    code("""
wald = table[table["source"] != "posterior"].set_index("param")
assert (wald.loc[list(model.params), "overlap"] > 0.5).all()
"""),
    code("""
oi.plots.regions([fit], idata, pair=("alpha", "beta"))
"""),
    code("""
forest_fig = oi.plots.forest([fit], idata)
forest_fig
"""),
    code("""
traj_fig = oi.plots.trajectories(data, fit, idata=idata, var_name="y_obs")
traj_fig
"""),
    md("""
## Interactive: the region panel

Pick a parameter pair, a level and the estimates to show; the ellipses are drawn against the
posterior's highest-density region. (Rendered in a live kernel; the callbacks can also be
driven from code, as below.)
"""),
    code("""
panel = oi.widgets.RegionPanel([fit], idata, pair=("gamma", "delta"))
panel.level.value = 0.9
panel
"""),
    md("## Report"),
    code("""
table.attrs["title"] = "Wald vs posterior intervals"
path = oi.report.export_html([model, data, fit, idata, report, table, forest_fig, traj_fig],
                             "04_bayes_lynx_hare.html", title="Lynx-hare: Stan's case study in odeinfer")
print("wrote", path)
"""),
]

# ---- 05 ---------------------------------------------------------------------------------------
EXPLORER = [
    md("""
# Exploring a model, comparing fits, and the same analysis from a TOML spec

1. `oi.widgets.Explorer`: sliders for every parameter and initial state; each move
   re-simulates with the numba solver and redraws against the data.
2. `oi.widgets.FitPanel`: pick estimators and options, run them with a progress bar, compare.
3. The analysis as a file: a TOML spec (model equations + CSV + what to run), run by
   `odeinfer.pipeline.run_spec` (the same as `odeinfer report spec.toml -o out.html` on the
   command line), written as a standalone HTML report.

Widgets need a live kernel to react; every callback can also be called from code, which is
what this notebook does so that it runs unattended.
"""),
    code("""
%matplotlib inline
import pathlib
import time

import numpy as np

import odeinfer as oi

zoo = oi.zoo.get("fitzhugh_nagumo")
model = zoo.model
data = oi.simulate(model, zoo.params, zoo.x0, zoo.t, noise=zoo.sigma, rng=7).data
model
"""),
    md("## 1. Explorer"),
    code("""
explorer = oi.widgets.Explorer(model, data, start={"a": 0.5, "b": 0.5, "c": 2.0})
explorer
"""),
    md("Moving a slider calls `update`; `set_values` does the same from code:"),
    code("""
t0 = time.perf_counter()
y, status = explorer.set_values(c=3.0, **{"x0[V]": -1.0, "x0[R]": 1.0})
print(f"re-simulated and redrawn in {1e3 * (time.perf_counter() - t0):.1f} ms, solver status {status}")
assert status == 0
"""),
    md("""
## 2. FitPanel

Orthogonal conditions and the trajectory fit, from the same rough start as the explorer.
The panel's *run* button calls `panel.run()`:
"""),
    code("""
panel = oi.widgets.FitPanel(model, data, estimators=["OrthogonalConditions", "Embedding"],
                            selected=["OrthogonalConditions", "Embedding"],
                            start={"a": 0.5, "b": 0.5, "c": 2.0})
panel.run()
panel
"""),
    code("""
results = panel.table()
assert (results["status"] == "converged").all(), results["status"]
results
"""),
    md("Start the explorer at the trajectory fit (slider ranges follow its standard errors):"),
    code("""
oi.widgets.Explorer(model, data, start=panel.estimates["Embedding"])
"""),
    md("""
## 3. The analysis as a file: TOML spec + CSV

The spec format is documented in `odeinfer.spec` (`help(odeinfer.spec)`); equations and
priors are parsed without `eval`, and unknown keys are errors. Here the lynx-hare data are
written as a CSV with calendar years, and the spec asks for gradient matching, the
trajectory fit and a short seeded NUTS run with Stan's priors.
"""),
    code("""
frame = oi.datasets.lynx_hare().to_frame()
frame = frame.rename(columns={"t": "year", "hare": "hare_pelts", "lynx": "lynx_pelts"})
frame["year"] = frame["year"] + 1900
frame.to_csv("pelts.csv", index=False)

pathlib.Path("lynx_hare.toml").write_text('''
title = "Lotka-Volterra on the Hudson's Bay Company pelts"

[model]
name = "lotka_volterra"
params = ["alpha", "beta", "gamma", "delta"]
noise = "log"
[model.equations]
prey = "alpha*prey - beta*prey*pred"
pred = "delta*prey*pred - gamma*pred"

[data]
csv = "pelts.csv"
time = "year"
time_origin = 1900
[data.observed]
prey = "hare_pelts"
pred = "lynx_pelts"

[fit]
estimators = ["GradientMatching", "Embedding"]

[bayes]
draws = 500
tune = 300
chains = 2
likelihood = "lognormal"
[bayes.priors]
alpha = "TruncatedNormal(mu=1, sigma=0.5, lower=0)"
gamma = "TruncatedNormal(mu=1, sigma=0.5, lower=0)"
beta = "TruncatedNormal(mu=0.05, sigma=0.05, lower=0)"
delta = "TruncatedNormal(mu=0.05, sigma=0.05, lower=0)"
"x0[prey]" = "LogNormal(mu=2.302585, sigma=1)"
"x0[pred]" = "LogNormal(mu=2.302585, sigma=1)"
"sigma[prey]" = "LogNormal(mu=-1, sigma=1)"
"sigma[pred]" = "LogNormal(mu=-1, sigma=1)"
''')
print(pathlib.Path("lynx_hare.toml").read_text())
"""),
    code("""
from odeinfer.pipeline import run_spec
from odeinfer.spec import load_spec

spec = load_spec("lynx_hare.toml")
result = run_spec(spec)
assert [e.estimator for e in result.estimates] == ["GradientMatching", "Embedding"]
assert result.idata is not None
result.timings
"""),
    code("""
path = result.export_html("05_spec_report.html")
print("wrote", path, f"({pathlib.Path(path).stat().st_size / 1e3:.0f} kB)")
"""),
    md("""
The same from a terminal:

```bash
odeinfer report lynx_hare.toml -o lynx_hare.html
```
"""),
]

NOTEBOOKS = {
    "01_quickstart_lynx_hare.ipynb": QUICKSTART,
    "02_alpha_pinene_matching_vs_nls.ipynb": ALPHA_PINENE,
    "03_lorenz_shooting_and_bock.ipynb": LORENZ,
    "04_bayes_lynx_hare.ipynb": BAYES,
    "05_explorer_and_report.ipynb": EXPLORER,
}


def notebook(cells):
    """An nbformat v4 notebook (no outputs, deterministic cell ids) from ``(kind, source)`` pairs."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb = new_notebook(metadata={
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    })
    for i, (kind, source) in enumerate(cells):
        cell = new_markdown_cell(source) if kind == "markdown" else new_code_cell(source)
        cell["id"] = f"cell-{i:02d}"
        nb.cells.append(cell)
    nbformat.validate(nb)
    return nb


def render(cells) -> str:
    """The notebook file's text."""
    import nbformat

    return nbformat.writes(notebook(cells)) + "\n"


def build(out_dir=HERE) -> list[Path]:
    """Write every notebook into ``out_dir``; returns the paths."""
    out_dir = Path(out_dir)
    paths = []
    for name, cells in NOTEBOOKS.items():
        path = out_dir / name
        path.write_text(render(cells), encoding="utf-8")
        paths.append(path)
    return paths


def stale(out_dir=HERE) -> list[str]:
    """Names of notebooks in ``out_dir`` that differ from what :func:`build` would write."""
    out_dir = Path(out_dir)
    return [name for name, cells in NOTEBOOKS.items()
            if not (out_dir / name).is_file() or (out_dir / name).read_text(encoding="utf-8") != render(cells)]


if __name__ == "__main__":
    if "--check" in sys.argv[1:]:
        bad = stale()
        print("stale: " + ", ".join(bad) if bad else "notebooks up to date")
        sys.exit(1 if bad else 0)
    for p in build():
        print("wrote", p.name)
