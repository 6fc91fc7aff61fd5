"""The ``moonbox`` command: one module per subcommand, gathered into one click group.

Built on click (arguments, help, usage errors with exit status 2) and rich (readable
terminal output). ``moonbox run`` keeps a fixed contract that other tools rely on (flags,
JSON lines, exit codes); see README.md.
"""

from __future__ import annotations

import click

from .. import __version__
from ._agent import agent, eval_repair
from ._bench import bench
from ._cluster import cluster
from ._demo import demo
from ._dev import dev
from ._fuzz import fuzz
from ._run import run
from ._stubs import stubs
from ._versions import versions

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="moonbox")
def cli() -> None:
    """Run untrusted Lua mods under budgets that hold with the JIT on."""


for _command in (run, demo, bench, agent, dev, eval_repair, fuzz, stubs, versions,
                 cluster):
    cli.add_command(_command)


def main() -> None:
    cli()
