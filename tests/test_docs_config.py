"""The configuration page of the docs lists every key of bacc.yaml with its default.

The generator (docs/_ext/bacc_config.py) is a plain function: no Sphinx build here.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import yaml

import dask_bacc

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "docs" / "_ext" / "bacc_config.py"
BACC_YAML = Path(dask_bacc.__file__).parent / "bacc.yaml"


def _generator():
    spec = importlib.util.spec_from_file_location("bacc_config_docs", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_every_leaf_key_is_listed_with_its_default():
    gen = _generator()
    loaded = yaml.safe_load(BACC_YAML.read_text())
    leaves = {"bacc." + k for k in gen.leaf_keys(loaded["bacc"])}
    assert len(leaves) > 20
    entries = gen.config_entries(BACC_YAML)
    documented = {e.key: e for e in entries if not e.section}
    assert set(documented) == leaves
    for key, entry in documented.items():
        value = loaded
        for part in key.split("."):
            value = value[part]
        assert entry.default == value, key
        # the value as written in the file reads back as the same default
        assert yaml.safe_load(entry.literal or "null") == value, key

    rst = gen.render_rst(entries)
    for key, entry in documented.items():
        assert f".. confval:: {key}\n" in rst
        # its default and a description: its own comment or the one it shares
        assert f"   :default: ``{entry.literal}``" in rst, key
        assert entry.comment or entry.shared_with, f"{key} has no comment in bacc.yaml"


def test_comments_belong_to_the_key_below_them(tmp_path):
    gen = _generator()
    path = tmp_path / "bacc.yaml"
    path.write_text(
        "bacc:\n"
        "  # the first key\n"
        "  # on two lines\n"
        "  first: 1\n"
        "\n"
        "  second: null  # an inline comment\n"
        "  # a section\n"
        "  group:\n"
        "    # shared by the next two\n"
        "    a: x\n"
        "    b: 10s\n"
        "\n"
        "    c: true\n"
    )
    entries = {e.key: e for e in gen.config_entries(path)}
    assert entries["bacc.first"].comment == ["the first key", "on two lines"]
    assert entries["bacc.second"].comment == ["an inline comment"]
    assert entries["bacc.second"].default is None
    assert entries["bacc.group"].section and entries["bacc.group"].comment == ["a section"]
    assert entries["bacc.group.a"].comment == ["shared by the next two"]
    assert entries["bacc.group.b"].shared_with == "bacc.group.a"
    assert entries["bacc.group.b"].literal == "10s"
    # a blank line ends the sharing
    assert entries["bacc.group.c"].comment == [] and entries["bacc.group.c"].shared_with is None
    rst = gen.render_rst(list(entries.values()))
    assert "Described with :confval:`bacc.group.a`." in rst
    assert "(No comment in ``bacc.yaml``.)" in rst
