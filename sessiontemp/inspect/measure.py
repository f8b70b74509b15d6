"""How wide the timeline's text is drawn, so that nothing it lays out overlaps.

An SVG names a font family, not a font: the viewer picks one. The widths
here are DejaVu Sans's, the sans-serif most Linux systems (and librsvg,
and Chromium there) draw with and the widest in common use; Arial,
Helvetica and Liberation Sans draw the same text narrower, so room made
for DejaVu Sans is room enough for them. A fixed width per character
falls short on DejaVu Sans by about a tenth: legend entries would run into
each other, and lane names into their pids.
"""

from __future__ import annotations

import unicodedata
from typing import Final

__all__ = ["fit", "text_width", "wrap"]

# Advance widths of DejaVu Sans Book, in ems, for printable ASCII (its hmtx table,
# 2048 units to the em), in code point order from the space.
_ASCII: Final = (
    0.318, 0.401, 0.460, 0.838, 0.636, 0.950, 0.780, 0.275, 0.390, 0.390, 0.500, 0.838,
    0.318, 0.361, 0.318, 0.337, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636, 0.636,
    0.636, 0.636, 0.337, 0.337, 0.838, 0.838, 0.838, 0.531, 1.000, 0.684, 0.686, 0.698,
    0.770, 0.632, 0.575, 0.775, 0.752, 0.295, 0.295, 0.656, 0.557, 0.863, 0.748, 0.787,
    0.603, 0.787, 0.695, 0.635, 0.611, 0.732, 0.684, 0.989, 0.685, 0.611, 0.685, 0.390,
    0.337, 0.390, 0.838, 0.500, 0.500, 0.613, 0.635, 0.550, 0.635, 0.615, 0.352, 0.635,
    0.634, 0.278, 0.278, 0.579, 0.278, 0.974, 0.634, 0.635, 0.635, 0.635, 0.411, 0.521,
    0.392, 0.634, 0.592, 0.818, 0.592, 0.592, 0.525, 0.636, 0.337, 0.636, 0.838,
)
_OTHER: Final = 0.8  # a letter outside ASCII (accented Latin, Greek, Cyrillic), at most
_WIDE: Final = 1.0  # a CJK character, a full-width form, the ellipsis
ELLIPSIS: Final = "…"


def _em(char: str) -> float:
    code = ord(char)
    if 0x20 <= code < 0x7F:
        return _ASCII[code - 0x20]
    if unicodedata.combining(char):
        return 0.0
    return _WIDE if unicodedata.east_asian_width(char) in "WF" or char == ELLIPSIS else _OTHER


def text_width(text: str, size: float = 11.0) -> float:
    """The width in pixels of *text* drawn at *size* px."""
    return size * sum(map(_em, text))


def fit(text: str, px: float, size: float = 11.0) -> str:
    """*text* cut to at most *px* pixels wide at *size* px, an ellipsis ending it when cut
    (empty when not even the ellipsis fits)."""
    if text_width(text, size) <= px:
        return text
    room = px - text_width(ELLIPSIS, size)
    if room < 0:
        return ""
    kept, used = [], 0.0
    for char in text:
        used += text_width(char, size)
        if used > room:
            break
        kept.append(char)
    return "".join(kept) + ELLIPSIS


def wrap(text: str, px: float, size: float = 11.0) -> list[str]:
    """*text* in lines at most *px* pixels wide at *size* px, broken between words (a
    word wider than a line is cut to fit, see :func:`fit`)."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        candidate = f"{line} {word}" if line else word
        if text_width(candidate, size) <= px:
            line = candidate
            continue
        if line:
            lines.append(line)
        line = word if text_width(word, size) <= px else fit(word, px, size)
    if line:
        lines.append(line)
    return lines
