"""``dask bacc ...``: the command line, registered with dask's CLI (``dask_cli`` entry point).

Each subcommand lives next to the code it drives and is imported only when it runs, so
``dask --help`` and the other ``dask`` commands never import the benchmark harness.
``dask bacc bench`` needs the ``[bench]`` extra (matplotlib, scikit-learn); without it,
the command says what to install (:mod:`dask_bacc.bench.cli`).
"""

from __future__ import annotations

import importlib

import click

#: subcommand -> (module, attribute), imported when the subcommand runs
_COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("dask_bacc.bench.cli", "bench"),
    "demo": ("dask_bacc.bench.demo", "demo"),
}


class _LazyGroup(click.Group):
    """A group whose subcommands are imported on first use (click's documented pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _COMMANDS:
            return super().get_command(ctx, cmd_name)
        module, attr = _COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command


@click.group(name="bacc", cls=_LazyGroup)
@click.version_option(package_name="dask-bacc", prog_name="dask-bacc")
def bacc() -> None:
    """dask-bacc: straggler-resistant map over chunks with coded computing."""
