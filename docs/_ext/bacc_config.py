"""The configuration reference, generated from ``dask_bacc/bacc.yaml`` at build time.

:func:`config_entries` reads the YAML file line by line for its keys and the comment block
above each, and takes every default from ``yaml.safe_load`` of the same file, so the page
cannot drift from the file. :func:`render_rst` turns the entries into reStructuredText
(one Sphinx ``confval`` per leaf key, so pages link to a key with ``{confval}`bacc.code```
in Markdown or ``:confval:`bacc.code``` in reST). The Sphinx extension adds the
``bacc-config`` directive that writes the reference where it stands.

A comment block belongs to the key right below it. Keys that follow it without a comment
of their own, at the same indentation and with no blank line between, share it (in
``bacc.yaml``: ``speculative.multiplier``, ``quantile`` and ``min-runtime``, described
with ``speculative.rule``). A comment above a mapping (``wait:``, ``accuracy:``) describes
the section.

This module has no dependency on Sphinx for the generator itself (the test imports it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

BACC_YAML = Path(__file__).resolve().parents[2] / "dask_bacc" / "bacc.yaml"

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_-]+):(?P<value>.*)$")


@dataclass
class Entry:
    """One key of ``bacc.yaml``.

    ``key`` is the dotted name (``bacc.wait.berrut``), ``default`` the loaded value,
    ``literal`` the value as written in the file, ``comment`` the lines of the comment
    block that describes it (without ``#``), ``section`` whether it is a mapping, and
    ``shared_with`` the key whose comment a leaf without one of its own shares.
    """

    key: str
    default: Any
    literal: str
    comment: list[str]
    section: bool
    shared_with: str | None = None


def _split_value(text: str) -> tuple[str, str]:
    """``" 10s  # note"`` -> ``("10s", "note")`` (a ``#`` inside quotes is kept)."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].strip(), text[i + 1 :].strip()
    return text.strip(), ""


def config_entries(path: str | Path = BACC_YAML) -> list[Entry]:
    """Every key of ``path`` (sections and leaves) in file order, with its comment."""
    path = Path(path)
    text = path.read_text()
    loaded = yaml.safe_load(text)
    entries: list[Entry] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing mappings
    comment: list[str] = []
    # the last commented leaf at each indentation, while keys follow it without a gap
    sharing: dict[int, Entry] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            comment, sharing = [], {}
            continue
        if stripped.startswith("#"):
            comment.append(stripped[1:].strip())
            continue
        match = _KEY.match(line)
        if match is None:
            raise ValueError(f"{path}: cannot read the line {line!r}")
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        names = [k for _, k in stack] + [match["key"]]
        value = loaded
        for name in names:
            value = value[name]
        literal, inline = _split_value(match["value"])
        own = comment + ([inline] if inline else [])
        entry = Entry(
            key=".".join(names),
            default=value,
            literal=literal,
            comment=own,
            section=isinstance(value, dict),
        )
        for deeper in [i for i in sharing if i > indent]:
            del sharing[deeper]
        if entry.section:
            stack.append((indent, match["key"]))
            sharing.pop(indent, None)
        elif own:
            sharing[indent] = entry
        elif indent in sharing:
            entry.shared_with = sharing[indent].key
        entries.append(entry)
        comment = []
    return entries


def leaf_keys(data: Any, prefix: str = "") -> list[str]:
    """The dotted names of the leaves of a nested mapping (what ``dask.config`` stores)."""
    if not isinstance(data, dict):
        return [prefix]
    return [
        k for name, v in data.items() for k in leaf_keys(v, f"{prefix}.{name}" if prefix else name)
    ]


def _default_text(entry: Entry) -> str:
    # the value as written (``256 MiB``, ``null``); quoted strings keep their quotes
    return f"``{entry.literal}``" if entry.literal else "(empty)"


def render_rst(entries: list[Entry]) -> str:
    """The configuration reference as reStructuredText: one ``confval`` per leaf key.

    Leaves are grouped under their mapping (a rubric with the mapping's comment), the
    mappings in file order and the keys of each in file order; the leaves directly under
    ``bacc`` come first.
    """
    groups: dict[str, list[Entry]] = {}
    sections = {e.key: e for e in entries if e.section}
    for entry in entries:
        if not entry.section:
            groups.setdefault(entry.key.rpartition(".")[0], []).append(entry)
    out: list[str] = []
    for parent, leaves in groups.items():
        out += [f".. rubric:: {parent}.*", ""]
        if sections[parent].comment:
            out += [*sections[parent].comment, ""]
        for entry in leaves:
            out += [f".. confval:: {entry.key}", f"   :default: {_default_text(entry)}", ""]
            if entry.comment:
                out += [f"   {line}" if line else "" for line in entry.comment]
            elif entry.shared_with:
                out.append(f"   Described with :confval:`{entry.shared_with}`.")
            else:
                out.append("   (No comment in ``bacc.yaml``.)")
            out.append("")
    return "\n".join(out) + "\n"


def setup(app: Any) -> dict[str, Any]:
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util.docutils import SphinxDirective
    from sphinx.util.nodes import nested_parse_with_titles

    class BaccConfigDirective(SphinxDirective):
        """``.. bacc-config::`` writes the reference generated from ``bacc.yaml``.

        Its output is reStructuredText: in a Markdown page, put it in an ``eval-rst`` block.
        """

        has_content = False

        def run(self) -> list[Any]:
            self.env.note_dependency(str(BACC_YAML))
            rst = render_rst(config_entries(BACC_YAML))
            container = nodes.container()
            nested_parse_with_titles(
                self.state, StringList(rst.splitlines(), source=str(BACC_YAML)), container
            )
            return container.children

    app.add_directive("bacc-config", BaccConfigDirective)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
