"""The identifiers events carry: their one canonical form each, and how new ones are made.

An id read from a journal ends up in file names under the root, so nothing
but the canonical form is ever accepted: a forged or torn id such as
``../../etc`` must be refused when its record is decoded, long before any
path is built from it.
"""

from __future__ import annotations

import base64
import re
import secrets
import uuid
from collections.abc import Callable
from typing import Final

__all__ = [
    "GENERATION",
    "LEASE",
    "MANAGER",
    "RECOVERY",
    "is_generation",
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

is_generation: Final[Callable[[str], object]] = GENERATION.fullmatch


def new_manager() -> str:
    return uuid.uuid4().hex


def new_generation() -> str:
    """An unpredictable generation id: nobody can guess the next directory's name."""
    return base64.b32encode(secrets.token_bytes(10)).decode("ascii").lower()


def new_lease() -> str:
    return secrets.token_hex(8)


def new_recovery() -> str:
    return secrets.token_hex(8)
