"""tools/vendor_widget_manager.py: the pinned bundle is written only when its SHA-256 matches
(npm is replaced by a fake that writes a tarball)."""

import hashlib
import importlib.util
import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent.parent / "tools" / "vendor_widget_manager.py"


@pytest.fixture
def tool():
    spec = importlib.util.spec_from_file_location("vendor_widget_manager", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_npm(monkeypatch, tool, bundle: bytes):
    def run(cmd, cwd, **kwargs):
        assert cmd[1:3] == ["pack", f"{tool.PACKAGE}@{tool.VERSION}"]
        files = {"package/dist/embed.js": bundle, "package/dist/embed.js.LICENSE.txt": b"notices",
                 "package/package.json": json.dumps({"license": "BSD-3-Clause"}).encode()}
        with tarfile.open(Path(cwd) / "pkg.tgz", "w:gz") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return subprocess.CompletedProcess(cmd, 0, "pkg.tgz\n", "")

    monkeypatch.setattr(tool.shutil, "which", lambda name: "/fake/npm")
    monkeypatch.setattr(tool.subprocess, "run", run)


def test_a_bundle_with_another_hash_is_refused(tool, tmp_path, monkeypatch):
    _fake_npm(monkeypatch, tool, b"console.log('tampered')")
    with pytest.raises(RuntimeError, match="has SHA-256 .* expected .*refusing to vendor it"):
        tool.vendor(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_pinned_bundle_is_written_with_its_notices(tool, tmp_path, monkeypatch):
    bundle = b"var pinned = 1;"
    monkeypatch.setattr(tool, "SHA256", hashlib.sha256(bundle).hexdigest())
    _fake_npm(monkeypatch, tool, bundle)
    out = tool.vendor(tmp_path)
    assert out.read_bytes() == bundle and tool.present(tmp_path)
    notices = (tmp_path / tool.LICENSES).read_text()
    assert "BSD-3-Clause" in notices and notices.endswith("notices")


def test_without_npm_the_error_says_how_to_fix_it(tool, tmp_path, monkeypatch):
    monkeypatch.setattr(tool.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="npm not found: install Node.js/npm"):
        tool.vendor(tmp_path)
