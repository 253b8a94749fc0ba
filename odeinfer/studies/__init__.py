"""Monte Carlo replication studies: does an estimator recover the truth, are its
standard errors honest, do its intervals cover?

See :func:`monte_carlo` and :class:`StudyResult`. The coverage panel of every estimator's intervals
(:mod:`odeinfer.studies.coverage`) runs with ``python -m odeinfer.studies coverage``.

Scaling out
-----------
``monte_carlo(..., n_jobs=k)`` runs on ``k`` local processes;
``monte_carlo(..., client=client)`` runs on a Dask cluster (``pip install
'odeinfer[dask]'``). Both give the same rows, bit for bit, as a serial run with
the same ``rng``, because replication ``i`` always uses the ``i``-th child of the
root seed. To use a real cluster:

1. Give the scheduler and every worker the same Python environment as the
   client: the same odeinfer, numpy and numba versions (a different odeinfer
   raises; a different numpy, numba or Python warns that results may differ),
   and the module that defines ``simulate_fn`` and the estimators, unless they
   are defined in the notebook or script itself (then Dask sends them by value).
2. Start ``dask scheduler`` on one node and ``dask worker tcp://scheduler:8786
   --nthreads 1 --nworkers N`` on the others (one thread per process: the numba
   kernels hold the GIL).
3. Decide where compiled kernels live. Each worker process imports a model's
   generated module from ``$ODEINFER_CACHE_DIR`` (else ``~/.cache/odeinfer``)
   and reuses it for all its replications. Export ``ODEINFER_CACHE_DIR`` in the
   workers' environment (e.g. ``ODEINFER_CACHE_DIR=/shared/odeinfer-cache dask
   worker ...``) to a directory on shared storage so a model compiles once for the
   cluster, or keep per-node caches and pay one compile per model per node
   (about 10-20 s). A ``LocalCluster`` inherits the client's environment.
4. Connect and run::

       from dask.distributed import Client
       from odeinfer.studies import monte_carlo
       client = Client("tcp://scheduler:8786")
       res = monte_carlo(simulate, {"nls": fit}, 2000, rng=2024, client=client)

Replications are sent in chunks (``chunk_size``, default about four per worker
thread), so fast replications do not drown in scheduling overhead.
"""

from .montecarlo import EstimatorLike, ResultLike, monte_carlo
from .cache import cached_frame, code_key
from .result import StudyResult
from .tally import Replicates, replicates

__all__ = ["monte_carlo", "StudyResult", "EstimatorLike", "ResultLike", "cached_frame", "code_key",
           "replicates", "Replicates"]
