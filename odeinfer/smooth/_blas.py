"""One-thread BLAS for the many small matrix products of the smoothers and matching estimators."""

from __future__ import annotations

__all__ = ["single_threaded_blas"]

_CONTROLLER = None


def single_threaded_blas():
    """Context manager limiting BLAS to one thread (threadpoolctl; controller built once).

    The matching estimators make many small BLAS calls (matrices of tens of rows); with a
    multithreaded BLAS on a shared machine each call pays thread wake-ups and the fit runs
    tens of times slower (2.7 s instead of 70 ms on alpha-pinene, 2 shared cores).
    """
    global _CONTROLLER
    if _CONTROLLER is None:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER.limit(limits=1, user_api="blas")
