"""``dask bacc ...``: the command line, registered with dask's CLI (``dask_cli`` entry point).

Each subcommand lives next to the code it drives and is imported only when it runs, so
``dask --help`` and the other ``dask`` commands never import the benchmark harness.
``dask bacc bench`` needs the ``[bench]`` extra (matplotlib, scikit-learn); without it,
the command says what to install.
"""

from __future__ import annotations

import importlib

import click

#: subcommand -> (module, attribute, extra whose packages it needs, or None)
_COMMANDS: dict[str, tuple[str, str, str | None]] = {
    "bench": ("dask_bacc.bench.cli", "bench", "bench"),
    "demo": ("dask_bacc.bench.demo", "demo", None),
}
#: packages of the ``[bench]`` extra that ``dask bacc bench`` needs to make its outputs
BENCH_PACKAGES = ("matplotlib", "sklearn")


class _LazyGroup(click.Group):
    """A group whose subcommands are imported on first use (click's documented pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _COMMANDS:
            return super().get_command(ctx, cmd_name)
        module, attr, extra = _COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), attr)
        if extra is not None and not getattr(command, "_bacc_checked", False):
            _needs_extra(command, extra)
        return command


def missing_packages() -> list[str]:
    """The packages of the ``[bench]`` extra (:data:`BENCH_PACKAGES`) not installed here."""
    from importlib.util import find_spec

    return [name for name in BENCH_PACKAGES if find_spec(name) is None]


def _needs_extra(command: click.Command, extra: str) -> None:
    """Make ``command`` stop with an install hint when its extra's packages are missing."""
    callback = command.callback
    assert callback is not None

    def checked(*args: object, **kwargs: object) -> object:
        missing = missing_packages()
        if missing:
            raise click.ClickException(
                f"`dask bacc {command.name}` needs {', '.join(missing)}, which the "
                f"[{extra}] extra installs: pip install 'dask-bacc[{extra}]'"
            )
        return callback(*args, **kwargs)

    command.callback = checked
    command._bacc_checked = True  # type: ignore[attr-defined]


@click.group(name="bacc", cls=_LazyGroup)
@click.version_option(package_name="dask-bacc", prog_name="dask-bacc")
def bacc() -> None:
    """dask-bacc: straggler-resistant map over chunks with coded computing."""
