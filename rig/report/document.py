"""A small document model for the report and its two text renderings, Markdown and HTML.

The report is built once as blocks (headings, paragraphs, tables, figures, boxes) and rendered
to each format from the same blocks, so the Markdown, the HTML and the PDF (made from the HTML)
can never state different things. Inline text may use `code` and **bold**; nothing else is
interpreted, and everything is escaped for the target format.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

#: Box kinds: `todo` (to be completed by the submitter), `simulated`, `incomplete`, `note`.
BOX_KINDS = ("todo", "simulated", "incomplete", "note")


@dataclass(frozen=True)
class Heading:
    """A section heading; `running` is the page-header text for the pages it starts (PDF)."""

    level: int
    text: str
    anchor: str = ""
    running: str | None = None


@dataclass(frozen=True)
class Para:
    """A paragraph of inline text."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """An unordered list of inline texts."""

    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    """A table: header cells, rows of inline-text cells, and a caption above it."""

    #: Column headings; all empty: a key/value table (no heading row in HTML).
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""
    #: Column alignment per column: "l" or "r" (numbers read best right-aligned).
    align: str = ""


@dataclass(frozen=True)
class Figure:
    """An image file (PNG) with its caption."""

    path: Path
    caption: str
    label: str = ""
    #: Full text width (diagrams); plots are drawn a little narrower.
    wide: bool = False


@dataclass(frozen=True)
class Box:
    """A highlighted box (see BOX_KINDS), with a bold title and inline text."""

    kind: str
    title: str
    text: str


Block = Heading | Para | Bullets | Table | Figure | Box


@dataclass
class Document:
    """The report as blocks, in reading order."""

    title: str
    subtitle: str = ""
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        """Append blocks in order."""
        self.blocks.extend(blocks)


# -- Markdown ----------------------------------------------------------------------------------
def to_markdown(doc: Document, relative_to: Path) -> str:
    """GitHub-flavoured Markdown; figures are linked relative to `relative_to` (report.md's dir)."""
    out = [f"# {_md_inline(doc.title)}", ""]
    if doc.subtitle:
        out += [f"*{_md_inline(doc.subtitle)}*", ""]
    for block in doc.blocks:
        if isinstance(block, Heading):
            anchor = f' <a id="{block.anchor}"></a>' if block.anchor else ""
            out += [f"{'#' * (block.level + 1)} {_md_inline(block.text)}{anchor}", ""]
        elif isinstance(block, Para):
            out += [_md_inline(block.text), ""]
        elif isinstance(block, Bullets):
            out += [f"- {_md_inline(item)}" for item in block.items] + [""]
        elif isinstance(block, Table):
            if block.caption:
                out += [f"**{_md_inline(block.caption)}**", ""]
            out += [_md_row(block.header),
                    "| " + " | ".join("---:" if _align(block, i) == "r" else "---"
                                      for i in range(len(block.header))) + " |"]
            out += [_md_row(row) for row in block.rows] + [""]
        elif isinstance(block, Figure):
            rel = block.path.relative_to(relative_to) if block.path.is_absolute() else block.path
            out += [f"![{_md_escape(block.caption)}]({rel.as_posix()})", "",
                    f"*{_md_inline(_figure_caption(block))}*", ""]
        elif isinstance(block, Box):
            mark = {"todo": "TO BE COMPLETED BY THE SUBMITTER", "simulated": "SIMULATED",
                    "incomplete": "INCOMPLETE", "note": "NOTE"}[block.kind]
            out += [f"> **{mark}: {_md_inline(block.title)}**", ">",
                    f"> {_md_inline(block.text)}", ""]
    return "\n".join(out).rstrip() + "\n"


def _md_row(cells: tuple[str, ...]) -> str:
    return "| " + " | ".join(_md_inline(c).replace("|", "\\|") for c in cells) + " |"


def _md_escape(text: str) -> str:
    return re.sub(r"([\[\]<>])", r"\\\1", text)


def _md_inline(text: str) -> str:
    # `code` and **bold** are Markdown already; escape what would start HTML or links.
    return re.sub(r"([<>])", r"\\\1", text)


def _align(table: Table, i: int) -> str:
    return table.align[i] if i < len(table.align) else "l"


def _figure_caption(fig: Figure) -> str:
    return f"{fig.label}: {fig.caption}" if fig.label else fig.caption


# -- HTML ----------------------------------------------------------------------------------------
def to_html(doc: Document, *, css: str, embed: bool = True, relative_to: Path | None = None,
            footer: str = "") -> str:
    """One HTML page; with `embed`, figures are inlined as data: URIs (self-contained)."""
    body: list[str] = [f'<header class="title"><h1>{html.escape(doc.title)}</h1>']
    if doc.subtitle:
        body.append(f'<p class="subtitle">{_html_inline(doc.subtitle)}</p>')
    body.append("</header>")
    for block in doc.blocks:
        body.append(_html_block(block, embed, relative_to))
    if footer:
        body.append(f'<footer class="colophon">{_html_inline(footer)}</footer>')
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{html.escape(doc.title)}</title>\n"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
        f"<style>\n{css}\n</style>\n</head>\n<body>\n" + "\n".join(body) + "\n</body>\n</html>\n"
    )


