"""The configuration page of the docs lists every key of bacc.yaml with its default.

The generator (docs/_ext/bacc_config.py) is a plain function: no Sphinx build here.
"""

from __future__ import annotations

import importlib.util
import re
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


# -- styling: code boxes (issue 28, item 9) -------------------------------------------------

#: characters of a code line the docs' content column shows without scrolling (at 1280 px
#: the PyData theme's box holds about 98)
BOX = 80
SHELL = ("bash", "console", "shell", "sh")


def _fences(path: Path) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block of a MyST page."""
    fence = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
    return fence.findall(path.read_text())


def test_the_install_block_fits_its_box():
    """docs/getting-started.md's install block had 106-character lines (a command and its
    comment) that ran out of the code box: each comment is now on its own line."""
    blocks = [body for lang, body in _fences(ROOT / "docs" / "getting-started.md")]
    install = next(b for b in blocks if 'pip install -e ".[diagnostics]"' in b)
    assert max(len(line) for line in install.splitlines()) <= BOX, install


def test_shell_blocks_wrap_instead_of_overflowing():
    """Shell blocks elsewhere (benchmark commands with their comments) wrap in the built
    site: docs/conf.py adds _static/bacc.css, which sets pre-wrap on them."""
    conf = (ROOT / "docs" / "conf.py").read_text()
    assert re.search(r'^html_static_path = \["_static"\]$', conf, re.M)
    assert re.search(r'^html_css_files = \["bacc.css"\]$', conf, re.M)
    css = (ROOT / "docs" / "_static" / "bacc.css").read_text()
    rule = re.search(r"([^{}]*)\{([^}]*white-space:\s*pre-wrap[^}]*)\}", css)
    assert rule, css
    selectors = {s.strip() for s in rule.group(1).split("*/")[-1].split(",")}
    for lang in SHELL:
        assert f"div.highlight-{lang} pre" in selectors
    # the pages use only these languages for shell commands
    used = {lang for page in (ROOT / "docs").glob("*.md") for lang, _ in _fences(page)}
    assert used & {"zsh", "powershell", "bat"} == set()
