"""Pairwise Wald confidence ellipses against posterior highest-density regions."""

from __future__ import annotations

import math
import warnings

import numpy as np

from odeinfer.errors import InputError, OdeinferWarning
from odeinfer.plots._common import COLORS, POSTERIOR_COLOR, axes_figure, check_level, new_figure

__all__ = ["regions", "ellipse", "hdr_threshold"]


def ellipse(center, cov, level=0.95, n=200):
    """Boundary of the Wald region ``{x : (x - c)' cov^-1 (x - c) <= chi2_2(level)}``: ndarray (n, 2).

    Its semi-axes are ``sqrt(chi2_2(level) * lambda_i)`` along the eigenvectors of ``cov``.
    """
    from scipy.stats import chi2

    center = np.asarray(center, dtype=float).reshape(2)
    cov = np.asarray(cov, dtype=float).reshape(2, 2)
    lam, vec = np.linalg.eigh(0.5 * (cov + cov.T))
    if not np.all(np.isfinite(lam)) or lam.min() <= 0:
        raise InputError(f"cov: expected a positive definite 2x2 covariance, got eigenvalues {lam.tolist()}")
    r = math.sqrt(chi2.ppf(level, 2))
    a = np.linspace(0.0, 2 * np.pi, n)
    circle = np.column_stack([np.cos(a), np.sin(a)])
    return center + r * (circle * np.sqrt(lam)) @ vec.T


def hdr_threshold(density_at_draws, level):
    """Density value whose super-level set holds ``level`` of the draws (Hyndman 1996,
    "Computing and graphing highest density regions", Am. Stat. 50, 120-126)."""
    return float(np.quantile(np.asarray(density_at_draws, dtype=float), 1.0 - level))


def _pair(estimates, idata, pair):
    if pair is None:
        if estimates:
            names = list(estimates[0].names)
        else:
            from odeinfer.diagnostics._names import parameter_names

            names = parameter_names(idata)
        if len(names) < 2:
            raise InputError(f"pair: fewer than two quantities to plot ({names}); pass pair=(name1, name2)")
        return names[0], names[1]
    if isinstance(pair, str) or len(tuple(pair)) != 2 or len(set(pair)) != 2:
        raise InputError(f"pair: expected two different names such as ('alpha', 'beta'), got {pair!r}")
    return str(pair[0]), str(pair[1])


def regions(estimates, idata=None, pair=None, level=0.95, ax=None, *, profile=False, max_points=2000, rng=0):
    """Wald confidence ellipses of a parameter pair against the posterior's credible region.

    Parameters
    ----------
    estimates : Estimate or sequence of Estimate
        Estimates of one model; each with a finite covariance of ``pair`` gets its
        ``level`` ellipse (chi-square with 2 degrees of freedom) and a marker at the
        estimate. Estimates without one get the marker only (with a warning).
    idata : arviz.InferenceData, optional
        Posterior draws: scatter of (at most ``max_points``) draws and the ``level``
        highest-density region of a Gaussian KDE of the draws (contour).
    pair : (str, str), optional
        Names as in the Estimate (``"alpha"``, ``"x0[prey]"``); default: the first two
        names of the first estimate.
    level : float, default 0.95
    ax : matplotlib Axes, optional
    profile : bool, default False
        Also draw the joint profile-likelihood region ``{D <= chi2_2(level)}`` (dashed) of each
        estimate whose estimator provides profiles (``oi.Embedding``, ``oi.AdjointDDE``): a
        15 x 15 grid of re-optimisations, cached on the estimate.
    max_points : int, default 2000
        Draws shown in the scatter (all are used for the KDE up to 5000).
    rng : int or numpy Generator, default 0
        For subsampling draws.

    Returns
    -------
    matplotlib.figure.Figure
        Lines on the axes: one ellipse and one marker per estimate with a covariance,
        one marker per estimate without; the posterior adds a scatter (collection), a
        contour set and a marker at the posterior mean.
    """
    from odeinfer.diagnostics._names import draws_matrix, posterior_of
    from odeinfer.diagnostics.intervals import as_estimates, source_labels

    estimates = as_estimates(estimates) if estimates is not None else []
    if not estimates and idata is None:
        raise InputError("estimates: nothing to plot; pass at least one Estimate or idata")
    level = check_level(level)
    if idata is not None:
        posterior_of(idata)
    p, q = _pair(estimates, idata, pair)
    for e in estimates:
        missing = [n for n in (p, q) if n not in e.names]
        if missing:
            raise InputError(f"pair: {missing} are not estimated by {e.estimator} (names: {list(e.names)})")
    if ax is None:
        fig, axes = new_figure(1, 1, width=5.6, height=4.8)
        ax = axes[0, 0]
    else:
        fig = axes_figure(ax)
    extra_handles = []
    if idata is not None:
        X = draws_matrix(idata, [p, q])
        X = X[np.all(np.isfinite(X), axis=1)]
        gen = np.random.default_rng(rng)
        show = X if len(X) <= max_points else X[gen.choice(len(X), max_points, replace=False)]
        ax.scatter(show[:, 0], show[:, 1], s=4, color=POSTERIOR_COLOR, alpha=0.25, lw=0, label="posterior draws")
        if _hdr_contour(ax, X, level, gen) is not None:
            from matplotlib.lines import Line2D

            extra_handles.append(Line2D([], [], color=POSTERIOR_COLOR, lw=1.6,
                                        label=f"posterior {100 * level:g}% HDR (KDE)"))
        m = X.mean(axis=0)
        ax.plot([m[0]], [m[1]], marker="s", color=POSTERIOR_COLOR, linestyle="none", label="posterior mean")
    for j, (e, lab) in enumerate(zip(estimates, source_labels(estimates))):
        color = COLORS[j % len(COLORS)]
        i = [e.names.index(p), e.names.index(q)]
        c = np.asarray(e.values)[i]
        cov = None if e.cov is None else np.asarray(e.cov)[np.ix_(i, i)]
        try:
            if cov is None or not np.all(np.isfinite(cov)):
                raise InputError("no finite covariance")
            xy = ellipse(c, cov, level)
        except InputError as exc:
            warnings.warn(f"{lab}: no confidence ellipse ({exc}); only the point estimate is shown",
                          OdeinferWarning, stacklevel=2)
        else:
            ax.plot(xy[:, 0], xy[:, 1], color=color, lw=1.6, label=f"{lab} {100 * level:g}% Wald")
        ax.plot([c[0]], [c[1]], marker="o", color=color, linestyle="none")
        if profile:
            _profile_region(ax, e, lab, p, q, level, color)
    ax.set_xlabel(p)
    ax.set_ylabel(q)
    ax.set_title(f"{100 * level:g}% confidence and credible regions")
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + extra_handles, fontsize="small", loc="best")
    return fig