def _html_block(block: Block, embed: bool, relative_to: Path | None) -> str:
    if isinstance(block, Heading):
        level = min(block.level + 1, 6)
        anchor = f' id="{html.escape(block.anchor)}"' if block.anchor else ""
        running = ("" if block.running is None
                   else f' data-running="{html.escape(block.running)}"')
        klass = "" if block.running is None else (
            ' class="running-sim"' if block.running else ' class="running-clear"')
        return f"<h{level}{anchor}{klass}{running}>{_html_inline(block.text)}</h{level}>"
    if isinstance(block, Para):
        return f"<p>{_html_inline(block.text)}</p>"
    if isinstance(block, Bullets):
        items = "".join(f"<li>{_html_inline(i)}</li>" for i in block.items)
        return f"<ul>{items}</ul>"
    if isinstance(block, Table):
        head = "".join(f'<th class="{_align(block, i)}">{_html_inline(c)}</th>'
                       for i, c in enumerate(block.header))
        rows = "".join(
            "<tr>" + "".join(f'<td class="{_align(block, i)}">{_html_inline(c)}</td>'
                             for i, c in enumerate(row)) + "</tr>"
            for row in block.rows
        )
        caption = f"<caption>{_html_inline(block.caption)}</caption>" if block.caption else ""
        if not any(block.header):  # key/value table
            return f'<table class="kv">{caption}<tbody>{rows}</tbody></table>'
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
    if isinstance(block, Figure):
        if embed:
            data = base64.b64encode(block.path.read_bytes()).decode("ascii")
            src = f"data:image/png;base64,{data}"
        else:
            src = (block.path.relative_to(relative_to).as_posix()
                   if relative_to is not None else block.path.as_posix())
        label = (f'<span class="figlabel">{html.escape(block.label)}</span> '
                 if block.label else "")
        klass = ' class="wide"' if block.wide else ""
        return (f'<figure><img{klass} src="{html.escape(src)}" alt="{html.escape(block.caption)}">'
                f"<figcaption>{label}{_html_inline(block.caption)}</figcaption></figure>")
    if isinstance(block, Box):
        mark = {"todo": "To be completed by the submitter", "simulated": "Simulated",
                "incomplete": "Incomplete", "note": "Note"}[block.kind]
        return (f'<div class="box {block.kind}"><p class="boxmark">{mark}</p>'
                f"<p><strong>{_html_inline(block.title)}</strong></p>"
                f"<p>{_html_inline(block.text)}</p></div>")
    raise TypeError(f"unknown block {type(block).__name__}")


def _html_inline(text: str) -> str:
    out = html.escape(text, quote=False)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)
