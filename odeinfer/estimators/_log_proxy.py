"""Spline proxies on the model's noise scale, shared by the matching estimators.

With ``noise="additive"`` the proxy of a state is the regression spline of ``y`` itself. With
``noise="log"`` (``log y = log x + e``) the spline ``s(t) = sum_m c_m B_m(t)`` is fitted to ``log y``
(GCV, coefficient covariance and residual sd on the log scale, where the noise is homoscedastic)
and the proxy is ``x_hat = exp(s)``, positive by construction. The estimators only need the proxy,
its derivative and, for the delta-method covariance, the derivatives of both with respect to the
coefficients; for the log proxy these are the linearisations

    d x_hat / d c_m = x_hat B_m,    d x_hat' / d c_m = x_hat (s' B_m + B_m'),

so :meth:`LogSplineFit.basis` returns them in place of the B-splines, and the coefficient
covariance stays that of the log-scale fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from odeinfer.data import Data
from odeinfer.errors import InputError
from odeinfer.smooth import SplineSmoother
from odeinfer.smooth.splines import SplineFit, SplineProxy

__all__ = ["LogSplineFit", "fit_proxies"]


@dataclass(frozen=True, eq=False)
class LogSplineFit:
    """The proxy ``exp(s(t))`` of one state, ``s`` the regression spline of ``log y``.

    Attributes
    ----------
    log : SplineFit
        The spline of the log observations; ``coef``, ``cov``, ``sigma``, ``gcv``, ``knots`` are its
        own (log scale).
    """

    log: SplineFit

    state = property(lambda self: self.log.state)
    knots = property(lambda self: self.log.knots)
    degree = property(lambda self: self.log.degree)
    coef = property(lambda self: self.log.coef)
    cov = property(lambda self: self.log.cov)
    sigma = property(lambda self: self.log.sigma, doc="Residual sd of the log-scale fit (the model's noise scale).")
    gcv = property(lambda self: self.log.gcv)
    n_basis = property(lambda self: self.log.n_basis)
    n_basis_gcv = property(lambda self: self.log.n_basis_gcv)
    nobs = property(lambda self: self.log.nobs)
    t = property(lambda self: self.log.t)
    residuals = property(lambda self: self.log.residuals, doc="Residuals of the log-scale fit.")

    def __call__(self, t, nu=0):
        """``x_hat = exp(s)`` (``nu=0``) or ``x_hat' = exp(s) s'`` (``nu=1``) at ``t``, shape (len(t),)."""
        x = np.exp(self.log(t))
        if nu == 0:
            return x
        if nu == 1:
            return x * self.log(t, 1)
        raise InputError(f"nu: the log-scale proxy has derivatives of order 0 and 1, got {nu!r}")

    def basis(self, t, nu=0):
        """``d x_hat / d c`` (``nu=0``) or ``d x_hat' / d c`` (``nu=1``) at ``t``, shape (len(t), K)."""
        B = self.log.basis(t)
        x = np.exp(B @ self.log.coef)
        if nu == 0:
            return x[:, None] * B
        if nu == 1:
            dB = self.log.basis(t, 1)
            return x[:, None] * ((dB @ self.log.coef)[:, None] * B + dB)
        raise InputError(f"nu: the log-scale proxy has derivatives of order 0 and 1, got {nu!r}")


def fit_proxies(smoother: SplineSmoother, model, experiments, x0=None) -> list:
    """One proxy per experiment, on the model's noise scale (see the module notes).

    Parameters
    ----------
    smoother : SplineSmoother
    model : Model
        ``model.observation.noise`` chooses the scale (``"log"``: for the states in
        ``model.observed``; the others stay additive); every state is fitted.
    experiments : sequence of Data
        Positive observations for log noise (checked by :func:`~odeinfer.estimators.base.prepare`).
    x0 : dict, optional
        ``{state: value}`` constraint ``x(t0) = x0`` (``log x0`` for log noise: positive values).
    """
    if model.observation.noise != "log":
        return [smoother.fit(d, states=model.states, x0=x0) for d in experiments]
    logged = set(model.observed)  # the noise model covers the observed states only
    bad = {s: v for s, v in (x0 or {}).items() if s in logged and not v > 0}
    if bad:
        raise InputError(f"x0: {bad} constrain the proxy, but the model's noise is 'log' and the proxy is fitted to "
                         "log y; give positive initial states or constrain_x0=False")
    x0_scaled = None if x0 is None else {s: (float(np.log(v)) if s in logged else v) for s, v in x0.items()}
    out = []
    for d in experiments:
        y = np.array(d.y, dtype=float)
        for c, s in enumerate(d.states):
            if s in logged:
                ok = d.mask[:, c]
                y[:, c] = np.where(ok, np.log(np.where(ok, y[:, c], 1.0)), np.nan)
        logd = Data(d.t, y, d.states, t0=d.t0, name=d.name, replicates=d.replicates)
        pr = smoother.fit(logd, states=model.states, x0=x0_scaled)
        fits = tuple(LogSplineFit(f) if s in logged else f for s, f in zip(pr.states, pr.fits))
        out.append(SplineProxy(pr.states, fits, pr.domain, pr.t0, pr.smoother))
    return out


def is_log_fit(fit) -> bool:
    """Whether a proxy's state fit is on the log scale (its coefficients give ``log x``)."""
    return isinstance(fit, LogSplineFit)
