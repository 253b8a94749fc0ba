"""Vendor the Jupyter widget manager that offline notebook exports inline.

``odeinfer.report.export_notebook_html(..., offline=True)`` draws the notebook's widgets with
``@jupyter-widgets/html-manager`` (its non-AMD bundle ``dist/embed.js``, which needs no
RequireJS). This script fetches that npm package with ``npm pack`` (npm checks the tarball's
integrity against the registry), checks the SHA-256 of the bundle against the pin below and
writes the bundle and its licence notices to ``odeinfer/report/vendor/`` (atomically). The
wheel build runs it (``hatch_build.py``) when the files are missing; a source checkout runs

    python tools/vendor_widget_manager.py

Standard library only (the build hook loads this file by path). Needs ``npm`` on PATH.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "@jupyter-widgets/html-manager"
#: html-manager 1.x renders the widget state of ipywidgets 8 (state version 2).
VERSION = "1.0.15"
SHA256 = "8f6d2d3f856d8595d1841dec3019d99bbe74d331f2a5178c2a33bfec729e3d6a"
VENDOR = Path(__file__).resolve().parent.parent / "odeinfer" / "report" / "vendor"
BUNDLE = "html-manager-embed.js"
LICENSES = "html-manager-embed.js.LICENSE.txt"


def present(vendor: Path = VENDOR) -> bool:
    """Whether the pinned bundle is already vendored."""
    f = vendor / BUNDLE
    return f.is_file() and hashlib.sha256(f.read_bytes()).hexdigest() == SHA256


def _write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def vendor(dest: Path = VENDOR) -> Path:
    """Fetch, check and write the bundle; returns its path. Raises RuntimeError with the fix."""
    if present(dest):
        return dest / BUNDLE
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm not found: install Node.js/npm (e.g. `apt-get install -y npm`) and run "
                           "`python tools/vendor_widget_manager.py` again")
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([npm, "pack", f"{PACKAGE}@{VERSION}", "--silent"], cwd=tmp,
                             capture_output=True, text=True, timeout=600)
        if out.returncode != 0:
            raise RuntimeError(f"npm pack {PACKAGE}@{VERSION} failed: {out.stderr.strip()[-500:]}")
        tgz = Path(tmp) / out.stdout.strip().splitlines()[-1]
        with tarfile.open(tgz, "r:gz") as tar:
            def member(name):
                fh = tar.extractfile(f"package/{name}")
                if fh is None:
                    raise RuntimeError(f"{PACKAGE}@{VERSION}: {name} missing from the npm tarball")
                return fh.read()

            bundle, notices, meta = member("dist/embed.js"), member("dist/embed.js.LICENSE.txt"), member("package.json")
    digest = hashlib.sha256(bundle).hexdigest()
    if digest != SHA256:
        raise RuntimeError(f"{PACKAGE}@{VERSION}: dist/embed.js has SHA-256 {digest}, expected {SHA256}; "
                           "refusing to vendor it (update the pin only after checking the new release)")
    licence = json.loads(meta).get("license", "see the package")
    header = (f"{PACKAGE} {VERSION} (npm), dist/embed.js, licence {licence} "
              "(Copyright (c) Project Jupyter Contributors).\nNotices of the code bundled in it:\n\n")
    _write(dest / LICENSES, header.encode() + notices)
    _write(dest / BUNDLE, bundle)
    return dest / BUNDLE


if __name__ == "__main__":
    try:
        print(vendor())
    except RuntimeError as err:
        sys.exit(f"vendor_widget_manager: {err}")
