"""Results of estimators: :class:`Estimate`."""

from odeinfer.results.estimate import STATUSES, Estimate

__all__ = ["Estimate", "STATUSES"]
