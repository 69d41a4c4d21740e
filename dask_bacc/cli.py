"""``dask bacc ...``: the command line, registered with dask's CLI (``dask_cli`` entry point).

Each subcommand lives next to the code it drives; this module only groups them.
"""

from __future__ import annotations

import click


@click.group(name="bacc")
@click.version_option(package_name="dask-bacc", prog_name="dask-bacc")
def bacc() -> None:
    """dask-bacc: straggler-resistant map over chunks with coded computing."""


def _register() -> None:
    from .bench.cli import bench
    from .demo import demo

    bacc.add_command(demo)
    bacc.add_command(bench)


_register()
