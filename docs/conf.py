"""Sphinx configuration of sessiontemp's documentation site.

Build it (the ``docs`` extra holds what this needs)::

    pip install -e '.[docs]'
    python -m sphinx -W -n docs docs/_build/html

Every page is Markdown (MyST); the API reference is autodoc over the
docstrings, the CLI reference is sphinx-argparse over the real parsers, so
neither can drift from the code.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

# cli_parsers.py, beside this file, hands the real parsers to sphinx-argparse.
sys.path.insert(0, str(Path(__file__).parent))

project = "sessiontemp"
author = "the sessiontemp authors"
copyright = "the sessiontemp authors"
release = metadata.version("sessiontemp")
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinxarg.ext",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]

# Headings up to level 4 get anchors, so a page links to `page.md#a-heading`.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]

# Options such as `--root` and `-- CMD` are shown as typed, never as dashes.
smartquotes = False

html_theme = "furo"
html_title = "sessiontemp"
# Code blocks wrap long lines rather than hide their ends (see the file).
html_static_path = ["_static"]
html_css_files = ["wrap.css"]
html_show_sourcelink = False

autodoc_member_order = "bysource"
# A signature longer than this shows one parameter a line, as attrs' and
# structlog's references do: Manager's fifteen options are no wall of text.
maximum_signature_line_length = 88
# Defaults as the source writes them (time.time, DEFAULT_RETENTION): a repr
# such as <built-in function time> cannot be parsed, and a signature that
# cannot be parsed is drawn as one block of text whatever its length.
autodoc_preserve_defaults = True
autodoc_typehints = "signature"
# Names in signatures as they are imported (os.PathLike), never with the
# "~" of a shortened reference left in.
autodoc_typehints_format = "fully-qualified"
autodoc_class_signature = "mixed"
autodoc_default_options = {"members": True, "show-inheritance": True}

# Every cross-reference must resolve (`-n`); the standard library is not
# linked (there is no network to fetch its inventory from), so its names are
# accepted as they are.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(os|pathlib|collections\.abc|typing|subprocess|asyncio|signal|"
               r"types|datetime|enum|contextlib|sqlite3|io|threading)\..*"),
]


# The core's own state types that some signatures return, and the type
# aliases of a few parameters, have no page of their own; Sphinx's
# signature parser also cuts ``Callable[[], T]`` at its empty list.
nitpick_ignore_regex += [
    (r"py:.*", r"sessiontemp\.sessions\.Resumable|"
               r"(sessiontemp\.)?journal\.((reducer|state)\.State|store\.(retirement\.)?History)"),
    (r"py:class", r"Callable\[\[.*"),
    # The step hook's alias: documented with Manager's step_hook parameter.
    (r"py:class", r"StepHook|sessiontemp\.steps\.StepHook"),
]

# A lease is made only by Manager.acquire: its constructor takes the
# manager's internal side of it (its Leases, the Issuer protocol and the lock's Hold),
# which has no page of its own.
nitpick_ignore_regex += [
    (r"py:class", r"(sessiontemp\.lease\.)?(Leases|Issuer)|(sessiontemp\.handles\.)?Hold"),
]
