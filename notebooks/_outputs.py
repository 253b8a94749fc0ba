"""Execute the example notebooks and check that their stored outputs are current.

The notebooks are committed *executed* so that a reader sees plots and tables on a code-hosting
site. This module is the one place that runs them (``python notebooks/_build.py --execute`` and
``tests/test_notebooks.py`` both call :func:`execute`) and that decides whether the stored outputs
still belong to the stored sources (:func:`compare`, :func:`stale_outputs`).

Reproducible files: every notebook runs in a fresh ``python3`` kernel in a temporary working
directory, figures are PNG at :data:`FIGURE_DPI` dpi, and :func:`normalise` removes what changes
from run to run without changing the content: execution timestamps, the kernel's version
metadata, the random ids of widget models and of HTML elements (renumbered in order of
appearance), and ``stderr`` (warnings name the files and the process of the run that printed
them: paths of that machine; the cells that matter show ``fit.warnings`` themselves). What the cells print themselves (timings, an InferenceData's creation time) stays.

What "current" means (the rule :func:`compare` applies; a re-execution in the fast setting is
compared with the stored outputs, which come from the full setting):

1. The sources are those that were executed: the notebook's metadata holds the SHA-256 of its cell
   sources at execution time (:func:`source_digest`), and it must match the sources stored now.
2. Same cells, and per code cell the same sequence of outputs: consecutive ``stdout`` chunks are
   merged, ``stderr`` is ignored (warnings and progress differ between runs and settings), each
   display or result is compared by its set of MIME types (so the number of figures, widgets and
   HTML tables per cell is the same), each HTML table by its column names and number of rows
   (where the cell does not depend on the setting; the fast setting may print fewer rows).
3. Numbers are compared only where the fast setting computes the same thing: in the code cells
   that do not depend on the setting. A cell depends on it when it reads ``FAST``, a clock
   (``perf_counter``, ``time.time``), or a name that an earlier dependent statement bound or modified
   (found from the cells' syntax trees; see :func:`_depends_on_setting`), or when it is tagged
   ``varies`` (the builder's ``code(..., varies=True)``: timings measured inside odeinfer, values
   read back from a file written with the setting). In the other cells the
   HTML tables have the same number of rows, and the numbers printed in text (stdout,
   ``text/plain``) agree within :data:`RTOL` relative (:data:`ATOL` absolute), in the same count
   and order.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import re
import tempfile
import uuid
from html.parser import HTMLParser
from pathlib import Path

FAST_ENV = "ODEINFER_NOTEBOOK_FAST"
FIGURE_DPI = 80            # inline PNG figures: readable, 40-170 kB each as base64 text
CELL_TIMEOUT = 1800        # seconds per cell; the full setting's longest cell (a Monte Carlo study) is far below
RTOL, ATOL = 1e-3, 1e-6    # numbers as printed (rounded), across BLAS builds and optimiser round-off
VARIES = "varies"          # cell tag: printed numbers vary in a way the source does not show (timings inside odeinfer)
META_KEY = "odeinfer"      # notebook metadata: {"setting": "full" | "fast", "source_sha256": ...}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colour codes of IPython tracebacks
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|\bnan\b|\binf\b", re.IGNORECASE)
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")  # object addresses in reprs change every run
_CLOCK = re.compile(r"perf_counter|time\.time|\bmonotonic\(")


class NotebookCellError(AssertionError):
    """A notebook cell raised; the message names the notebook, the cell and the error."""


# ---- execution ----------------------------------------------------------------------------------
def execute(nb, workdir, *, name="notebook", fast=True, timeout=CELL_TIMEOUT):
    """Run ``nb`` (an nbformat notebook, modified in place and returned) in a fresh python3 kernel.

    ``workdir`` is the kernel's working directory (the reports a notebook writes land there);
    ``fast`` sets ``ODEINFER_NOTEBOOK_FAST=1`` for the kernel, otherwise the variable is removed
    (the full setting). Raises :class:`NotebookCellError` naming the failing code cell (1-based
    among code cells, and its index among all cells), its first source lines and the error.
    """
    import nbclient
    from nbclient.exceptions import CellExecutionError

    env = dict(os.environ)
    env.pop(FAST_ENV, None)
    if fast:
        env[FAST_ENV] = "1"
    # figures are PNG at FIGURE_DPI: `%matplotlib inline` applies InlineBackend.rc to rcParams, and
    # odeinfer.plots and pyplot both create figures at rcParams' dpi
    client = nbclient.NotebookClient(
        nb, timeout=timeout, kernel_name="python3", record_timing=False,
        resources={"metadata": {"path": os.fspath(workdir)}},
        extra_arguments=[f"--InlineBackend.rc={{'figure.dpi': {FIGURE_DPI}}}"])
    try:
        client.execute(env=env)
    except CellExecutionError as exc:
        index, cell = _failing_cell(nb)
        where = "an unknown cell" if cell is None else _describe(nb, index, cell)
        trace = _ANSI.sub("", str(exc))
        raise NotebookCellError(f"{name}: {where} failed with {exc.ename}: {exc.evalue}\n\n{trace}") from None
    return nb


def _failing_cell(nb):
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and any(o.get("output_type") == "error" for o in cell.get("outputs", ())):
            return i, cell
    return None, None


def _describe(nb, index, cell):
    number = sum(1 for c in nb.cells[: index + 1] if c.cell_type == "code")
    head = "\n    ".join(cell.source.splitlines()[:4])
    return f"code cell {number} (cell {index} of {len(nb.cells)}):\n    {head}\n"


def source_digest(nb) -> str:
    """SHA-256 of the cells' kinds and sources: what the stored outputs were computed from."""
    h = hashlib.sha256()
    for cell in nb.cells:
        h.update(json.dumps([cell.cell_type, cell.source]).encode("utf-8"))
    return h.hexdigest()


