"""Wheel build hook: vendor the Jupyter widget manager (tools/vendor_widget_manager.py) that
offline notebook exports inline. When npm or its registry is unavailable the build warns and
goes on without it (installing must not depend on it): ``export_notebook_html`` then falls back
to nbconvert's CDN page with a warning, and ``offline=True`` says the bundle is missing."""

import importlib.util
import warnings
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def _tool():
    path = Path(__file__).resolve().parent / "tools" / "vendor_widget_manager.py"
    spec = importlib.util.spec_from_file_location("vendor_widget_manager", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class VendorWidgetManager(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        if self.target_name != "wheel":
            return
        tool = _tool()
        try:
            tool.vendor()
        except RuntimeError as err:
            warnings.warn(f"offline notebook exports unavailable until the widget manager is vendored "
                          f"(python tools/vendor_widget_manager.py): {err}")
