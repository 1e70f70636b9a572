"""Kubernetes quantities ("500m", "8Gi", "1Pi", "1e3"), parsed the way the API server
does: one parser for the product (quotas, capacity, usage) and the stand-ins that play
the API server in the tests, so neither accepts what the other refuses; and the
CloudSpace numbers (cores, MiB) read from and written as quantities.

The grammar is the API server's: a signed decimal number, then a binary suffix
(Ki Mi Gi Ti Pi Ei), a decimal one (n u m k M G T P E) or a decimal exponent (e3, E-2).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

BINARY = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
DECIMAL = ("n", "u", "m", "k", "M", "G", "T", "P", "E")
SUFFIXES: dict[str, Decimal] = {
    "": Decimal(1),
    **{suffix: Decimal(2) ** (10 * power) for power, suffix in enumerate(BINARY, start=1)},
    **{
        suffix: Decimal(10) ** exponent
        for suffix, exponent in zip(DECIMAL, (-9, -6, -3, 3, 6, 9, 12, 15, 18), strict=True)
    },
}
PATTERN = re.compile(
    r"^([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))"
    rf"(?:([eE][+-]?[0-9]+)|({'|'.join(BINARY + DECIMAL)}))?$"
)


def parse_quantity(text: object) -> Decimal:
    """A quantity as a number; ValueError (naming the text, cut short) for anything else."""
    match = PATTERN.match(str(text).strip())
    if match is None:
        raise ValueError(f"not a quantity: {str(text)[:40]!r}")
    try:
        if match[2]:
            return Decimal(match[1] + match[2])
        return Decimal(match[1]) * SUFFIXES[match[3] or ""]
    except InvalidOperation as error:  # an exponent beyond what a Decimal holds
        raise ValueError(f"not a quantity: {str(text)[:40]!r}") from error


def cpu_text(cores: float) -> str:
    return f"{max(0, round(cores * 1000))}m"


def memory_text(mib: float) -> str:
    return f"{max(0, math.floor(mib))}Mi"


def cores_of(text: object) -> float:
    return float(parse_quantity(text))


def mib_of(text: object) -> float:
    return float(parse_quantity(text) / SUFFIXES["Mi"])
