"""Shared test settings: a per-session numba cache directory unless one is set."""

import os
import tempfile

# Keep generated modules and numba machine code out of the user's cache, but share them
# across the whole test run (and across runs in CI, where the variable can be set).
os.environ.setdefault("ODEINFER_CACHE_DIR", os.path.join(tempfile.gettempdir(), "odeinfer-test-cache"))
