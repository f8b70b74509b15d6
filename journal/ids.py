"""The identifiers events carry: their one canonical form each, and how new ones are made.

An id read from a journal ends up in file names under the root, so nothing
but the canonical form is ever accepted: a forged or torn id such as
``../../etc`` must be refused when its record is decoded, long before any
path is built from it.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable
from typing import Final

__all__ = [
    "ARTIFACT",
    "ARTIFACT_LABEL",
    "GENERATION",
    "LEASE",
    "MANAGER",
    "RECOVERY",
    "SESSION",
    "SHA256",
    "is_generation",
    "new_artifact",
    "new_generation",
    "new_lease",
    "new_manager",
    "new_recovery",
]

# A manager: a uuid4 in 32 lower-case hex digits.
MANAGER: Final = re.compile(r"[0-9a-f]{32}")
# A generation: 80 random bits in lower-case base32 (16 characters); lower
# case keeps it one name on case-insensitive file systems.
GENERATION: Final = re.compile(r"[a-z2-7]{16}")
# A lease or a recovery pass: 64 random bits in lower-case hex.
LEASE: Final = re.compile(r"[0-9a-f]{16}")
RECOVERY: Final = LEASE

# A session's name, chosen by the caller: 1-64 characters that are safe in a
# file name on every file system, never "." or "..".
SESSION: Final = re.compile(r"(?!\.\.?\Z)[A-Za-z0-9._-]{1,64}")
# An artifact: 64 random bits in lower-case hex, like a lease.
ARTIFACT: Final = LEASE
# An artifact's label, part of its file name: 1-80 safe ASCII characters, the
# first a letter or digit (no hidden file, no "..", no option-like "-x").
ARTIFACT_LABEL: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
# A SHA-256 digest in lower-case hex.
SHA256: Final = re.compile(r"[0-9a-f]{64}")

is_generation: Final[Callable[[str], object]] = GENERATION.fullmatch


def new_manager() -> str:
    """``uuid.uuid4().hex``, made as uuid4 makes it without importing uuid for it (one per manager).

    The uuid and secrets modules are left out of the start of every
    process: both read os.urandom, as these do.
    """
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # the RFC 4122 variant
    return raw.hex()


def new_generation() -> str:
    """An unpredictable generation id: nobody can guess the next directory's name."""
    return base64.b32encode(os.urandom(10)).decode("ascii").lower()


def new_lease() -> str:
    # secrets.token_hex(8), without its three Python calls: one per lease.
    return os.urandom(8).hex()


def new_artifact() -> str:
    return os.urandom(8).hex()


def new_recovery() -> str:
    return os.urandom(8).hex()
