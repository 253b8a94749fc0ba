"""Monte Carlo replication studies: does an estimator recover the truth, are its
standard errors honest, do its intervals cover?

See :func:`monte_carlo` and :class:`StudyResult`.
"""

from .montecarlo import EstimatorLike, ResultLike, monte_carlo
from .result import StudyResult

__all__ = ["monte_carlo", "StudyResult", "EstimatorLike", "ResultLike"]
