"""Page assembly for standalone HTML reports (no network; no scripts but the interactive viewer).

Everything here is pure formatting: :func:`esc` escapes every piece of user text,
and :func:`page` wraps rendered sections in one document with inline styles and a
Content-Security-Policy that forbids scripts and remote resources (files are written
by :func:`odeinfer._io.write_atomic`).
"""

from __future__ import annotations

import html

__all__ = ["esc", "page", "section", "table_html", "badge", "unavailable"]

# No script may run and nothing may be fetched: images are data: URIs, styles are inline.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

_CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:2em auto;max-width:1100px;
 padding:0 1em;color:#222;line-height:1.4}
h1{border-bottom:2px solid #345;padding-bottom:.2em}
h2{margin-top:1.8em;border-bottom:1px solid #bbb;color:#234}
h3{margin-bottom:.3em}
table{border-collapse:collapse;margin:.5em 0 1em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:right}
th{background:#eef2f6}
td:first-child,th:first-child{text-align:left}
pre,code{font-family:Menlo,Consolas,monospace;font-size:.92em}
pre.eq{background:#f6f8fa;padding:.6em;border-radius:4px;overflow-x:auto}
.badge{display:inline-block;padding:.05em .5em;border-radius:3px;font-weight:bold;font-size:.85em}
.pass{background:#d8f0d8;color:#185a18}.fail{background:#f7d6d6;color:#8a1b1b}
.warn{background:#fbecc6;color:#6b4b00}.na{background:#e6e6e6;color:#444}
.unavailable{border:1px dashed #b88;padding:.6em;color:#833;background:#fff6f6}
figure{margin:1em 0}figure img{max-width:100%;height:auto;border:1px solid #ddd}
figcaption{font-size:.9em;color:#555}
.meta{color:#555;font-size:.9em}
ul.warnings li{color:#6b4b00}
.oi-controls{margin:.5em 0;padding:.4em;background:#f6f8fa;border-radius:4px}
.explorer svg{display:block;margin:.3em 0;font-family:inherit}
"""


def esc(text) -> str:
    """``str(text)`` with ``& < > " '`` escaped."""
    return html.escape(str(text), quote=True)


def badge(word: str, kind: str) -> str:
    """A coloured label; ``kind`` in {"pass", "fail", "warn", "na"}."""
    return f"<span class='badge {kind}'>{esc(word)}</span>"


def unavailable(what: str, reason: str) -> str:
    """The block shown in place of a plot or table that could not be made."""
    return f"<div class='unavailable'>{esc(what)} unavailable: {esc(reason)}</div>"


def section(title: str, body: str, anchor: str) -> str:
    return f"<section id='{esc(anchor)}'><h2>{esc(title)}</h2>\n{body}\n</section>"


def table_html(frame, float_format="{:.5g}") -> str:
    """A pandas DataFrame as an escaped HTML table."""
    return frame.to_html(escape=True, border=0, na_rep="NaN",
                         float_format=lambda v: float_format.format(v))


def page(title: str, sections, *, subtitle: str = "", script_src: str = "") -> str:
    """One standalone HTML document. ``script_src`` (a CSP hash source such as
    ``'sha256-...'``) allows exactly that inline script; without it no script may run."""
    csp = CSP + (f"; script-src {script_src}" if script_src else "")
    sub = f"<p class='meta'>{esc(subtitle)}</p>" if subtitle else ""
    body = "\n".join(sections)
    return (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n"
        f"<meta http-equiv='Content-Security-Policy' content=\"{csp}\">\n"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>\n"
        f"<title>{esc(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"<h1>{esc(title)}</h1>\n{sub}\n{body}\n</body>\n</html>\n"
    )
