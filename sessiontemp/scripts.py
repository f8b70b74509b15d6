"""The console scripts' entry points: the platform is asked first, then the script is loaded.

On a platform sessiontemp refuses, ``journal-inspect`` and ``sessiontemp``
say so in one line and exit with status 2, where importing their modules
would end in a traceback from a module the platform lacks.
"""

from __future__ import annotations

from sessiontemp import platform

__all__ = ["journal_inspect", "sessiontemp"]


def journal_inspect() -> None:
    """The ``journal-inspect`` console script."""
    platform.exit_if_unsupported("journal-inspect")
    from sessiontemp import cli

    cli.run()


def sessiontemp() -> None:
    """The ``sessiontemp`` console script (``python -m sessiontemp`` too).

    ``run --session`` and ``shell`` go to the small client before anything
    heavier is imported: a harness pays that start-up on every command.
    """
    platform.exit_if_unsupported("sessiontemp")
    import sys

    from sessiontemp import client

    if client.handles(sys.argv[1:]):
        client.entry()
    from sessiontemp import __main__ as script

    script.entry()
