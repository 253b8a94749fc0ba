"""Input handling of :class:`~odeinfer.estimators.adjoint_dde.AdjointDDE`: the history family,
start values, fixed values and bounds of the unknowns ``(free params incl. delays, free history
params)``, and the weighted residuals at the observation times with their exact Jacobian from
the forward sensitivities of the DDE solver (:func:`odeinfer.bind` with ``gradient=oi.Forward()``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from odeinfer.data import Data, as_experiments
from odeinfer.errors import DataError, InputError
from odeinfer.estimators.base import EstimationError, finite_values, prepare
from odeinfer.model import History, Model
from odeinfer.results import Estimate

__all__ = ["DDESetup", "build_setup"]


def _as_dict(argument, values, names):
    """name -> float from a mapping, an Estimate, or a sequence in ``names`` order (finite: :func:`finite_values`)."""
    return finite_values(argument, _as_dict_raw(argument, values, names))


def _as_dict_raw(argument, values, names):
    if values is None:
        return {}
    if isinstance(values, Estimate):
        return {n: float(v) for n, v in zip(values.names, values.values)}
    if isinstance(values, Mapping):
        out = {}
        for k, v in values.items():
            try:
                out[str(k)] = float(v)
            except (TypeError, ValueError):
                raise InputError(f"{argument}[{k!r}]: expected a number, got {v!r}") from None
        return out
    try:
        arr = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError):
        raise InputError(f"{argument}: expected a dict {{name: value}}, got {type(values).__name__}") from None
    if arr.size != len(names):
        raise InputError(f"{argument}: expected {len(names)} values (for {list(names)}), got {arr.size}; "
                         "or pass a dict {name: value}")
    return dict(zip(names, arr.tolist()))


def _history(history, model, data):
    """(History, estimable: bool). None -> constant family started at the first observations."""
    from odeinfer.solve.dde import as_history

    if history is None:
        first = np.full(model.n_states, np.nan)
        for k, s in enumerate(data.states):
            col = data.y[:, k]
            ok = np.flatnonzero(np.isfinite(col))
            if ok.size and ok[0] == 0:
                first[model.states.index(s)] = col[0]
        if not np.all(np.isfinite(first)):
            missing = [s for s, v in zip(model.states, first) if not math.isfinite(v)]
            raise InputError(f"history: not given, and the default (a constant history started at the first "
                             f"observation) needs every state observed at the first time; {missing} are not. "
                             "Pass history=oi.History.constant/affine/periodic(...) or a known history")
        return History.constant(first), True
    if isinstance(history, History):
        return history, history.kind != "piecewise"
    return as_history(history, model), False


class DDESetup:
    """Validated unknowns and the residual evaluator of one AdjointDDE fit.

    ``u`` = the free model parameters (model order, delays included), then the free history
    parameters (history order). ``evaluate(u) -> (r (N,), J (N, k))`` or None (solver failure).
    """

    def __init__(self, est, model, data, history, start, fixed, t0):
        if not isinstance(model, Model):
            raise TypeError(f"model: expected an odeinfer Model (from @oi.model), got {type(model).__name__}")
        if not model.delays:
            raise EstimationError(
                f"AdjointDDE fits delay differential equations, but model {model.name!r} has no delays; fit an "
                "ODE with oi.Embedding (trajectory least squares) or declare the delays with "
                "@oi.model(..., delays=['tau']) and om.lag(y.x, 'tau')")
        if not isinstance(data, Data):
            exps = as_experiments(data) if data is not None and not isinstance(data, (str, bytes)) else None
            if exps is None:
                raise DataError(f"data: expected oi.Data, got {type(data).__name__}")
            if len(exps) != 1:
                raise InputError(f"data: AdjointDDE fits one experiment, got {len(exps)}; fit them one at a time")
            data = exps[0]
        hist, estimable = _history(history, model, data)
        if hist.n_states != model.n_states:
            raise InputError(f"history: has {hist.n_states} state(s), model {model.name!r} has {model.n_states}")
        hnames = hist.param_names(model.states) if estimable else ()
        pnames = tuple(model.params)
        fixed_all = _as_dict("fixed", fixed, pnames)
        all_h = hist.param_names(model.states) if hist.kind != "piecewise" else ()
        self._check_history_names("fixed", fixed_all, pnames, hnames, all_h)
        fixed_p = {k: v for k, v in fixed_all.items() if k in pnames}
        fixed_h = {k: v for k, v in fixed_all.items() if k in hnames}
        free_h = tuple(n for n in hnames if n not in fixed_h)
        problem = prepare(model, data, fixed=fixed_p or None, estimator="AdjointDDE")
        free_p = problem.free
        names = tuple(free_p) + free_h
        # start: by name (mapping, Estimate) or a sequence in ``names`` order
        start_all = _as_dict("start", start, names)
        if isinstance(start, Estimate):
            start_all = {k: v for k, v in start_all.items() if k in pnames or k in all_h}
        self._check_history_names("start", start_all, pnames, hnames, all_h)
        clash = [k for k in start_all if k not in names]
        if clash and not isinstance(start, Estimate):
            raise InputError(f"start: {clash} are held fixed (fixed=...); give a value in fixed= only")
        start_all = {k: v for k, v in start_all.items() if k in names}
        self.model, self.problem, self.data = model, problem, data
        self.compiled = problem.compiled
        self.names, self.free_p, self.free_h = names, free_p, free_h
        self.n_free_p, self.k = len(free_p), len(names)
        self.free_p_index = np.array([pnames.index(n) for n in free_p], dtype=np.int64)
        self.free_h_index = np.array([hnames.index(n) for n in free_h], dtype=np.int64)
        self.history = hist
        self.history_names = hnames
        self.fixed = dict(fixed_p) | dict(fixed_h)
        # --- times ------------------------------------------------------------------------------
        t0 = data.t0 if t0 is None else float(t0)
        if not math.isfinite(t0):
            raise InputError(f"t0: expected a finite number, got {t0!r}")
        if float(data.t[0]) < t0 - 1e-12 * max(1.0, abs(t0)):
            raise DataError(
                f"data: the first observation is at t = {float(data.t[0]):g}, before the end of the history window "
                f"t0 = {t0:g}; on [t0 - tau, t0] the states are given by the history, not the solver. Drop the "
                f"observations before t0 (or use them to build the history, History.from_data) or pass t0 <= "
                f"{float(data.t[0]):g}")
        self.t0 = t0
        self.t_end = float(data.t[-1])
        span = self.t_end - t0
        if not span > 0:
            raise DataError(f"data: need observations after t0 = {t0:g}; the last is at {self.t_end:g}")
        # --- values, bounds -----------------------------------------------------------------------
        delays = set(model.delays)
        for name in model.delays:
            if name in fixed_p and not fixed_p[name] > 0:
                raise InputError(f"fixed: the delay {name!r} must be > 0, got {fixed_p[name]!r}")
        window = hist.window()
        tau_cap = span if window is None else min(span, t0 - window[0])
        if window is not None and window[1] < t0 - 1e-9 * max(1.0, abs(t0)):
            raise DataError(f"history: the data-driven history ends at {window[1]:g}, before t0 = {t0:g}")
        if not tau_cap > 0:
            raise DataError(f"history: the data-driven history covers [{window[0]:g}, {window[1]:g}], which leaves "
                            f"no room for a delay before t0 = {t0:g}")
        lo = np.full(self.k, -np.inf)
        hi = np.full(self.k, np.inf)
        self.delay_cols = np.array([i for i, n in enumerate(names) if n in delays], dtype=np.int64)
        for i in self.delay_cols:
            lo[i], hi[i] = min(1e-3 * span, 0.5 * tau_cap), tau_cap
        for name, a, b in est.bounds or ():
            if name not in names:
                why = "fixed" if name in self.fixed else "not a parameter or history parameter of this fit"
                raise InputError(f"bounds[{name!r}]: {name!r} is {why}; free quantities: {list(names)}")
            i = names.index(name)
            if name in delays and not a > 0:
                raise InputError(f"bounds[{name!r}]: the lower bound of a delay must be > 0 (delays stay positive "
                                 f"while fitting), got ({a:g}, {b:g})")
            if name in delays and window is not None and b > tau_cap + 1e-12:
                raise InputError(f"bounds[{name!r}]: upper bound {b:g} exceeds {tau_cap:g}, the longest delay the "
                                 f"data-driven history window [{window[0]:g}, {window[1]:g}] covers")
            lo[i], hi[i] = a, b
        self.lo, self.hi = lo, hi
        u0 = np.full(self.k, np.nan)
        for i, n in enumerate(names):
            if n in start_all:
                u0[i] = start_all[n]
            elif n in hnames:
                u0[i] = hist.values[hnames.index(n)]
        for i in self.delay_cols:
            if math.isfinite(u0[i]) and not u0[i] > 0:
                raise InputError(f"start: the delay {names[i]!r} must start > 0, got {float(u0[i])!r}; "
                                 "delays are positive")
        for i, n in enumerate(names):
            if math.isfinite(u0[i]) and not (lo[i] <= u0[i] <= hi[i]):
                raise InputError(f"start[{n!r}] = {u0[i]:g} is outside its bounds [{lo[i]:g}, {hi[i]:g}]; move "
                                 "the start or widen bounds=")
        self.u0 = u0
        p_base = np.full(model.n_params, np.nan)
        for n, v in fixed_p.items():
            p_base[pnames.index(n)] = v
        self.p_base = p_base
        phi_base = np.array(hist.values, dtype=float)
        for n, v in fixed_h.items():
            phi_base[hnames.index(n)] = v
        self.phi_base = phi_base
        # --- observations -------------------------------------------------------------------------
        self.noise = model.observation.noise
        t_uni = np.unique(np.asarray(data.t, float))
        ti, st, yv = [], [], []
        for k_, s in enumerate(data.states):
            rows = np.flatnonzero(data.mask[:, k_])
            ti.append(np.searchsorted(t_uni, data.t[rows]))
            st.append(np.full(rows.size, model.states.index(s)))
            yv.append(data.y[rows, k_])
        self.row_t = np.concatenate(ti)
        self.row_state = np.concatenate(st)
        y_obs = np.concatenate(yv)
        if self.noise == "log":  # positive: checked by prepare (check_log_noise_data)
            y_obs = np.log(y_obs)
        self.y_obs = y_obs
        self.n_obs = self.y_obs.size
        if self.n_obs <= self.k:
            raise DataError(f"data: {self.n_obs} observations for {self.k} unknowns; need more observations")
        self.t_obs = t_uni
        self.observed_states = tuple(s for s in model.states if s in set(data.states))
        self.solver_value = est.solver
        self.sigma_state = np.ones(model.n_states)
        self._problem = None
        self.live = None  # unknowns the LM may move (None: all); set by the default mode's search

    @staticmethod
    def _check_history_names(argument, values, pnames, hnames, all_h):
        for k in values:
            if k in pnames or k in hnames:
                continue
            if k in all_h or ("[" in k and k.endswith("]")):
                raise InputError(
                    f"{argument}: {k!r} looks like a history parameter, but the history has no estimable "
                    "parameters (plain numbers or a data-driven History); history parameters need a history "
                    "family: pass history=oi.History.constant(...), .affine(...) or .periodic(...)")
            raise InputError(f"{argument}: {k!r} is not a parameter of the model {list(pnames)} or of the "
                             f"history {list(hnames)}")

    # --- solving --------------------------------------------------------------------------------
    def solver(self, value=None):
        """The prebuilt solver with sensitivities at the observation times: ``value`` (a
        ``MethodOfSteps``), default the estimator's. Each value's solver is built once."""
        from odeinfer.solve import Forward, Problem, bind

        if self._problem is None:
            self._problem = Problem(self.compiled, self.t_obs, history=self.history, t0=self.t0)
        return bind(self._problem, solver=self.solver_value if value is None else value, gradient=Forward())

    def split(self, u):
        """Full ``(params (n_params,), history params (q,))`` from the unknowns."""
        p = self.p_base.copy()
        p[self.free_p_index] = u[:self.n_free_p]
        phi = self.phi_base.copy()
        phi[self.free_h_index] = u[self.n_free_p:]
        return p, phi

    def set_sigma(self, sig_state):
        self.sigma_state = np.asarray(sig_state, float)

    def cols(self):
        m = self.model.n_params
        return np.concatenate([self.free_p_index, m + self.free_h_index]).astype(np.int64)

    def raw(self, u, solver=None):
        """Unweighted ``(r (N,), J (N, k))`` (model minus data; log scale for log noise) or None."""
        solver = self.solver() if solver is None else solver
        p, phi = self.split(u)
        y, sens, status = solver(p, phi)
        if status != 0:
            return None
        x = y[self.row_t, self.row_state]
        S = sens[self.row_t, self.row_state][:, self.cols()]
        if self.noise == "log":
            if np.any(x <= 0):
                return None
            return np.log(x) - self.y_obs, S / x[:, None]
        return x - self.y_obs, S

    def evaluate(self, u, solver=None):
        out = self.raw(u, solver)
        if out is None:
            return None
        w = 1.0 / self.sigma_state[self.row_state]
        return out[0] * w, out[1] * w[:, None]


def build_setup(est, model, data, history, start, fixed, t0) -> DDESetup:
    return DDESetup(est, model, data, history, start, fixed, t0)


def fixed_for_estimate(S):
    return replace(S.problem, fixed=dict(S.fixed))