def normalise(nb, *, metadata, setting, name):
    """Make an executed notebook reproducible: kernel metadata replaced by ``metadata`` (the
    builder's) plus the setting and source digest, no per-cell execution records nor ``stderr``, widget model
    ids and random HTML element ids renumbered deterministically (from ``name`` and their order
    of appearance)."""
    widgets = nb.metadata.get("widgets")  # the widget state nbclient recorded, if any
    nb.metadata = json.loads(json.dumps(metadata))
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if "outputs" in cell:  # warnings name the files and process of the run that printed them
            cell.outputs = [o for o in cell.outputs if not (o.get("output_type") == "stream"
                                                            and o.get("name") == "stderr")]
    nb.metadata[META_KEY] = {"setting": setting, "source_sha256": source_digest(nb)}
    if widgets is not None:
        nb.metadata["widgets"] = widgets
    _renumber_html_ids(nb, name)
    return _renumber_widgets(nb, name)


_UUID4 = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def _renumber_html_ids(nb, name):
    """Random element ids in HTML outputs (xarray's and ArviZ's reprs draw a uuid4 per section) are
    renamed in order of appearance, consistently, so the toggles still work and a re-run is identical."""
    new = {}
    for cell in nb.cells:
        for out in cell.get("outputs", ()) if cell.cell_type == "code" else ():
            html = out.get("data", {}).get("text/html")
            if html is None:
                continue
            text = _text(html)
            for old in _UUID4.findall(text):
                new.setdefault(old, str(uuid.uuid5(uuid.NAMESPACE_URL, f"odeinfer-notebook/{name}/html/{len(new)}")))
            out["data"]["text/html"] = _UUID4.sub(lambda m: new[m.group(0)], text)


def executed_notebook(nb, *, metadata, name, fast, workdir=None):
    """:func:`execute` (in a temporary directory unless ``workdir`` is given) then :func:`normalise`."""
    if workdir is None:
        with tempfile.TemporaryDirectory() as tmp:
            execute(nb, tmp, name=name, fast=fast)
    else:
        execute(nb, workdir, name=name, fast=fast)
    return normalise(nb, metadata=metadata, setting="fast" if fast else "full", name=name)


