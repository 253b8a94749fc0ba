"""Old name of :mod:`odeinfer.solve.abi` (status codes and the info layout moved there with the
rest of the kernels' calling convention); kept only so that code written against it still
imports. Import from :mod:`odeinfer.solve.abi`."""

from odeinfer.solve.abi import DDE_INFO_SIZE, INFO_SIZE, Info, Status, status_message

__all__ = ["Status", "Info", "INFO_SIZE", "DDE_INFO_SIZE", "status_message"]
