"""Which seeds a fuzz test runs: its CI list, or what an environment variable asks for."""
from __future__ import annotations

import os


def seeds_from_env(variable: str, default: list[int]) -> list[int]:
    """``$variable`` as seeds: ``N`` (0..N-1), ``A:B`` (a range) or ``7,42`` (a list); unset or
    empty: ``default``."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    if ":" in text:
        lo, hi = text.split(":")
        return list(range(int(lo), int(hi)))
    if "," in text:
        return [int(s) for s in text.split(",") if s.strip()]
    return list(range(int(text)))
