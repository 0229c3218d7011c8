"""The little markdown the runs print (ZEPO's and the sensitivity study's summary.md) as HTML: pipe
tables become tables, "- " lines a list, other lines paragraphs. Every text is escaped; nothing else
of markdown is read (a `*` or a link stays as typed).
"""

from __future__ import annotations

import html
import re

RULE = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
"""A table's header rule: |---|---|."""


def esc(x: str) -> str:
    return html.escape(x, quote=True)


def table(head: list[str], body: list[list[str]]) -> str:
    cols = "".join(f"<th>{esc(c)}</th>" for c in head)
    rows = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in body)
    return f"<div class='wide'><table class='md'><thead><tr>{cols}</tr></thead><tbody>{rows}</tbody></table></div>"


def cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") else inner
    return [c.strip() for c in inner.split("|")]


def markdown_html(text: str) -> str:
    """`text` as HTML blocks (tables, lists, paragraphs), each text escaped."""
    lines = text.splitlines()
    out: list[str] = []
    items: list[str] = []
    k = 0

    def flush() -> None:
        if items:
            out.append("<ul>" + "".join(f"<li>{esc(x)}</li>" for x in items) + "</ul>")
            items.clear()

    while k < len(lines):
        line = lines[k]
        if line.lstrip().startswith("|") and k + 1 < len(lines) and RULE.match(lines[k + 1]):
            flush()
            head = cells(line)
            body = []
            k += 2
            while k < len(lines) and lines[k].lstrip().startswith("|"):
                row = cells(lines[k])
                body.append((row + [""] * len(head))[: len(head)])
                k += 1
            out.append(table(head, body))
            continue
        if line.startswith("- "):
            items.append(line[2:])
        else:
            flush()
            if line.strip():
                out.append(f"<p>{esc(line)}</p>")
        k += 1
    flush()
    return "".join(out)
