"""Markdown links from the user-guide pages to files that are not pages of this site.

The pages in ``docs/`` are written to read well on GitHub too, so they link to files by
path: benchmark tables (``accuracy/compare.md``, ``../benchmarks/results/*.md``), the
README, folders of results (``accuracy/``). Sphinx would take a ``.md`` link for a page
of the site (and warn that there is none) and a folder link for a link to the page
itself. This transform, run when a page is read, turns

- a link to a Markdown file that is not a page of the site into a download link (the
  file is copied into the built site, as MyST does for any other file), and
- a link to a folder into its plain text (a web page cannot list a folder).

Links to pages of the site and to anything else are left to MyST.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.transforms import SphinxTransform


class LocalFileLinks(SphinxTransform):
    default_priority = 500

    def apply(self, **kwargs: Any) -> None:
        docdir = Path(self.env.doc2path(self.env.docname)).parent
        for node in list(self.document.findall(addnodes.pending_xref)):
            if node.get("reftype") != "myst":
                continue
            target = node["reftarget"]
            if node.get("refdomain") == "doc":
                if target in self.env.found_docs:
                    continue
                path = Path(target + ".md")
                path = path if path.is_absolute() else docdir / path
                if not path.is_file():
                    continue
                download = addnodes.download_reference(
                    "",
                    "",
                    *node.children,
                    refdoc=self.env.docname,
                    reftarget=os.path.relpath(path, docdir),
                    refexplicit=True,
                )
                node.replace_self(download)
            elif node.get("refdomain") is None and target.endswith("/"):
                if (docdir / target).is_dir():
                    node.replace_self(nodes.inline("", "", *node.children))


def setup(app: Any) -> dict[str, Any]:
    app.add_transform(LocalFileLinks)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
