"""Profile-likelihood confidence intervals (reusable by any least-squares estimator).

For a quantity ``u_i`` the profile is ``D(v) = 2 (min_{u: u_i = v} C(u) - C(u_hat))`` with
``C = 0.5 ||r_w||^2`` the weighted cost (residuals divided by the noise sd, which is held at
its estimate). The ``1 - alpha`` interval is ``{v : D(v) <= chi2_1(1 - alpha)}``: the
likelihood-ratio interval with the noise variance fixed at its estimate. On a model linear in
the unknowns ``D(v) = (v - u_hat_i)^2 / se_i^2`` exactly, so the interval equals the Wald
interval (same normal quantile); on a nonlinear model it follows the curvature (asymmetric
intervals, infinite bounds when the parameter is not identifiable).

The walk starts at the estimate, steps outwards (a first step of one standard error, then
steps sized by a quadratic extrapolation of ``D``), re-optimising the other unknowns with
a warm start at every point, and brackets the crossing, which ``brentq`` then refines. A side
whose threshold is not reached before the bound of the unknown or ``max_range`` standard errors
is reported as ``-inf`` / ``+inf`` with an :class:`IdentifiabilityWarning` (flat profile); an
interval whose two half-widths differ by more than a factor ``asym_ratio`` gets a
:class:`ProfileWarning`.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from odeinfer.errors import OdeinferWarning

__all__ = ["ProfileLikelihood", "ProfileWarning"]


def _scoped(reoptimise):
    """``reoptimise`` with each call in its own :func:`~odeinfer.solve.api.auto_scope`."""
    from odeinfer.solve import auto_scope

    def run(u_start, i):
        with auto_scope():
            return reoptimise(u_start, i)

    return run


class ProfileWarning(OdeinferWarning):
    """A profile-likelihood interval is strongly asymmetric (the Wald interval is misleading)
    or a re-optimisation failed along the profile."""


class ProfileLikelihood:
    """Profile-likelihood intervals of the unknowns of one fitted least-squares problem.

    Parameters
    ----------
    names : sequence of str, length k
        Names of the profiled quantities (the first ``k`` unknowns).
    u_hat : ndarray (n_unknowns,)
        Optimum in internal coordinates.
    cost_hat : float
        Weighted cost ``0.5 ||r_w||^2`` at ``u_hat``.
    se : ndarray (k,)
        Wald standard errors in internal coordinates (NaN allowed: a default step is used).
    lo, hi : ndarray (n_unknowns,)
        Bounds of the unknowns (internal).
    reoptimise : callable
        ``reoptimise(u_start, i) -> (cost, u)`` or None: minimise the weighted cost over all
        unknowns except ``i`` (an index, or a tuple of indices for :meth:`region`; held at
        their values in ``u_start``), starting from ``u_start``. Each call is one local fit, run
        in its own :func:`~odeinfer.solve.api.auto_scope` (an oi.Auto solver starts it on
        Dormand-Prince), so a profile point depends on its warm start only, not on the solves
        made before it in this process.
    to_natural : callable
        ``to_natural(i, v) -> float``: the reported value of unknown ``i`` at internal value
        ``v`` (monotone increasing, e.g. ``exp`` for log-parametrised parameters).
    max_range : float, default 30
        Give up on a side (infinite bound) this many standard errors from the estimate.
    max_evals : int, default 60
        Re-optimisations per side.
    asym_ratio : float, default 2
        Warn (ProfileWarning) when one side of an interval is this many times longer than the other.
    width_ratio : float, default 1.5
        Warn (ProfileWarning) when an interval is this many times wider or narrower than the Wald interval of
        ``se`` at the same level: the likelihood is then far from the quadratic that ``se`` describes (a Wald
        interval 1.5 times too narrow covers about 81% where it claims 95%).
    remote : tuple (build, payload), optional
        How a worker process rebuilds ``(reoptimise, to_natural)``: ``build(payload)``, with
        ``build`` a top-level function and ``payload`` picklable. Needed by
        ``conf_int(executor=...)``, which walks each side of each profile as one task there.
    """

    def __init__(self, names, u_hat, cost_hat, se, lo, hi, reoptimise, to_natural, *, max_range=30.0,
                 max_evals=60, asym_ratio=2.0, width_ratio=1.5, remote=None):
        self.names = tuple(names)
        self.u_hat = np.array(u_hat, float)
        self.cost_hat = float(cost_hat)
        self.se = np.array(se, float)
        self.lo, self.hi = np.array(lo, float), np.array(hi, float)
        self._reopt = _scoped(reoptimise)
        self._nat = to_natural
        self.max_range = float(max_range)
        self.max_evals = int(max_evals)
        self.asym_ratio = float(asym_ratio)
        self.width_ratio = float(width_ratio)
        self._remote = remote
        self._cache = {}
        self.traces = {}

    def __reduce__(self):
        # holds solvers (numba buffers): not picklable; an unpickled estimate has no profiler
        return (_none, ())

    # ------------------------------------------------------------------------------------
    def _delta(self, i, v, warm):
        u = warm.copy()
        u[i] = v
        out = self._reopt(u, i)
        if out is None:
            return None
        cost, u_opt = out
        d = max(2.0 * (cost - self.cost_hat), 0.0)
        self.traces.setdefault(self.names[i], []).append((v, d))
        return d, u_opt

    def _side(self, i, sign, thr):
        """Internal value where D crosses ``thr`` on one side, ``+-inf`` if never, and flags."""
        from scipy.optimize import brentq

        v0 = self.u_hat[i]
        se = self.se[i]
        h = se if (math.isfinite(se) and se > 0) else 0.1 * max(abs(v0), 1.0)
        bound = self.hi[i] if sign > 0 else self.lo[i]
        limit = v0 + sign * self.max_range * h
        bound = min(bound, limit) if sign > 0 else max(bound, limit)
        prev_v, prev_d, warm = v0, 0.0, self.u_hat.copy()
        n_fail = 0
        for _ in range(self.max_evals):
            v = prev_v + sign * h
            at_end = (v >= bound) if sign > 0 else (v <= bound)
            if at_end:
                v = bound
            out = self._delta(i, v, warm)
            if out is None:
                n_fail += 1
                h *= 0.5
                if n_fail > 8:
                    return sign * math.inf, "failed"
                continue
            d, u_opt = out
            if d >= thr:
                cache = {prev_v: warm, v: u_opt}

                def f(x):
                    # warm start from the nearer bracketing optimum
                    near = min(cache, key=lambda k: abs(k - x))
                    res = self._delta(i, x, cache[near])
                    if res is None:
                        return math.nan
                    cache[x] = res[1]
                    return res[0] - thr

                try:
                    root = brentq(f, prev_v, v, xtol=1e-6 * max(abs(h), 1e-12), rtol=1e-10, maxiter=60) \
                        if sign > 0 else brentq(f, v, prev_v, xtol=1e-6 * max(abs(h), 1e-12), rtol=1e-10,
                                                maxiter=60)
                except (ValueError, RuntimeError):
                    root = v
                return root, "ok"
            if at_end:
                return sign * math.inf, "flat"
            dist = abs(v - v0)
            if d > 1e-12 * thr:
                target = dist * math.sqrt(thr / d)  # quadratic extrapolation of D
                h = min(max(1.1 * target - dist, 0.25 * h), 2.0 * dist)
            else:
                h = 2.0 * h
            prev_v, prev_d, warm = v, d, u_opt
        return sign * math.inf, "flat"

    def interval(self, name, alpha=0.05):
        """``(lower, upper)`` in natural units for ``name`` (cached per ``(name, alpha)``)."""
        from scipy.stats import chi2

        key = (name, float(alpha))
        if key in self._cache:
            return self._cache[key]
        i = self.names.index(name)
        thr = float(chi2.ppf(1.0 - alpha, 1))
        lo_v, lo_flag = self._side(i, -1, thr)
        hi_v, hi_flag = self._side(i, +1, thr)
        res = self._result(i, lo_v, lo_flag, hi_v, hi_flag)
        self._cache[key] = res
        return res

    def region(self, name_a, name_b, *, n=15, span=3.0):
        """Profile deviance of a pair on a grid: ``D(a, b) = 2 (min_{u: u_a = a, u_b = b} C(u) - C(u_hat))``.

        The ``level`` joint confidence region is ``{D <= chi2_2(level)}``. The grid spans
        ``+-span`` Wald standard errors in the fitted coordinates (log scale for log-parametrised
        quantities), clipped to the bounds; the others are re-optimised at every node, each warm
        started from its neighbour (rows walk outwards from the estimate).

        Parameters
        ----------
        name_a, name_b : str
        n : int, default 15
            Grid points per axis (odd, so the estimate is a node).
        span : float, default 3.0

        Returns
        -------
        a, b : ndarray (n,)
            Grid values in natural units.
        D : ndarray (n, n)
            ``D[j, k]`` at ``(a[k], b[j])`` (rows: b), NaN where a re-optimisation failed; cached.
        """
        key = ("region", name_a, name_b, int(n), float(span))
        if key in self._cache:
            return self._cache[key]
        i, j = self.names.index(name_a), self.names.index(name_b)
        n = int(n) + (1 - int(n) % 2)
        axes = []
        for q in (i, j):
            se = self.se[q] if np.isfinite(self.se[q]) and self.se[q] > 0 else 0.1 * max(abs(self.u_hat[q]), 1.0)
            g = self.u_hat[q] + span * se * np.linspace(-1.0, 1.0, n)
            axes.append(np.clip(g, self.lo[q], self.hi[q]))
        ga, gb = axes
        c = n // 2
        D = np.full((n, n), np.nan)
        centre = {}  # row -> solution at the centre column: warm start of the row's two walks
        for jb in list(range(c, n)) + list(range(c - 1, -1, -1)):
            w0 = centre.get(jb - 1 if jb > c else jb + 1, self.u_hat)
            for cols in (range(c, n), range(c - 1, -1, -1)):
                w = centre.get(jb, w0)
                for ka in cols:
                    u = w.copy()
                    u[i], u[j] = ga[ka], gb[jb]
                    out = self._reopt(u, (i, j))
                    if out is None:
                        continue
                    cost, w = out
                    D[jb, ka] = max(2.0 * (cost - self.cost_hat), 0.0)
                    if ka == c:
                        centre[jb] = w
        res = (np.array([self._nat(i, v) for v in ga]), np.array([self._nat(j, v) for v in gb]), D)
        self._cache[key] = res
        return res

    def conf_int(self, alpha=0.05, names=None, *, executor=None, progress=False):
        """Profile intervals as a DataFrame (columns ``lower``, ``upper``), with warnings.

        With ``executor`` (any ``concurrent.futures.Executor`` or a Dask Client), the two sides of
        each profile not yet cached run as separate tasks there (see
        :func:`odeinfer.inference.executor.map_chunks`); each side starts from the estimate, so
        the intervals and traces are those of a run in this process. Needs ``remote``.
        """
        import pandas as pd

        from odeinfer.estimators.base import IdentifiabilityWarning

        from odeinfer.smooth._blas import single_threaded_blas

        names = self.names if names is None else tuple(names)
        if executor is not None:
            self._run_sides(alpha, names, executor, progress)
        with single_threaded_blas():
            return self._conf_int(alpha, names, IdentifiabilityWarning, pd)

    def _run_sides(self, alpha, names, executor, progress):
        """Fill the cache of ``names`` at ``alpha`` from side walks run on ``executor``."""
        from scipy.stats import chi2

        from odeinfer.errors import InputError
        from odeinfer.inference.executor import as_executor, map_chunks, n_slots, split

        if self._remote is None:
            raise InputError("executor: this estimate's profiles can only run in this process (its estimator gives "
                             "no way to rebuild the problem in a worker); drop executor=")
        executor = as_executor(executor)
        todo = [n for n in names if (n, float(alpha)) not in self._cache]
        if not todo:
            return
        thr = float(chi2.ppf(1.0 - alpha, 1))
        tasks = [(self.names.index(n), sign) for n in todo for sign in (-1, +1)]
        settings = {"max_range": self.max_range, "max_evals": self.max_evals, "asym_ratio": self.asym_ratio}
        payload = (self._remote, self.names, self.u_hat, self.cost_hat, self.se, self.lo, self.hi, settings, thr)
        outs = map_chunks(profile_sides, payload, split(tasks, n_slots(executor)), executor=executor,
                          progress=progress, desc="profile")
        sides = {(i, sign): (v, flag, trace) for out in outs for i, sign, v, flag, trace in out}
        for n in todo:
            i = self.names.index(n)
            (lo_v, lo_flag, lo_tr), (hi_v, hi_flag, hi_tr) = sides[(i, -1)], sides[(i, +1)]
            self.traces.setdefault(n, []).extend(lo_tr + hi_tr)
            self._cache[(n, float(alpha))] = self._result(i, lo_v, lo_flag, hi_v, hi_flag)

    def _result(self, i, lo_v, lo_flag, hi_v, hi_flag):
        """The cached form of an interval: ``(lower, upper, flags, (lower, upper) internal)``."""
        flags = {lo_flag, hi_flag} - {"ok"}
        lo_n = -math.inf if lo_v == -math.inf else self._nat(i, lo_v)
        hi_n = math.inf if hi_v == math.inf else self._nat(i, hi_v)
        return (lo_n, hi_n, flags, (lo_v, hi_v))

    def _conf_int(self, alpha, names, IdentifiabilityWarning, pd):
        rows = {}
        for name in names:
            lo_n, hi_n, flags, (lo_v, hi_v) = self.interval(name, alpha)
            i = self.names.index(name)
            if "flat" in flags:
                warnings.warn(
                    f"profile of {name!r} is flat: the {100 * (1 - alpha):g}% threshold is not reached within the "
                    f"bounds / {self.max_range:g} standard errors on the "
                    f"{'lower' if lo_v == -math.inf else 'upper'} side, so that bound is infinite; "
                    f"{name!r} is not identifiable from these data (fix it or add data)",
                    IdentifiabilityWarning, stacklevel=4)
            if "failed" in flags:
                warnings.warn(f"profile of {name!r}: re-optimisation failed repeatedly; bound set to infinity",
                              ProfileWarning, stacklevel=4)
            if math.isfinite(lo_v) and math.isfinite(hi_v):
                a, b = self.u_hat[i] - lo_v, hi_v - self.u_hat[i]
                if min(a, b) > 0 and max(a, b) / min(a, b) > self.asym_ratio:
                    warnings.warn(
                        f"profile interval of {name!r} is strongly asymmetric (half-widths {a:.3g} and {b:.3g} "
                        "in the fitted coordinates): the Wald interval is a poor approximation",
                        ProfileWarning, stacklevel=4)
                se = self.se[i] if i < self.se.size else math.nan
                if math.isfinite(se) and se > 0:
                    from scipy.stats import chi2

                    ratio = (hi_v - lo_v) / (2.0 * math.sqrt(chi2.ppf(1.0 - alpha, 1)) * se)
                    if not 1.0 / self.width_ratio <= ratio <= self.width_ratio:
                        why = ("it covers less than it claims" if ratio > 1 else
                               "the curvature behind it (the Fisher information) misses much of the likelihood's")
                        warnings.warn(
                            f"profile interval of {name!r} is {ratio:.3g} times as wide as its Wald interval (in the "
                            f"fitted coordinates): the likelihood is far from the quadratic of the Wald standard "
                            f"error there, so the Wald interval is misleading ({why}); use the profile interval",
                            ProfileWarning, stacklevel=4)
            rows[name] = (lo_n, hi_n)
        return pd.DataFrame(rows, index=["lower", "upper"]).T


def profile_sides(payload, chunk):
    """Worker: ``[(i, sign, internal bound, flag, trace), ...]`` for the sides ``chunk = [(i, sign), ...]``."""
    from odeinfer.smooth._blas import single_threaded_blas

    (build, build_payload), names, u_hat, cost_hat, se, lo, hi, settings, thr = payload
    reoptimise, to_natural = build(build_payload)
    out = []
    with single_threaded_blas():
        for i, sign in chunk:
            prof = ProfileLikelihood(names, u_hat, cost_hat, se, lo, hi, reoptimise, to_natural, **settings)
            v, flag = prof._side(i, sign, thr)
            out.append((i, sign, v, flag, prof.traces.get(names[i], [])))
    return out


def _none():
    return None
