"""What the headless-Chromium tests share: the browser binary, its flags, where screenshots go,
and the Lotka-Volterra fits the report tests draw.

Debian's ``chromium`` (``apt-get install -y chromium``, or ``$ODEINFER_CHROMIUM``); Playwright for
Python drives it (its bundled browsers are not used). Screenshots go to
``$ODEINFER_TEST_ARTIFACTS`` if set, else the test's tmp dir.
"""

import os
import shutil

CHROMIUM = os.environ.get("ODEINFER_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def artifacts(tmp_path):
    d = os.environ.get("ODEINFER_TEST_ARTIFACTS")
    if d:
        os.makedirs(d, exist_ok=True)
        return d
    return str(tmp_path)


def playwright():
    """Playwright's ``sync_playwright``, or None when it is not installed."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    return sync_playwright


def lv_fits():
    """Lotka-Volterra data (zoo, seed 1) and its OrthogonalConditions and GradientMatching fits."""
    import odeinfer as oi

    z = oi.zoo.get("lotka_volterra")
    data, _ = oi.simulate(z.model, z.params, z.x0, z.t, noise=z.sigma, rng=1, name="simulated")
    return z, data, oi.OrthogonalConditions().fit(z.model, data), oi.GradientMatching().fit(z.model, data)
