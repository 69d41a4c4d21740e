"""The API reference's two helpers: references to re-exported names, and a coverage check.

**Coverage.** Every name in the ``__all__`` of a module listed in ``bacc_api_modules``
(conf.py) must be documented (under that name, or as the same object under another
name), or the build warns, and ``-W`` fails: a new public name cannot be left out of
``api.rst`` unnoticed.

**Re-exported names.**

dask-bacc's modules import their neighbours' names (``dask_bacc.codes`` re-exports
``InsufficientResults`` from ``dask_bacc.exceptions``; ``LagrangeCode.decode`` is
``Code.decode``; a class defined in ``dask_bacc.codes.base`` is documented as
``dask_bacc.codes.Code``), and docstrings name them from where they are written. Sphinx
only knows the documented names, so a reference such as ``:class:`InsufficientResults```
in ``dask_bacc.codes`` finds nothing.

On a missing Python reference this looks for the object the name means, the way Python
would: ``<target>``, ``<current module>.<target>``, ``<current class>.<target>`` and the
same relative to the module that defines the class or function being described. A
candidate that is a documented name resolves to it; otherwise a class, function or module
it imports to resolves to the documented name of that same object. Anything else stays missing, and
``-n`` reports it.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.util import logging
from sphinx.util.nodes import make_refnode

LOGGER = logging.getLogger(__name__)

_INDEX: dict[int, str] = {}  # id(object) -> its documented name, built on first use


def _import(dotted: str) -> Any:
    """The object ``dotted`` names (a module, or attributes of one), or None."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _identifiable(obj: Any) -> bool:
    # ints and floats are shared between unrelated names: only match what has an identity
    return inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj)


def _by_identity(env: Any) -> dict[int, str]:
    if not _INDEX:
        for name in sorted(env.get_domain("py").objects):
            obj = _import(name)
            if obj is not None and _identifiable(obj):
                _INDEX.setdefault(id(obj), name)
    return _INDEX


def _described(node: Any) -> str | None:
    """The full name of the object whose description (or autosummary row) holds ``node``."""
    parent = node.parent
    while parent is not None:
        if isinstance(parent, addnodes.desc):
            for sig in parent.findall(addnodes.desc_signature):
                if sig.get("module") and sig.get("fullname"):
                    return f"{sig['module']}.{sig['fullname']}"
            return None
        if isinstance(parent, nodes.row):
            # an autosummary row: its first cell links to the object it summarises (a link
            # resolved already, earlier in the document, keeps the full name as its title)
            cell = parent.children[0]
            for ref in cell.findall(addnodes.pending_xref):
                if ref is not node and ref.get("refdomain") == "py":
                    return ref["reftarget"]
            for ref in cell.findall(nodes.reference):
                if ref.get("reftitle"):
                    return ref["reftitle"]
            return None
        parent = parent.parent
    return None


def _candidates(target: str, node: Any) -> list[str]:
    module, cls = node.get("py:module"), node.get("py:class")
    out = [target]
    if module:
        out.append(f"{module}.{target}")
        if cls:
            out.append(f"{module}.{cls}.{target}")
    described = _described(node)
    if described and inspect.isclass(_import(described)):
        out.append(f"{described}.{target}")  # a method named in its class's summary
    # relative to the module that defines the class or function being described
    for owner in (f"{module}.{cls}" if module and cls else None, described):
        home = getattr(_import(owner), "__module__", None) if owner else None
        if home and home != module:
            out.append(f"{home}.{target}")
            if cls:
                out.append(f"{home}.{cls}.{target}")
    return out


def resolve(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    objects = env.get_domain("py").objects
    for name in _candidates(target, node):
        documented = name if name in objects else None
        if documented is None:
            obj = _import(name)
            if obj is None or not _identifiable(obj):
                continue
            documented = _by_identity(env).get(id(obj))
        if documented is not None:
            entry = objects[documented]
            return make_refnode(
                app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, documented
            )
    return None


def _forget_index(app: Any, env: Any, *args: Any) -> None:
    _INDEX.clear()  # the documented names may have changed


def check_coverage(app: Any, env: Any) -> None:
    """Warn about each public name of ``bacc_api_modules`` the reference leaves out."""
    py = env.get_domain("py")
    for modname in app.config.bacc_api_modules:
        module = importlib.import_module(modname)
        for name in getattr(module, "__all__", []):
            if name.startswith("__"):
                continue  # __version__
            full = f"{modname}.{name}"
            if full in py.objects or full in py.modules:
                continue
            obj = getattr(module, name, None)
            if _identifiable(obj):
                if inspect.ismodule(obj) and obj.__name__ in py.modules:
                    continue
                if id(obj) in _by_identity(env):
                    continue
            LOGGER.warning(
                "public name %s is not in the API reference (docs/api.rst)",
                full,
                type="bacc",
                subtype="api_coverage",
            )
    _INDEX.clear()


def setup(app: Any) -> dict[str, Any]:
    app.add_config_value("bacc_api_modules", [], "env", types=[list])
    app.connect("missing-reference", resolve)
    app.connect("env-updated", _forget_index)
    app.connect("env-check-consistency", check_coverage)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
