"""The console scripts' entry points: the platform is asked first, then the script is loaded.

On a platform sessiontemp refuses, ``journal-inspect`` and ``sessiontemp``
say so in one line and exit with status 2, where importing their modules
would end in a traceback from a module the platform lacks.
"""

from __future__ import annotations

from sessiontemp import platform

__all__ = ["journal_inspect", "sessiontemp", "sessiontemp_shell"]


def journal_inspect() -> None:
    """The ``journal-inspect`` console script."""
    platform.exit_if_unsupported("journal-inspect")
    from sessiontemp.cli import journal_inspect as cli

    cli.run()


def sessiontemp() -> None:
    """The ``sessiontemp`` console script (``python -m sessiontemp`` too).

    ``run --session`` and ``shell`` go to the small client before anything
    heavier is imported: a harness pays that start-up on every command.
    """
    platform.exit_if_unsupported("sessiontemp")
    import sys

    from sessiontemp.holder import client

    if client.handles(sys.argv[1:]):
        client.entry()
    from sessiontemp import __main__ as script

    script.entry()


def sessiontemp_shell() -> None:
    """``sessiontemp-shell COMMAND_STRING``: ``sessiontemp shell`` as one program.

    The form an agent CLI's shell prefix names (one path: Claude Code quotes
    the prefix as a single word).  The agent's own session hook, which
    starts the session, cannot run inside it: that command line alone is
    run as it is (``sessiontemp session hook``, nothing else).
    """
    import os
    import sys

    words = sys.argv[1:]
    if len(words) == 1 and "session hook" in words[0]:
        from sessiontemp.integrations.claude_code import hook_words

        hook = hook_words(words[0])
        if hook is not None:
            # The hook's own program, by its absolute path: no shell to read it again.
            os.execv(hook[0], hook)  # noqa: S606
    sys.argv[1:] = ["shell", *words]
    sessiontemp()
