"""The one result type of a solve, for ODE and delay models alike: :class:`Solution`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from odeinfer.errors import InputError
from odeinfer.solve.abi import Status

__all__ = ["Solution", "solution_frame"]


@dataclass(frozen=True, eq=False)
class Solution:
    """The result of :func:`odeinfer.solve`. Immutable; its arrays are read-only.

    Attributes
    ----------
    t : ndarray, shape (n_times,)
        Output times.
    y : ndarray, shape (n_times, n_states)
        States at ``t`` (NaN after a failure).
    sens : ndarray, shape (n_times, n_states, n_sens), or None
        ``sens[i, :, j] = d y(t_i) / d theta_j`` (see :attr:`sens_names`): the parameters (in
        ``params`` order), then the initial states (ODE) or the history parameters (delay
        model). None unless solved with ``gradient=oi.Forward()``.
    status : int
        A :class:`~odeinfer.solve.Status` code; 0 is success.
    message : str
        What happened, and how to fix a failure.
    t_reached : float
        Time of the last accepted step (the last output time on success).
    n_steps, n_rejected, n_rhs : int
        Attempted steps, rejected steps, right-hand side evaluations.
    method : str
        ``"dopri5"``, ``"rodas"`` or ``"dde-dopri5"``.
    states, params : tuple of str
        Names of the model's states and parameters.
    t0 : float
        Initial time (for a delay model: the end of the history window).
    history : History or None
        A delay model's history (with the parameter values used); None for an ODE.
    history_params : tuple of str
        Names of the history family's parameters (``"<group>[<state>]"``); empty for an ODE.
    """

    t: np.ndarray
    y: np.ndarray
    sens: np.ndarray | None
    status: int
    message: str
    t_reached: float
    n_steps: int
    n_rejected: int
    n_rhs: int
    method: str
    states: tuple[str, ...]
    params: tuple[str, ...]
    t0: float
    history: object = None
    history_params: tuple[str, ...] = ()

    def __post_init__(self):
        for arr in (self.t, self.y, self.sens):
            if arr is not None:
                arr.setflags(write=False)

    @classmethod
    def _of(cls, t, y, sens, status, message, t_reached, n_steps, n_rejected, n_rhs, method, states, params, t0,
            history=None, history_params=()):
        """The Solution of these values, as ``Solution(...)`` makes it but cheaper (the one-shot
        :func:`odeinfer.solve` path): the fields are stored in one step rather than by a frozen
        dataclass's one ``object.__setattr__`` per field. ``t``, ``y`` and ``sens`` become read-only."""
        t.setflags(write=False)
        y.setflags(write=False)
        if sens is not None:
            sens.setflags(write=False)
        sol = object.__new__(cls)
        sol.__dict__.update(t=t, y=y, sens=sens, status=status, message=message, t_reached=t_reached,
                            n_steps=n_steps, n_rejected=n_rejected, n_rhs=n_rhs, method=method, states=states,
                            params=params, t0=t0, history=history, history_params=history_params)
        return sol

    @property
    def success(self) -> bool:
        """True when the solver reached the last output time."""
        return self.status == Status.SUCCESS

    @property
    def sens_names(self) -> tuple[str, ...]:
        """Names of the sensitivity columns: the parameters, then ``"<state>(t0)"`` (ODE) or the
        history parameters (delay model)."""
        if self.history is not None:
            return self.params + self.history_params
        return self.params + tuple(f"{s}(t0)" for s in self.states)

    def to_frame(self, sens: bool = False):
        """The solution as a pandas DataFrame indexed by ``t``.

        Parameters
        ----------
        sens : bool, default False
            Also add one column ``"d<state>/d<name>"`` per sensitivity (requires a solution
            computed with ``gradient=oi.Forward()``).
        """
        return solution_frame(self, sens)

    def __repr__(self):
        sens = "None" if self.sens is None else f"shape {self.sens.shape}"
        hist = "" if self.history is None else f", history={self.history!r}"
        return (f"Solution(method={self.method!r}, status={Status(self.status).name}, "
                f"t=[{self.t[0]:g} .. {self.t[-1]:g}] ({self.t.size} times), states={list(self.states)}{hist}, "
                f"sens={sens}, n_steps={self.n_steps}, n_rejected={self.n_rejected}, t_reached={self.t_reached:g})")


def solution_frame(sol, sens=False):
    """``sol`` as a DataFrame indexed by ``t``; ``sens=True`` adds one column
    ``"d<state>/d<name>"`` per sensitivity."""
    import pandas as pd

    df = pd.DataFrame(np.array(sol.y), index=pd.Index(np.array(sol.t), name="t"), columns=list(sol.states))
    if sens:
        if sol.sens is None:
            raise InputError("to_frame(sens=True): this solution has no sensitivities; solve with "
                             "gradient=oi.Forward()")
        for i, s in enumerate(sol.states):
            for j, name in enumerate(sol.sens_names):
                df[f"d{s}/d{name}"] = sol.sens[:, i, j]
    return df
