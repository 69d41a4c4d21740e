"""Sphinx configuration of the dask-bacc documentation.

Build (warnings are errors, every reference must resolve)::

    bash ci/docs.sh
    # or, with the docs extra installed:
    python -m sphinx -W -n --keep-going -b html docs docs/_build/html

The build is offline: intersphinx reads local inventories only (``_intersphinx/``; those
of NumPy and xarray are written by ``_ext/local_inventories.py``), never the network.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

from local_inventories import NUMPY_TARGETS, XARRAY_TARGETS, write_inventory  # noqa: E402

import dask_bacc  # noqa: E402

# -- Project -------------------------------------------------------------------------

project = "dask-bacc"
author = "the dask-bacc developers"
copyright = "the dask-bacc developers"
version = release = dask_bacc.__version__

# -- General -------------------------------------------------------------------------

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_parser",
    "bacc_config",  # _ext/bacc_config.py: the configuration reference from bacc.yaml
    "bacc_links",  # _ext/bacc_links.py: links to files that are not pages
    "bacc_api",  # _ext/bacc_api.py: re-exported names; every public name documented
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
needs_sphinx = "7.4"  # the built-in confval directive

exclude_patterns = [
    "_build",
    "_ext",
    "_intersphinx",
    "Thumbs.db",
    ".DS_Store",
    # benchmark outputs: tables and JSON written by benchmarks/ next to their figures;
    # the user-guide pages quote them and link to them as files
    "accuracy/**",
    "adaptive/**",
    "bench/**",
    "iterative/**",
    "regimes/**",
]

nitpicky = True
# Names that have no target anywhere (neither in these docs nor in an inventory).
nitpick_ignore: list[tuple[str, str]] = []

# -- MyST (the Markdown user-guide pages) --------------------------------------------

myst_heading_anchors = 4  # GitHub-style anchors: the pages link to #sections
myst_enable_extensions = ["colon_fence"]

# -- autodoc / autosummary / numpydoc ------------------------------------------------

# every name in these modules' __all__ must be in api.rst (_ext/bacc_api.py)
bacc_api_modules = [
    "dask_bacc",
    "dask_bacc.codes",
    "dask_bacc.codes.transform",
    "dask_bacc.testing",
    "dask_bacc.diagnostics",
    "dask_bacc.config",
    "dask_bacc.exceptions",
]

autosummary_generate = False  # api.rst lists every name itself
autodoc_typehints = "none"  # numpydoc's Parameters/Returns give the documented types
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True}

numpydoc_show_class_members = False  # autodoc's :members: documents them
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = True
numpydoc_xref_aliases = {
    # Python
    "callable": ":term:`python:callable`",
    "hashable": ":term:`python:hashable`",
    "mapping": ":term:`python:mapping`",
    "sequence": ":term:`python:sequence`",
    "iterable": ":term:`python:iterable`",
    "Path": "pathlib.Path",
    # NumPy
    "array": "numpy.ndarray",
    "ndarray": "numpy.ndarray",
    "array_like": ":term:`numpy:array_like`",
    # pandas and xarray
    "DataFrame": "pandas.DataFrame",
    "Series": "pandas.Series",
    "DataArray": "xarray.DataArray",
    "Dataset": "xarray.Dataset",
    # Dask and distributed
    "dask array": "dask.array.Array",
    "Client": "distributed.Client",
    "Future": "distributed.Future",
    # dask-bacc
    "CodedJob": "dask_bacc.CodedJob",
    "CodedData": "dask_bacc.CodedData",
    "JobReport": "dask_bacc.JobReport",
    "WaitPolicy": "dask_bacc.WaitPolicy",
    "Code": "dask_bacc.codes.Code",
    "InterpolatingCode": "dask_bacc.codes.InterpolatingCode",
    "ErrorEstimate": "dask_bacc.codes.ErrorEstimate",
    "Screening": "dask_bacc.codes.Screening",
    "Transform": "dask_bacc.codes.transform.Transform",
    "StragglerModel": "dask_bacc.testing.StragglerModel",
    "InsufficientResults": "dask_bacc.InsufficientResults",
    "dask collection": "dask.typing.DaskCollection",
}
numpydoc_xref_ignore = {
    "optional",
    "default",
    "of",
    "or",
    "to",
    "and",
    "shape",
    "None",
}

# -- intersphinx (offline) -----------------------------------------------------------

# _intersphinx/{python,pandas,dask,distributed}.inv are those projects' own objects.inv,
# taken from Debian 12's documentation packages (python3.11-doc, python-pandas-doc 1.5.3,
# python-dask-doc and python-distributed-doc 2022.12.1): older than the installed
# versions, but the classes and functions the docstrings name keep their addresses.
# Refresh one with a newer objects.inv from the same site when a name does not resolve.

_INV = HERE / "_intersphinx"
intersphinx_mapping = {
    "python": ("https://docs.python.org/3", str(_INV / "python.inv")),
    "numpy": (
        "https://numpy.org/doc/stable",
        write_inventory(_INV / "numpy.inv", "NumPy", NUMPY_TARGETS),
    ),
    "pandas": ("https://pandas.pydata.org/docs", str(_INV / "pandas.inv")),
    "xarray": (
        "https://docs.xarray.dev/en/stable",
        write_inventory(_INV / "xarray.inv", "xarray", XARRAY_TARGETS),
    ),
    "dask": ("https://docs.dask.org/en/stable", str(_INV / "dask.inv")),
    "distributed": ("https://distributed.dask.org/en/stable", str(_INV / "distributed.inv")),
}

# -- HTML ----------------------------------------------------------------------------

# The PyData theme, not dask-sphinx-theme: the latter also builds cleanly (with Sphinx 9
# and the pydata-sphinx-theme 0.20 it pins), but it is the Dask project's own site chrome
# (the Dask logo and a navbar to dask.org's projects), which would present dask-bacc as
# an official Dask project.
html_theme = "pydata_sphinx_theme"
html_title = f"dask-bacc {release}"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "navbar_align": "left",
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
# the section navigation is for the user guide; the other pages have none
html_sidebars = {
    "index": [],
    "getting-started": [],
    "testing": [],
    "api": [],
    "configuration": [],
}
html_show_sourcelink = False
# _static/bacc.css: shell blocks wrap their long lines instead of overflowing their box
html_static_path = ["_static"]
html_css_files = ["bacc.css"]

# ``BACC_DOCS_NO_VIEWCODE=1`` skips the highlighted module sources (a faster build)
if os.environ.get("BACC_DOCS_NO_VIEWCODE"):
    extensions.remove("sphinx.ext.viewcode")