def _renumber_widgets(nb, name):
    """Keep the widget models a displayed view reaches (nbclient records every live one) and rename
    them ``uuid5(name, i)`` in the order they are reached, so that a re-execution writes the same file."""
    views = [o["data"][WIDGET_VIEW]["model_id"] for c in nb.cells if c.cell_type == "code"
             for o in c.get("outputs", ()) if WIDGET_VIEW in o.get("data", {})]
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    order, queue = [], list(views)
    while queue:
        model = queue.pop(0)
        if model in order:
            continue
        order.append(model)
        if model in state:
            queue += re.findall(r"IPY_MODEL_([0-9a-f]{32})", json.dumps(state[model]["state"], sort_keys=True))
    if "widgets" in nb.metadata:
        nb.metadata["widgets"][WIDGET_STATE]["state"] = {m: state[m] for m in order if m in state}
    text = json.dumps(nb)
    for i, old in enumerate(order):
        text = text.replace(old, uuid.uuid5(uuid.NAMESPACE_URL, f"odeinfer-notebook/{name}/{i}").hex)
    import nbformat

    fresh = nbformat.from_dict(json.loads(text))
    nb.clear()
    nb.update(fresh)
    return nb


# ---- comparison ---------------------------------------------------------------------------------
class _Tables(HTMLParser):
    """Column names and row counts of the ``<table>`` elements of an HTML output."""

    def __init__(self):
        super().__init__()
        self.tables, self._stack, self._cell = [], [], None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._stack.append({"head": [], "rows": 0, "in_head": False, "row": []})
        elif self._stack:
            t = self._stack[-1]
            if tag == "thead":
                t["in_head"] = True
            elif tag == "tr" and not t["in_head"]:
                t["rows"] += 1
            elif tag in ("th", "td") and t["in_head"]:
                self._cell = []

    def handle_endtag(self, tag):
        if not self._stack:
            return
        t = self._stack[-1]
        if tag == "table":
            self._stack.pop()
            self.tables.append((tuple(t["head"]), t["rows"]))
        elif tag == "thead":
            t["in_head"] = False
        elif tag in ("th", "td") and self._cell is not None:
            t["head"].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def _tables(html):
    parser = _Tables()
    parser.feed(html)
    return parser.tables


def _text(value):
    return value if isinstance(value, str) else "".join(value)


def _items(cell):
    """The cell's outputs as comparable items: ("stdout", text) merged, stderr dropped,
    ("display"/"result", mime types, tables, text/plain), ("error", ename)."""
    items = []
    for out in cell.get("outputs", ()):
        kind = out.get("output_type")
        if kind == "stream":
            if out.get("name") != "stdout":
                continue
            if items and items[-1][0] == "stdout":
                items[-1] = ("stdout", items[-1][1] + _text(out.get("text", "")))
            else:
                items.append(("stdout", _text(out.get("text", ""))))
        elif kind in ("display_data", "execute_result"):
            data = out.get("data", {})
            html = _text(data.get("text/html", ""))
            items.append(("display" if kind == "display_data" else "result", tuple(sorted(data)),
                          tuple(_tables(html)) if html else (), _text(data.get("text/plain", ""))))
        elif kind == "error":
            items.append(("error", out.get("ename")))
    return items


