"""Small intersphinx inventories for the NumPy and xarray names the API reference links to.

The docs build offline (the build machine reaches PyPI only), so every intersphinx
inventory is a local file. ``docs/_intersphinx/*.inv`` are the projects' own inventories
(Python, pandas, Dask and distributed, from Debian's documentation packages of them).
Debian ships no NumPy documentation, and its xarray documentation has no API pages, so
this module writes inventories with the few NumPy and xarray targets the docstrings and
pages name, at the addresses they have on numpy.org/doc/stable and
docs.xarray.dev/en/stable. Add a line here when a docstring names another one.
"""

from __future__ import annotations

import zlib
from pathlib import Path

#: (name, domain:role, page#anchor relative to https://numpy.org/doc/stable/)
NUMPY_TARGETS = [
    ("numpy.ndarray", "py:class", "reference/generated/numpy.ndarray.html#numpy.ndarray"),
    ("numpy.dtype", "py:class", "reference/generated/numpy.dtype.html#numpy.dtype"),
    ("numpy.generic", "py:class", "reference/arrays.scalars.html#numpy.generic"),
    ("numpy.float64", "py:class", "reference/arrays.scalars.html#numpy.float64"),
    (
        "numpy.random.Generator",
        "py:class",
        "reference/random/generator.html#numpy.random.Generator",
    ),
    ("array_like", "std:term", "glossary.html#term-array_like"),
]

#: (name, domain:role, page#anchor relative to https://docs.xarray.dev/en/stable/)
XARRAY_TARGETS = [
    ("xarray.DataArray", "py:class", "generated/xarray.DataArray.html#xarray.DataArray"),
    ("xarray.Dataset", "py:class", "generated/xarray.Dataset.html#xarray.Dataset"),
    ("xarray.map_blocks", "py:function", "generated/xarray.map_blocks.html#xarray.map_blocks"),
    (
        "xarray.apply_ufunc",
        "py:function",
        "generated/xarray.apply_ufunc.html#xarray.apply_ufunc",
    ),
]


def write_inventory(path: str | Path, project: str, targets: list[tuple[str, str, str]]) -> str:
    """Write ``targets`` as a Sphinx inventory (version 2) to ``path``; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"{name} {role} 1 {uri} -" for name, role, uri in targets]
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n"
        "# Version: stable\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    data = header.encode() + zlib.compress(("\n".join(lines) + "\n").encode())
    if not path.is_file() or path.read_bytes() != data:
        path.write_bytes(data)
    return str(path)
