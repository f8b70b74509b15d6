"""Sizes as people write them on a command line: ``500M``, ``2G``, ``100K``, ``4096``.

One parser for every place a size is given as text (``sessiontemp run
--max-bytes``, the pytest plugin's ``--sessiontemp-max-bytes``), and its
inverse, so that a message can name a setting the way it can be typed
back.  Binary units: K is 1024.
"""

from __future__ import annotations

from typing import Final

__all__ = ["parse", "spelled"]

_UNITS: Final = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse(text: str) -> int:
    """*text* as a size of 0 or more: digits, then K, M, G or T (``KiB``, ``kb`` too).

    Raises ValueError naming the text and what to pass instead.
    """
    word = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = word[-1:] if word[-1:] in _UNITS else ""
    digits = word[:-1] if unit else word
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"{text!r} is not a size: pass a whole number, or one with K, M, G "
                         "or T (binary units), such as 500M")
    return int(digits) * _UNITS[unit]


def spelled(size: int) -> str:
    """*size* as :func:`parse` reads it back, in the largest unit that divides it: ``1K``."""
    for unit in ("T", "G", "M", "K"):
        if size and size % _UNITS[unit] == 0:
            return f"{size // _UNITS[unit]}{unit}"
    return str(size)
