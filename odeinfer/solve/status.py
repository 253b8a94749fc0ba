"""The kernels' calling convention on the Python side: status codes (:class:`Status`, with
messages) and the layout of the ``info`` vector every solver kernel fills (:class:`Info`).

The kernels (``odeinfer/solve/kernels/common.py``: ``ST_*``, ``INFO_*``; ``dde.py``:
``DDE_INFO_*``) cannot import this module, so the values are written twice; a test checks that
every generated module agrees with :class:`Status` and :class:`Info`. Python code reads
``info`` and compares statuses through these names only.
"""

from __future__ import annotations

import enum

__all__ = ["Status", "Info", "INFO_SIZE", "DDE_INFO_SIZE", "status_message"]


class Status(enum.IntEnum):
    """Outcome of a solve. ``SUCCESS`` is 0; every other value is a failure."""

    SUCCESS = 0
    MAX_STEPS = 1
    STEP_TOO_SMALL = 2
    STIFF = 3
    NON_FINITE = 4
    SINGULAR = 5
    BAD_INPUT = 6


class Info(enum.IntEnum):
    """Entries of the float64 ``info`` vector a solver kernel fills."""

    T_REACHED = 0  # time of the last accepted step (t0 if none)
    N_STEPS = 1  # attempted steps (accepted + rejected)
    N_REJECTED = 2  # rejected steps (error test or non-finite stages)
    N_RHS = 3  # evaluations of the (augmented) right-hand side
    H_NEXT = 4  # step size proposed for the next step
    N_LU = 5  # LU decompositions (Rosenbrock only)
    N_STORED = 6  # delay solver: rows of the dense-output store used
    BUF_FULL = 7  # delay solver: 1.0 when the dense-output store ran out


#: Length of ``info`` for the ODE kernels and for the delay solver.
INFO_SIZE, DDE_INFO_SIZE = 6, 8


_MESSAGES = {
    Status.SUCCESS: "the solver reached the last output time",
    Status.MAX_STEPS: (
        "the solver took max_steps={max_steps} steps and stopped at t={t_reached:.6g}; "
        "raise max_steps, loosen rtol/atol, or, if the problem is stiff, use solver=oi.Rodas() (or "
        "solver=oi.Auto(), which switches to it when Dormand-Prince finds the problem stiff)"
    ),
    Status.STEP_TOO_SMALL: (
        "the step size fell below the rounding unit of t at t={t_reached:.6g}: the solution "
        "probably blows up in finite time near there (check the model and the parameter values)"
    ),
    Status.STIFF: (
        "the problem became stiff at t={t_reached:.6g} (Hairer's test in dopri5 fired 15 "
        "times); use solver=oi.Rodas() (or solver=oi.Auto(), which switches to it when Dormand-Prince "
        "finds the problem stiff)"
    ),
    Status.NON_FINITE: (
        "the solution or its derivative became inf or NaN at t={t_reached:.6g} and shorter "
        "steps did not help: check the model, the parameters and the initial state for "
        "overflow or invalid operations (log of a negative number, division by zero)"
    ),
    Status.SINGULAR: (
        "the Rosenbrock matrix I/(h*gamma) - df/dy stayed singular at t={t_reached:.6g} "
        "after five step halvings: check df/dy for inf/NaN"
    ),
    Status.BAD_INPUT: (
        "the solver kernel rejected its arguments (sizes, or times not sorted, finite "
        "and >= t0)"
    ),
}


def status_message(status: int, *, t_reached: float = float("nan"), max_steps: int = 0) -> str:
    """Human-readable explanation of a status code, with the advice to fix it.

    Parameters
    ----------
    status : int
        A code returned by a solver kernel.
    t_reached : float, optional
        Time of the last accepted step.
    max_steps : int, optional
        The step limit in force (quoted for ``MAX_STEPS``).
    """
    try:
        code = Status(int(status))
    except ValueError:
        return f"unknown solver status {status!r}"
    return _MESSAGES[code].format(t_reached=t_reached, max_steps=max_steps)
