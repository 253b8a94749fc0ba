"""Spline proxies on the noise scale, shared by the matching estimators.

With ``noise="additive"`` the proxy of a state is the regression spline of ``y`` itself. When the
noise is additive on another scale ``z`` (``noise="log"``: ``z = log y``; an observable ``h(x)``
with a noise scale ``g``: ``z = g(h(x))``, see :mod:`odeinfer.estimators._state_maps`), the spline
``s(t) = sum_m c_m B_m(t)`` is fitted to ``z`` (GCV, coefficient covariance and residual sd on that
scale, where the noise is homoscedastic) and the proxy is ``x_hat = phi(s)``, ``phi`` the inverse map
(``exp`` for log noise: positive by construction). The estimators only need the proxy, its
derivative and, for the delta-method covariance, the derivatives of both with respect to the
coefficients; by the chain rule these are

    d x_hat / d c_m = phi'(s) B_m,    d x_hat' / d c_m = phi''(s) s' B_m + phi'(s) B_m',

so :meth:`MappedSplineFit.basis` returns them in place of the B-splines, and the coefficient
covariance stays that of the noise-scale fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from odeinfer.data import Data
from odeinfer.errors import InputError
from odeinfer.estimators._state_maps import EXP_MAP, ScalarMap, noise_scale
from odeinfer.smooth import SplineSmoother
from odeinfer.smooth.splines import SplineFit, SplineProxy

__all__ = ["MappedSplineFit", "LogSplineFit", "fit_proxies", "is_mapped_fit"]


@dataclass(frozen=True, eq=False)
class MappedSplineFit:
    """The proxy ``phi(s(t))`` of one state, ``s`` the regression spline of the noise-scale values.

    Attributes
    ----------
    inner : SplineFit
        The spline on the noise scale; ``coef``, ``cov``, ``sigma``, ``gcv``, ``knots`` are its own.
    fn : ScalarMap, default ``exp`` (log noise)
        ``x = phi(z)`` with ``phi'``, ``phi''``.
    """

    inner: SplineFit
    fn: ScalarMap = EXP_MAP

    log = property(lambda self: self.inner, doc="The noise-scale spline (the log-scale one under log noise).")
    state = property(lambda self: self.inner.state)
    knots = property(lambda self: self.inner.knots)
    degree = property(lambda self: self.inner.degree)
    coef = property(lambda self: self.inner.coef)
    cov = property(lambda self: self.inner.cov)
    sigma = property(lambda self: self.inner.sigma, doc="Residual sd of the noise-scale fit.")
    gcv = property(lambda self: self.inner.gcv)
    n_basis = property(lambda self: self.inner.n_basis)
    n_basis_gcv = property(lambda self: self.inner.n_basis_gcv)
    nobs = property(lambda self: self.inner.nobs)
    t = property(lambda self: self.inner.t)
    residuals = property(lambda self: self.inner.residuals, doc="Residuals of the noise-scale fit.")

    def __call__(self, t, nu=0):
        """``x_hat = phi(s)`` (``nu=0``) or ``x_hat' = phi'(s) s'`` (``nu=1``) at ``t``, shape (len(t),)."""
        s = self.inner(t)
        if nu == 0:
            return self.fn.x(s)
        if nu == 1:
            return self.fn.dx(s) * self.inner(t, 1)
        raise InputError(f"nu: the mapped proxy has derivatives of order 0 and 1, got {nu!r}")

    def basis(self, t, nu=0):
        """``d x_hat / d c`` (``nu=0``) or ``d x_hat' / d c`` (``nu=1``) at ``t``, shape (len(t), K)."""
        B = self.inner.basis(t)
        s = B @ self.inner.coef
        if nu == 0:
            return self.fn.dx(s)[:, None] * B
        if nu == 1:
            dB = self.inner.basis(t, 1)
            return self.fn.d2x(s)[:, None] * (dB @ self.inner.coef)[:, None] * B + self.fn.dx(s)[:, None] * dB
        raise InputError(f"nu: the mapped proxy has derivatives of order 0 and 1, got {nu!r}")

    def mapped(self, s):
        """``(phi(s), phi'(s))`` of noise-scale values ``s``."""
        return self.fn.x(s), self.fn.dx(s)


#: The proxy of a state with log noise (``MappedSplineFit`` with ``phi = exp``).
LogSplineFit = MappedSplineFit


def fit_proxies(smoother: SplineSmoother, model, experiments, x0=None, maps=None) -> list:
    """One proxy per experiment, on the noise scale (see the module notes).

    Parameters
    ----------
    smoother : SplineSmoother
    model : Model
        ``model.observation.noise == "log"`` maps the states in ``model.observed`` by ``exp``
        (the others stay additive); every state is fitted.
    experiments : sequence of Data
        State columns on the state scale (positive observations for log noise: checked by
        :func:`~odeinfer.estimators.base.prepare`).
    x0 : dict, optional
        ``{state: value}`` constraint ``x(t0) = x0`` (``zeta(x0)`` on the noise scale).
    maps : dict of str to ScalarMap, optional
        Per state, the map of an observable (:func:`odeinfer.estimators._state_maps.state_view`);
        it replaces the model's log noise.
    """
    fns = noise_scale(model, maps)
    if not fns:
        return [smoother.fit(d, states=model.states, x0=x0) for d in experiments]
    x0_scaled = None
    if x0 is not None:
        x0_scaled = {s: (float(fns[s].z(v)) if s in fns else v) for s, v in x0.items()}
        bad = {s: x0[s] for s, v in x0_scaled.items() if not np.isfinite(v)}
        if bad:
            why = "the model's noise is 'log' and the proxy is fitted to log y; give positive initial states" \
                if maps is None else "the proxy is fitted on the observables' noise scale, where they have no value;" \
                " give initial states inside the observables' domain"
            raise InputError(f"x0: {bad} constrain the proxy, but {why} or constrain_x0=False")
    out = []
    for d in experiments:
        y = np.array(d.y, dtype=float)
        for c, s in enumerate(d.states):
            if s in fns:
                ok = d.mask[:, c]
                y[:, c] = np.where(ok, fns[s].z(np.where(ok, y[:, c], fns[s].x(0.0))), np.nan)
        zd = Data(d.t, y, d.states, t0=d.t0, name=d.name, replicates=d.replicates)
        pr = smoother.fit(zd, states=model.states, x0=x0_scaled)
        fits = tuple(MappedSplineFit(f, fns[s]) if s in fns else f for s, f in zip(pr.states, pr.fits))
        out.append(SplineProxy(pr.states, fits, pr.domain, pr.t0, pr.smoother))
    return out


def is_mapped_fit(fit) -> bool:
    """Whether a proxy's state fit is mapped from the noise scale (its coefficients give ``zeta(x)``)."""
    return isinstance(fit, MappedSplineFit)
