"""Text widths read from a TrueType font file, to check a picture's layout as it is drawn.

Reads the three tables an advance width needs (``head`` for the units per
em, ``hhea`` and ``hmtx`` for the widths, ``cmap`` format 4 for the glyph
of a character in the Basic Multilingual Plane); no kerning, which only
ever narrows Latin text.
"""

from __future__ import annotations

import struct
from pathlib import Path

__all__ = ["DEJAVU_SANS", "Font"]

DEJAVU_SANS = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")


class Font:
    """A font file's advance widths."""

    def __init__(self, path: Path) -> None:
        data = path.read_bytes()
        (count,) = struct.unpack_from(">H", data, 4)
        tables = {}
        for i in range(count):
            tag, _, offset, _ = struct.unpack_from(">4sIII", data, 12 + 16 * i)
            tables[tag.decode("latin-1")] = offset
        self.units: int = struct.unpack_from(">H", data, tables["head"] + 18)[0]
        (metrics,) = struct.unpack_from(">H", data, tables["hhea"] + 34)
        self.advances: list[int] = [struct.unpack_from(">H", data, tables["hmtx"] + 4 * i)[0]
                                    for i in range(metrics)]
        self.glyphs = _unicode_map(data, tables["cmap"])

    def width(self, text: str, size: float) -> float:
        """The width of *text* at *size* px (a character the font lacks: its .notdef)."""
        last = len(self.advances) - 1
        return size * sum(self.advances[min(self.glyphs.get(ord(c), 0), last)]
                          for c in text) / self.units


def _unicode_map(data: bytes, cmap: int) -> dict[int, int]:
    """Code point to glyph, from the cmap's Windows Unicode BMP (format 4) subtable."""
    (count,) = struct.unpack_from(">H", data, cmap + 2)
    for i in range(count):
        platform, encoding, offset = struct.unpack_from(">HHI", data, cmap + 4 + 8 * i)
        if (platform, encoding) == (3, 1):
            table = cmap + offset
            break
    else:
        raise ValueError("no Unicode BMP cmap subtable")
    (segments,) = struct.unpack_from(">H", data, table + 6)
    segments //= 2
    ends = struct.unpack_from(f">{segments}H", data, table + 14)
    starts = struct.unpack_from(f">{segments}H", data, table + 16 + 2 * segments)
    deltas = struct.unpack_from(f">{segments}h", data, table + 16 + 4 * segments)
    ranges = table + 16 + 6 * segments
    offsets = struct.unpack_from(f">{segments}H", data, ranges)
    glyphs: dict[int, int] = {}
    for i in range(segments):
        for code in range(starts[i], ends[i] + 1):
            if code == 0xFFFF:
                continue
            if offsets[i] == 0:
                glyph = (code + deltas[i]) & 0xFFFF
            else:
                (glyph,) = struct.unpack_from(
                    ">H", data, ranges + 2 * i + offsets[i] + 2 * (code - starts[i]))
                glyph = (glyph + deltas[i]) & 0xFFFF if glyph else 0
            glyphs[code] = glyph
    return glyphs