def _profile_region(ax, est, label, p, q, level, color):
    from scipy.stats import chi2

    if est._profiler is None:
        warnings.warn(f"{label}: no profile region (its estimator provides no profiles, or the estimate was "
                      "loaded from a file)", OdeinferWarning, stacklevel=3)
        return
    a, b, D = est._profiler.region(p, q)
    if np.isfinite(D).sum() < 9:
        warnings.warn(f"{label}: profile region not drawn (re-optimisations failed)", OdeinferWarning, stacklevel=3)
        return
    ax.contour(a, b, np.where(np.isfinite(D), D, np.inf), levels=[chi2.ppf(level, 2)], colors=[color],
               linestyles="dashed", linewidths=1.4)
    from matplotlib.lines import Line2D

    ax.add_line(Line2D([], [], color=color, lw=1.4, linestyle="dashed", label=f"{label} {100 * level:g}% profile"))


def hdr_grid(X, level, gen):
    """The KDE of the draws ``X`` (n, 2) on an 80 x 80 grid and the threshold of its ``level``
    highest-density region: ``(GX, GY, density, threshold)``, or None when the draws are too
    few or degenerate. Shared by :func:`regions` and the interactive report."""
    from scipy.stats import gaussian_kde

    if len(X) < 10 or np.any(np.std(X, axis=0) == 0):
        return None
    fit = X if len(X) <= 5000 else X[gen.choice(len(X), 5000, replace=False)]
    # Standardise before the KDE so that the bandwidth suits both axes.
    mu, sd = fit.mean(axis=0), fit.std(axis=0)
    Z = (fit - mu) / sd
    try:
        kde = gaussian_kde(Z.T)
    except np.linalg.LinAlgError:  # perfectly correlated draws
        return None
    thr = hdr_threshold(kde(Z.T), level)
    lo, hi = Z.min(axis=0), Z.max(axis=0)
    pad = 0.15 * (hi - lo)
    gx = np.linspace(lo[0] - pad[0], hi[0] + pad[0], 80)
    gy = np.linspace(lo[1] - pad[1], hi[1] + pad[1], 80)
    GX, GY = np.meshgrid(gx, gy)
    dens = kde(np.vstack([GX.ravel(), GY.ravel()])).reshape(GX.shape)
    return GX * sd[0] + mu[0], GY * sd[1] + mu[1], dens, thr


def _hdr_contour(ax, X, level, gen):
    grid = hdr_grid(X, level, gen)
    if grid is None:
        return None
    GX, GY, dens, thr = grid
    return ax.contour(GX, GY, dens, levels=[thr], colors=[POSTERIOR_COLOR], linewidths=1.6)
