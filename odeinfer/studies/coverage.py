"""The coverage panel: do every estimator's confidence intervals cover at their nominal level?

For each setting (a zoo model, a sample size, a noise level), estimator and interval method
(``"wald"``, ``"profile"`` where the estimate provides it, ``"bootstrap"`` percentile and
studentized), ``R`` datasets are simulated from the truth, fitted, and the 95% intervals checked:

- per parameter: the fraction of the ``R`` replicates whose interval contains the true value, with
  its binomial standard error ``sqrt(p (1 - p) / R)``, and the mean interval width (over the finite
  intervals; infinite ones are counted);
- jointly: the fraction whose 95% joint region contains the whole true vector. Wald: the ellipse
  ``(theta - theta_hat)' V^-1 (theta - theta_hat) <= chi2_p(0.95)``. Profile: the likelihood-ratio
  region ``2 (cost(theta) - cost_hat) <= chi2_p(0.95)`` (weighted cost at the fitted noise sd).
  Bootstrap percentile: ``theta`` within the 95% quantile of the refits' Mahalanobis distances to
  ``theta_hat`` in the refits' own covariance; studentized: the Wald ellipse statistic calibrated by
  the 95% quantile of the refits' own statistics ``(theta*_b - theta_hat)' V*_b^-1 (theta*_b - theta_hat)``.

A fit that raises, does not converge or returns a non-finite estimate is a *failed fit*: it counts
as a miss for every interval, and the number is reported. An interval that cannot be computed for a
converged fit (NaN ends, a profile or bootstrap that raises) is a miss too, counted apart.

Replicates run in blocks of :data:`BLOCK`; block ``b`` of a setting simulates from
``SeedSequence(setting seed, spawn_key=(b,))``, the same data for every estimator (common random
numbers). Each block's frame is cached on disk keyed on the code version
(:func:`odeinfer.studies.code_key` of the whole package), so an interrupted panel resumes and a
larger ``R`` reuses the blocks already run. Blocks run on local processes (``n_jobs``) or any
``concurrent.futures`` executor (a Dask client's included), with a progress bar.

The report (:func:`render`) is one markdown block of the whole grid. With a block written before (``--merge``),
the rows of the cells this cache has not run are kept verbatim and every row names its code version.

Run it with ``python -m odeinfer.studies coverage --help``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from ..errors import StudyError

__all__ = ["SETTINGS", "ESTIMATORS", "GROUPS", "BLOCK", "Setting", "applies", "run_cell", "summarise",
           "verdict", "CellSimulate", "CellFit", "report", "render", "parse_block", "read_block"]

#: replicates per cached block (``R`` is rounded up to a multiple)
BLOCK = 25
ALPHA = 0.05
TARGET, BAND, K_SE = 0.95, 0.03, 2.0
#: method groups run together: a group's replicates give its methods' rows (Wald is computed in
#: every group but reported from the ``"wald"`` group)
GROUPS = {"wald": ("wald",), "profile": ("profile",), "bootstrap": ("bootstrap-percentile", "bootstrap-studentized")}
METHODS = ("wald", "profile", "bootstrap-percentile", "bootstrap-studentized")
BASE_SEED = 16


@dataclass(frozen=True)
class Setting:
    """One data-generating setting of the panel."""

    key: str
    zoo: str
    n: int
    sigma: float
    noise: str = "additive"  # "additive" | "log"; for the delay model sigma is a multiple of sd(clean)
    t_end: float = 0.0
    first: float = 0.0  # first observation time (t0 = 0); 0 observes at t0
    label: str = ""


def _pinene(n, s):
    return Setting(f"pinene_n{n}_s{s:g}", "alpha_pinene", n, float(s), t_end=100.0, first=100.0 / n,
                   label=f"alpha-pinene n = {n}, sigma = {s:g}")


SETTINGS = {s.key: s for s in [
    Setting("lv_n21", "lotka_volterra", 21, 0.25, "log", 20.0, 0.0, "Lotka-Volterra n = 21, log sd 0.25"),
    Setting("lv_n201", "lotka_volterra", 201, 0.25, "log", 20.0, 0.0, "Lotka-Volterra n = 201, log sd 0.25"),
    *[_pinene(n, s) for s in (3, 8) for n in (50, 200, 400)],
    Setting("fhn_n401", "fitzhugh_nagumo", 401, 0.5, "additive", 20.0, 0.0, "FitzHugh-Nagumo n = 401, sigma = 0.5"),
    Setting("sir_log", "sir", 14, 0.2, "log", 14.0, 1.0, "SIR (I observed) n = 14, log sd 0.2"),
    Setting("ded_n101", "delay_exponential_decay", 101, 0.3, "additive", 10.0, 0.0,
            "delay exponential decay n = 101, sd 0.3 sd(x)"),
]}

#: estimators whose estimates offer no profile / no bootstrap in this panel (read from the estimators:
#: a profile needs a likelihood-type objective, a bootstrap a model to simulate from)
NO_PROFILE = ("Simultaneous", "OrthogonalConditions", "GradientMatching", "NewtonRaphson", "GradientDescent",
              "StochasticNewton", "StochasticGradient")
NO_BOOTSTRAP = ()

ESTIMATORS = ("Embedding", "Simultaneous", "OrthogonalConditions", "GradientMatching", "NewtonRaphson",
              "GradientDescent", "StochasticNewton", "StochasticGradient", "AdjointDDE")
NEWTON = ("NewtonRaphson", "GradientDescent", "StochasticNewton", "StochasticGradient")


def _entry(setting):
    from odeinfer import zoo

    return getattr(zoo, setting.zoo)()


def _model(setting):
    m = _entry(setting).model
    return m.with_observation(noise="log") if setting.noise == "log" else m


def applies(setting, estimator):
    """None when ``estimator`` runs on ``setting``, else why not (a refusal of the estimator itself)."""
    entry = _entry(setting)
    delays = bool(entry.model.delays)
    if estimator == "AdjointDDE":
        return None if delays else "ODE model (AdjointDDE fits delay models)"
    if delays:
        return ("the delay is estimated: the matching estimators need it fixed" if estimator in
                ("OrthogonalConditions", "GradientMatching") else "delay model (not handled)")
    if estimator in NEWTON:
        if setting.noise == "log":
            return "log-normal noise is refused (differences of the raw observations)"
        if len(entry.model.observed) < len(entry.model.states):
            return "needs every state observed"
    if estimator in ("OrthogonalConditions", "GradientMatching") and len(entry.model.observed) < len(entry.model.states):
        return "needs every state observed"
    return None


# -- data ---------------------------------------------------------------------------------------
_CLEAN = {}


def _times(setting):
    return np.linspace(setting.first, setting.t_end, setting.n)


def _clean(setting):
    """(t, clean observed states, noise sd per observed state, truth dict, fit context), per process."""
    if setting.key in _CLEAN:
        return _CLEAN[setting.key]
    import odeinfer as oi

    entry, model, t = _entry(setting), _model(setting), _times(setting)
    if model.delays:
        prob = oi.Problem(model, t, history=entry.history, t0=entry.t0)
        y = np.asarray(oi.solve(prob, entry.params_array(),
                                solver=oi.MethodOfSteps(oi.Dopri5(rtol=1e-10, atol=1e-12))).y, float)
        sd = setting.sigma * np.std(y, axis=0, ddof=1)
        truth = {**dict(entry.params), **dict(zip(entry.history_param_names, entry.history_params_array()))}
        ctx = {"history": entry.history}
    else:
        prob = oi.Problem(model, t, x0=dict(entry.x0), t0=entry.t0)
        y = np.asarray(oi.solve(prob, dict(entry.params), solver=oi.Dopri5(rtol=1e-11, atol=1e-12)).y, float)
        sd = np.full(len(model.observed), setting.sigma)
        # the x0 entries only matter to estimators that estimate the initial state (Simultaneous)
        truth = {**dict(entry.params), **{f"x0[{k}]": float(v) for k, v in entry.x0.items()}}
        ctx = {"x0": dict(entry.x0), "start": dict(entry.params)}
    cols = [model.states.index(s) for s in model.observed]
    _CLEAN[setting.key] = out = (t, y[:, cols], sd, truth, ctx, model, float(entry.t0))
    return out


class CellSimulate:
    """``simulate_fn`` of the panel: one noisy dataset of ``setting`` (top level: picklable)."""

    def __init__(self, key):
        self.key = key

    def __call__(self, rng):
        from odeinfer.data import Data

        t, y, sd, truth, _, model, t0 = _clean(SETTINGS[self.key])
        e = rng.standard_normal(y.shape) * sd
        obs = y * np.exp(e) if model.observation.noise == "log" else y + e
        return Data(t, obs, model.observed, t0=t0), dict(truth)


def _estimator(name):
    import odeinfer as oi

    return getattr(oi, name)()


def _fit(setting, name, data):
    _, _, _, truth, ctx, model, _ = _clean(setting)
    est = _estimator(name)
    if name == "AdjointDDE":
        return est.fit(model, data, history=ctx["history"], start=dict(truth))
    if name in NEWTON:
        return est.fit(model, data, start=ctx["start"])
    if name in ("OrthogonalConditions", "GradientMatching"):  # start: used for parameters entering nonlinearly
        return est.fit(model, data, x0=ctx["x0"], start=ctx["start"])
    return est.fit(model, data, x0=ctx["x0"], start=ctx["start"])


class CellFit:
    """The panel's ``estimator(data)``: fit, then every interval of ``methods`` at level 95%.

    Returns the estimate's values and standard errors, plus pseudo-parameters
    ``"<param>|<method>|lo"`` / ``"|hi"`` (interval ends), ``"|<method>|joint"`` (1 covered, 0 not,
    NaN undefined) and ``"|<method>|avail"`` (1, or 0 when the estimate does not offer the method).
    """

    def __init__(self, key, estimator, group, n_boot=200):
        self.key, self.estimator, self.group, self.n_boot = key, estimator, group, int(n_boot)

    def __call__(self, data):
        setting = SETTINGS[self.key]
        truth = _clean(setting)[3]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            e = _fit(setting, self.estimator, data)
        names = list(e.names)
        params = dict(zip(names, np.asarray(e.values, float)))
        bse = dict(zip(names, e.bse.to_numpy()))
        ok = e.converged and all(math.isfinite(v) for v in params.values())
        if ok:
            th = np.array([truth.get(n, math.nan) for n in names])
            methods = ("wald",) + tuple(m for m in GROUPS[self.group] if m != "wald")
            for m in methods:
                params.update(_intervals(e, m, th, self.n_boot, data))
        return SimpleNamespace(params=params, bse=bse, converged=bool(e.converged))


def _boot_seed(data):
    return int.from_bytes(hashlib.sha256(np.ascontiguousarray(data.y, float).tobytes()).digest()[:4], "little")


def _intervals(e, method, th, n_boot, data):
    """Pseudo-parameters of one method (see :class:`CellFit`)."""
    from scipy.stats import chi2

    names, p = list(e.names), len(e.names)
    out = {f"|{method}|avail": 1.0, f"|{method}|joint": math.nan}
    known = np.isfinite(th)  # the joint region is over the quantities with a true value
    q = chi2.ppf(1 - ALPHA, int(known.sum()))
    lo = hi = np.full(p, math.nan)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if method == "wald":
                ci = e.conf_int(ALPHA)
                out[f"|{method}|joint"] = _safe(_wald_joint, e, th, known, q)
            elif method == "profile":
                if e._profiler is None:
                    return {f"|{method}|avail": 0.0}
                ci = e.conf_int(ALPHA, method="profile")
                out[f"|{method}|joint"] = _safe(_profile_joint, e, th, q)
            else:
                if e._bootstrapper is None:
                    return {f"|{method}|avail": 0.0}
                kind = method.split("-")[1]
                seed = _boot_seed(data)
                ci = e.conf_int(ALPHA, method="bootstrap", kind=kind, n_boot=n_boot, seed=seed)
                out[f"|{method}|joint"] = _safe(_bootstrap_joint, e, th, known, kind, n_boot, seed)
        lo, hi = ci["lower"].to_numpy(float), ci["upper"].to_numpy(float)
    except Exception:  # the interval is a miss (counted apart from failed fits)
        pass
    for j, n in enumerate(names):
        out[f"{n}|{method}|lo"], out[f"{n}|{method}|hi"] = float(lo[j]), float(hi[j])
    return out


def _safe(fn, *args):
    """A joint region that cannot be evaluated (singular covariance, failed solve) is undefined (NaN)."""
    try:
        return fn(*args)
    except Exception:
        return math.nan


def _wald_joint(e, th, known, q):
    d = (np.asarray(e.values, float) - th)[known]
    V = None if e.cov is None else np.asarray(e.cov, float)[np.ix_(known, known)]
    if V is None or not np.all(np.isfinite(V)):
        return math.nan
    return float(d @ np.linalg.solve(V, d) <= q)


def _profile_joint(e, th, q):
    """Likelihood-ratio region: all profiled unknowns held at the truth (internal coordinates)."""
    prof = e._profiler
    k = len(prof.names)
    if k != len(th) or prof._reopt is None or not np.all(np.isfinite(th)):
        return math.nan
    u = prof.u_hat.copy()
    for i in range(k):
        u[i] = _to_internal(prof._nat, i, th[i], prof.u_hat[i])
    out = prof._reopt(u, tuple(range(k)))
    if out is None:
        return math.nan
    return float(2.0 * (out[0] - prof.cost_hat) <= q)


def _to_internal(to_natural, i, value, guess):
    """The internal coordinate whose natural value is ``value`` (identity or a log scale)."""
    if to_natural(i, guess) == guess:
        return value
    from scipy.optimize import brentq

    g = lambda v: to_natural(i, v) - value  # noqa: E731
    a, b = guess - 1.0, guess + 1.0
    while g(a) > 0:
        a -= 2 * (b - a)
    while g(b) < 0:
        b += 2 * (b - a)
    return brentq(g, a, b, xtol=1e-14)


def _bootstrap_joint(e, th, known, kind, n_boot, seed):
    s = e._bootstrapper.sample(n_boot, seed)
    ok = np.array([st == "converged" for st in s["status"]]) & np.all(np.isfinite(s["values"]), axis=1)
    theta = s["values"][ok][:, known]
    hat, th = np.asarray(e.values, float)[known], th[known]
    if theta.shape[0] < 10:
        return math.nan
    if kind == "percentile":
        Si = np.linalg.pinv(np.cov(theta, rowvar=False).reshape(len(hat), len(hat)))
        dstar = np.einsum("bi,ij,bj->b", theta - hat, Si, theta - hat)
        d = (th - hat) @ Si @ (th - hat)
    else:
        sub = np.ix_(known, known)
        covs = [c for c, good in zip(s["cov"], ok) if good]
        dstar = np.array([(x - hat) @ np.linalg.solve(c[sub], x - hat) if c is not None and np.all(np.isfinite(c))
                          else math.nan for x, c in zip(theta, covs)])
        dstar = dstar[np.isfinite(dstar)]
        if e.cov is None or dstar.size < 10:
            return math.nan
        d = (th - hat) @ np.linalg.solve(np.asarray(e.cov, float)[sub], th - hat)
    return float(d <= np.quantile(dstar, 1 - ALPHA))


# -- running ------------------------------------------------------------------------------------
def setting_seed(key):
    return BASE_SEED * 10**9 + int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "little")


def run_cell(key, estimator, group, reps, *, n_boot=200, cache_dir=None, executor=None, n_jobs=1, progress=True):
    """The study frame of one cell (``reps`` rounded up to a multiple of :data:`BLOCK`), block by block
    from the cache where present."""
    from odeinfer._lazy import pandas as pd

    import odeinfer

    from .cache import cached_frame, code_key
    from .montecarlo import monte_carlo

    if key not in SETTINGS:
        raise StudyError(f"setting: {key!r} is not in the panel; choose from {sorted(SETTINGS)}")
    if group not in GROUPS:
        raise StudyError(f"group: {group!r}; choose from {sorted(GROUPS)}")
    code = code_key(odeinfer)
    n_blocks = max(1, math.ceil(int(reps) / BLOCK))
    fit = CellFit(key, estimator, group, n_boot)
    sim = CellSimulate(key)
    frames = []
    for b in range(n_blocks):
        name = f"coverage_{key}_{estimator}_{group}" + (f"_B{n_boot}" if group == "bootstrap" else "") + f"_blk{b}"
        root = np.random.SeedSequence(setting_seed(key), spawn_key=(b,))

        def compute(root=root, b=b):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = monte_carlo(sim, {estimator: fit}, BLOCK, rng=root, progress=progress, executor=executor,
                                  n_jobs=1 if executor is not None else n_jobs)
            f = res.frame.copy()
            f["rep"] = f["rep"] + b * BLOCK
            return f

        frames.append(cached_frame(cache_dir, name, code, compute))
    return pd.concat(frames, ignore_index=True), code


def summarise(frame, methods):
    """Per method: dict with R, failed fits, per-parameter coverage / SE / mean width, joint coverage."""
    reps = sorted(frame["rep"].unique())
    R = len(reps)
    real = frame[frame["truth"].notna()]
    truth = real.groupby("param")["truth"].first()
    by = frame.pivot_table(index="rep", columns="param", values="estimate", aggfunc="first", dropna=False)
    # the quantities the estimator reports (a true value it does not estimate, e.g. a known x0, is not one)
    names = [n for n in dict.fromkeys(real["param"]) if np.any(np.isfinite(by[n].to_numpy(float)))]
    if not names:  # every fit raised: the model's parameters
        names = [n for n in dict.fromkeys(real["param"]) if not n.startswith("x0[")]
    err = frame.groupby("rep")["error"].apply(lambda s: bool(s.notna().any())).reindex(reps)
    conv = frame.groupby("rep")["converged"].apply(lambda s: bool(np.all(s.astype(bool)))).reindex(reps)
    est = by.reindex(index=reps, columns=names).to_numpy(float)
    failed = err.to_numpy() | ~conv.to_numpy() | ~np.all(np.isfinite(est), axis=1)
    out = {}
    for m in methods:
        col = f"|{m}|avail"
        avail = by[col].reindex(reps).to_numpy(float) if col in by.columns else np.full(R, np.nan)
        if np.any(avail == 0.0) and not np.any(avail == 1.0):
            out[m] = None  # the estimator does not offer the method
            continue
        for c in [f"{n}|{m}|{x}" for n in names for x in ("lo", "hi")] + [f"|{m}|joint"]:
            if c not in by.columns:  # every fit failed: nothing was computed
                by[c] = np.nan
        rows = {"R": R, "failed": int(failed.sum()), "params": {}}
        no_interval = np.zeros(R, bool)
        for n in names:
            lo = by[f"{n}|{m}|lo"].reindex(reps).to_numpy(float)
            hi = by[f"{n}|{m}|hi"].reindex(reps).to_numpy(float)
            t = float(truth[n])
            bad = ~failed & (np.isnan(lo) | np.isnan(hi))
            no_interval |= bad
            cover = ~failed & ~bad & (lo <= t) & (t <= hi)
            w = hi - lo
            fin = ~failed & ~bad & np.isfinite(w)
            p = float(cover.mean())
            rows["params"][n] = {"coverage": p, "se": math.sqrt(p * (1 - p) / R),
                                 "width": float(np.mean(w[fin])) if fin.any() else math.nan,
                                 "median_width": float(np.median(w[fin])) if fin.any() else math.nan,
                                 "infinite": int((~failed & ~bad & ~np.isfinite(w)).sum())}
        j = by[f"|{m}|joint"].reindex(reps).to_numpy(float)
        if np.all(np.isnan(j[~failed])) and (~failed).any():
            rows["joint"] = None
        else:
            pj = float(np.mean(~failed & (j == 1.0)))
            rows["joint"] = {"coverage": pj, "se": math.sqrt(pj * (1 - pj) / R),
                             "undefined": int(np.sum(~failed & np.isnan(j)))}
        rows["no_interval"] = int(no_interval.sum())
        out[m] = rows
    return out


def verdict(row):
    """"met" when every per-parameter coverage and the joint one (where defined) lies within
    ``0.95 +- (0.03 + 2 sqrt(0.95 * 0.05 / R))``, else "not met"."""
    tol = BAND + K_SE * math.sqrt(TARGET * (1 - TARGET) / row["R"])
    figs = [v["coverage"] for v in row["params"].values()] + ([row["joint"]["coverage"]] if row["joint"] else [])
    return "met" if all(abs(c - TARGET) <= tol for c in figs) else "not met"


def resummarise(cache_dir, frames_code):
    """Rebuild the record of the cells finished under ``frames_code`` from their cached frames with this
    code's :func:`summarise` (the frames are read, never recomputed; the report names both versions)."""
    from odeinfer._lazy import pandas as pd

    path = cell_path(cache_dir, frames_code)
    data = json.loads(path.read_text()) if path.is_file() else {}
    for cell, row in list(data.items()):
        if row.get("unavailable"):
            continue
        key, est, m = cell.split("|")
        group = next(g for g, ms in GROUPS.items() if m in ms)
        boot = f"_B{row['n_boot']}" if group == "bootstrap" else ""
        files = [Path(cache_dir) / f"coverage_{key}_{est}_{group}{boot}_blk{b}_{frames_code}.csv"
                 for b in range(row["R"] // BLOCK)]
        summary = summarise(pd.concat([pd.read_csv(f, keep_default_na=True) for f in files], ignore_index=True),
                            (m,))[m]
        data[cell] = {"R": 0, "unavailable": True} if summary is None else {**summary, "n_boot": row.get("n_boot")}
    from odeinfer._io import write_atomic

    write_atomic(json.dumps(data, indent=1, sort_keys=True), path)


def cell_path(cache_dir, code):
    return Path(cache_dir) / f"coverage_cells_{code}.json"


def record(cache_dir, code, key, estimator, group, summary, n_boot):
    """Add a cell's summary to the run's record (the report is written from it)."""
    path = cell_path(cache_dir, code)
    data = json.loads(path.read_text()) if path.is_file() else {}
    for m, row in summary.items():
        cell = f"{key}|{estimator}|{m}"
        if m not in GROUPS[group]:
            continue
        old = data.get(cell)
        if old is None or (row is None) or (old.get("R", 0) <= row["R"]):
            data[cell] = {"R": 0, "unavailable": True} if row is None else {**row, "n_boot": n_boot if
                                                                             group == "bootstrap" else None}
    from odeinfer._io import write_atomic

    write_atomic(json.dumps(data, indent=1, sort_keys=True), path)
    return data


def _fmt(c):
    return f"{c['coverage']:.3f} ({c['se']:.3f})"


def version_text(code, commit="", summarised_by=None):
    """How the block names a code version: odeinfer version, source hash, commit; with
    ``summarised_by``, the hash whose :func:`summarise` rebuilt the summaries (:func:`resummarise`)."""
    from odeinfer import __version__

    text = f"odeinfer {__version__}, source hash `{code}`" + (f", commit {commit}" if commit else "")
    if summarised_by:
        text += (f" (simulations and fits); the frames were summarised again by source hash `{summarised_by}` "
                 f"(:func:`resummarise`)")
    return text


def report(cache_dir, code, commit="", summarised_by=None, previous=None):
    """The markdown block of the whole grid: every (setting, estimator, method), run or not, from the cells
    recorded under ``code`` in ``cache_dir``. ``summarised_by``: the code key of :func:`resummarise`, when
    it is not ``code``. ``previous``: the text of a block written before (see :func:`render`), whose rows
    are kept for the cells this cache has not run."""
    path = cell_path(cache_dir, code)
    data = json.loads(path.read_text()) if path.is_file() else {}
    return render(data, version_text(code, commit, summarised_by), previous)


_TAGS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def parse_block(text):
    """The code versions and rows of a block :func:`render` wrote: ``(versions, rows)``, ``versions`` a
    dict tag -> version text, ``rows`` a dict ``(setting label, estimator, method)`` -> ``(row text
    without its code column, verdict, tag)``. A single-version block (``Code version: ...``) has one
    version, tag ``A``, for every row."""
    versions, rows, table = {}, {}, False
    for line in text.splitlines():
        if not table:
            m = re.match(r"^Code version: (.*)\.$", line) or re.match(r"^\* ([A-Z]): (.*)\.$", line)
            if m and line.startswith("Code version: "):
                versions["A"] = m.group(1)
            elif m:
                versions[m.group(1)] = m.group(2)
        if line.startswith("| setting |"):
            table = True
            continue
        if not table or not line.startswith("| ") or line.startswith("|---"):
            continue
        cols = line.strip()[2:-2].split(" | ")
        if len(cols) not in (9, 10) or cols[8] not in ("met", "not met"):
            raise StudyError(f"previous block: row {line[:80]!r}... has {len(cols)} columns ending in {cols[-1]!r}; "
                             f"expected the 9 columns render() writes (10 with the code column). Pass a block "
                             f"written by render().")
        tag = cols[9] if len(cols) == 10 else "A"
        if tag not in versions:
            raise StudyError(f"previous block: row of {cols[:3]} names code version {tag!r}, which the block's "
                             f"version list {sorted(versions)} lacks; pass a block written by render().")
        rows[tuple(cols[:3])] = ("| " + " | ".join(cols[:9]) + " |", cols[8], tag)
    return versions, rows


def render(data, version, previous=None):
    """The markdown block of the grid from ``data`` (cell key ``"setting|estimator|method"`` -> summary, as
    :func:`record` stores it) produced by the code named ``version`` (:func:`version_text`).

    Without ``previous`` every row is of that one code version (the block's first line). With
    ``previous`` (a block written before, e.g. by other code whose cache is gone) the block is merged: a
    cell of ``data`` is written from ``data``; a cell not in ``data`` keeps its previous row verbatim;
    every row then ends with a column naming its code version (the list at the top; versions no row uses
    are dropped). The count of cells run and the "not run" lists are over the rows of both.
    """
    old_versions, old_rows = parse_block(previous) if previous is not None else ({}, {})
    known = {(s.label, est, m) for s in SETTINGS.values() for est in ESTIMATORS for m in METHODS}
    stray = [k for k in old_rows if k not in known]
    if stray:
        raise StudyError(f"previous block: rows {stray[:3]} are not cells of the grid (SETTINGS x ESTIMATORS x "
                         f"METHODS); the grid changed since it was written: rerun those cells or drop the rows.")
    merge = previous is not None
    rows, used = [], set()
    n_run = n_met = 0
    refused, not_run, undefined = {}, {}, {}
    new_tag = next((t for t, v in old_versions.items() if v == version), None)
    if new_tag is None:  # the letter after the last one in use (a dropped letter is not reused)
        new_tag = _TAGS[max((_TAGS.index(t) for t in old_versions), default=-1) + 1]
    for key, s in SETTINGS.items():
        for est in ESTIMATORS:
            why = applies(s, est)
            if why is not None:
                refused.setdefault((est, why), []).append(s.label)
                continue
            for m in METHODS:
                cell = data.get(f"{key}|{est}|{m}")
                old = old_rows.get((s.label, est, m))
                static = (m == "profile" and est in NO_PROFILE) or (m.startswith("bootstrap") and est in NO_BOOTSTRAP)
                if cell is None and old is not None:
                    n_run += 1
                    n_met += old[1] == "met"
                    rows.append(f"{old[0]} {old[2]} |")
                    used.add(old[2])
                    continue
                if (cell is None and static) or (cell is not None and cell.get("unavailable")):
                    undefined.setdefault((est, m), []).append(s.label)
                    continue
                if cell is None:
                    not_run.setdefault((est, m), []).append(s.label)
                    continue
                n_run += 1
                ok = verdict(cell)
                n_met += ok == "met"
                pcs = "; ".join(f"{n} {_fmt(v)}" for n, v in cell["params"].items())
                wid = "; ".join(f"{v['width']:.3g} ({v.get('median_width', math.nan):.3g})"
                                + (f" {v['infinite']} inf" if v["infinite"] else "") for v in cell["params"].values())
                joint = _fmt(cell["joint"]) if cell["joint"] else "not defined"
                extra = f", B = {cell['n_boot']}" if cell.get("n_boot") else ""
                noint = f"; {cell['no_interval']} without interval" if cell.get("no_interval") else ""
                rows.append(f"| {s.label} | {est} | {m} | {cell['R']}{extra} | {cell['failed']}{noint} | {pcs} | "
                            f"{wid} | {joint} | {ok} |" + (f" {new_tag} |" if merge else ""))
                used.add(new_tag)
    header = ("| setting | estimator | method | R | failed fits | per-parameter coverage (SE) | width: mean (median) | "
              "joint coverage (SE) | verdict |")
    if merge:
        versions = {**old_versions, new_tag: version}
        lines = ["Code versions (the last column of each row names the one that produced it):", ""]
        lines += [f"* {t}: {v}." for t, v in sorted(versions.items()) if t in used] or ["* none"]
        lines += [""]
        header += " code |"
    else:
        lines = [f"Code version: {version}.", ""]
    lines += ["Rows: the cells run (R replicates; B bootstrap refits each). Coverage (binomial SE); width: mean "
              "(median) over the finite intervals, infinite ones counted.", "",
              header, "|---" * (header.count("|") - 1) + "|"]
    lines += rows
    lines += ["", f"{n_run} cells run: {n_met} met, {n_run - n_met} not met.", "",
              "**Not run** (in the grid, not reached by this recording):", ""]
    lines += [f"* {est}, {m}: {', '.join(labels)}" for (est, m), labels in not_run.items()] or ["* none"]
    lines += ["", "Not defined (the estimator offers no such interval):", ""]
    lines += [f"* {est}, {m}: {', '.join(labels)}" for (est, m), labels in undefined.items()] or ["* none"]
    lines += ["", "Not applicable (the estimator refuses the setting before any work):", ""]
    lines += [f"* {est}: {why}: {', '.join(labels)}" for (est, why), labels in refused.items()]
    return "\n".join(lines)


#: the markers around the panel block in a markdown file
BEGIN, END = "<!-- panel:begin -->", "<!-- panel:end -->"


def read_block(path):
    """The text between the panel markers of ``path`` (None when the file or the block is missing)."""
    path = Path(path)
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if BEGIN not in old:
        return None
    return old[old.index(BEGIN) + len(BEGIN):old.index(END)].strip("\n")


def write_report(text, path):
    from odeinfer._io import write_atomic

    path = Path(path)
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in old:
        i, j = old.index(BEGIN), old.index(END) + len(END)
        new = old[:i] + block + old[j:]
    else:
        new = old + "\n" + block + "\n"
    write_atomic(new, path)


def default_cache():
    return os.path.join(os.environ.get("ODEINFER_CACHE_DIR") or os.path.expanduser("~/.cache/odeinfer"), "studies")