def _names(node):
    """The base name of an assignment target or a method call's receiver (``a`` of ``a[k].b``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _depends_on_setting(sources):
    """Per code cell: may its printed numbers differ between the settings? A cell does when it
    has a statement that reads ``FAST``, a clock, or a name that an earlier such statement bound
    or modified (assigned, item- or attribute-assigned, or called a method on); imported modules
    are never tainted.
    Magic and shell lines (``%``, ``!``) are skipped; a cell that still does not parse (``est?``, say)
    counts as dependent."""
    tainted, modules, result = {"FAST"}, set(), []
    for source in sources:
        text = "\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(text)
        except SyntaxError:
            result.append(True)
            continue
        depends = False
        for statement in tree.body:  # statement by statement: `N_REP = 8 if FAST else 100` taints N_REP only
            loads, binds = set(), set()
            for node in ast.walk(statement):
                if isinstance(node, ast.Name):
                    (loads if isinstance(node.ctx, ast.Load) else binds).add(node.id)
                elif isinstance(node, (ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, ast.Load):
                    binds.add(_names(node))
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    binds.add(_names(node.func.value))
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    binds.add(node.name)
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    modules.update((a.asname or a.name).split(".")[0] for a in node.names)
            if _CLOCK.search(ast.unparse(statement)) or loads & tainted:
                depends = True
                tainted |= {n for n in binds if n and n not in modules}
        result.append(depends)
    return result


def _numbers(text):
    return [float(x) for x in _NUMBER.findall(_ADDRESS.sub(" ", text))]


def _close(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= ATOL + RTOL * max(abs(a), abs(b))


def compare(stored, executed, name="notebook"):
    """Differences between the stored outputs of ``stored`` and a fresh execution ``executed`` of
    the same sources (empty when the stored outputs are current), by the rule in the module
    docstring. Each difference is a sentence naming the notebook and the cell."""
    problems = stale_outputs(stored, name)
    if [c.cell_type for c in stored.cells] != [c.cell_type for c in executed.cells]:
        return problems + [f"{name}: the cells differ ({len(stored.cells)} stored, {len(executed.cells)} executed)"]
    code = [i for i, c in enumerate(stored.cells) if c.cell_type == "code"]
    depends = _depends_on_setting([stored.cells[i].source for i in code])
    for number, i in enumerate(code, start=1):
        where = f"{name}: code cell {number} (cell {i})"
        if stored.cells[i].source != executed.cells[i].source:
            problems.append(f"{where}: the sources differ")
            continue
        compare_numbers = not depends[number - 1] and VARIES not in stored.cells[i].metadata.get("tags", ())
        a, b = _items(stored.cells[i]), _items(executed.cells[i])
        kinds_a = [(x[0],) + ((x[1],) if x[0] in ("display", "result") else ()) for x in a]
        kinds_b = [(x[0],) + ((x[1],) if x[0] in ("display", "result") else ()) for x in b]
        if kinds_a != kinds_b:
            problems.append(f"{where}: outputs {kinds_a} stored, {kinds_b} on re-execution")
            continue
        for x, y in zip(a, b):
            if x[0] in ("display", "result"):
                cols_x = [t[0] for t in x[2]]
                cols_y = [t[0] for t in y[2]]
                if cols_x != cols_y:
                    problems.append(f"{where}: table columns {cols_x} stored, {cols_y} on re-execution")
                elif compare_numbers and x[2] != y[2]:
                    problems.append(f"{where}: table shapes {[t[1] for t in x[2]]} stored, "
                                    f"{[t[1] for t in y[2]]} on re-execution")
            if compare_numbers and x[0] != "error":
                nx, ny = _numbers(x[-1]), _numbers(y[-1])
                if len(nx) != len(ny) or not all(map(_close, nx, ny)):
                    bad = next((k for k, (u, v) in enumerate(zip(nx, ny)) if not _close(u, v)), None)
                    detail = (f"{len(nx)} numbers stored, {len(ny)} on re-execution" if bad is None
                              else f"number {bad + 1}: {nx[bad]!r} stored, {ny[bad]!r} on re-execution")
                    problems.append(f"{where}: printed numbers differ beyond rtol={RTOL} ({detail})")
    return problems


def stale_outputs(stored, name="notebook"):
    """Problems visible without executing: no outputs stored, or outputs from other sources."""
    meta = stored.metadata.get(META_KEY, {})
    if not meta:
        return [f"{name}: no stored outputs; run `python notebooks/_build.py --execute`"]
    if meta.get("source_sha256") != source_digest(stored):
        return [f"{name}: the stored outputs were computed from other sources; "
                "run `python notebooks/_build.py --execute`"]
    missing = [i for i, c in enumerate(stored.cells) if c.cell_type == "code" and c.get("execution_count") is None]
    if missing:
        return [f"{name}: cells {missing} were not executed; run `python notebooks/_build.py --execute`"]
    return []
