"""A farm's identity, so that several farms share one host without touching each other.

A farm is its Redis: every process of it reaches the same URL (and database). The farm id is a short
stable hash of that URL with any password left out, so every worker computes it without a Redis round
trip. It names the farm's workers, its default scratch directory and labels its sandboxes; the orphan
sweep stops only sandboxes carrying its own farm's label.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

DEFAULT_WORKDIR = "/tmp/rollout-farm"
FARM_LABEL = "farm_id"
"""The sandbox label naming the farm that started it (handlers/sandboxing.py, tasks/orphans.py)."""

_CREDENTIALS = re.compile(r"(?P<scheme>[a-z+]+://)(?P<user>[^:@/;]*)(?::(?P<password>[^@/;]*))?@")


def mask_url(url: str) -> str:
    """The URL with any password replaced by `***`, for messages and logs."""

    def replace(m: re.Match[str]) -> str:
        if m.group("password") is None:
            return m.group(0)
        return f"{m.group('scheme')}{m.group('user')}:***@"

    return _CREDENTIALS.sub(replace, url)


def farm_id(redis_url: str) -> str:
    """Eight hex digits naming the farm that lives in this Redis (URL + database, password ignored)."""
    canonical = mask_url(redis_url.strip()).rstrip("/")
    if re.fullmatch(r"rediss?://[^/]+", canonical):
        canonical += "/0"  # redis://host:6379 and redis://host:6379/0 are the same database
    return hashlib.sha256(canonical.encode()).hexdigest()[:8]


def farm_workdir(redis_url: str, base: str = DEFAULT_WORKDIR) -> Path:
    """The default scratch directory of this farm: one subdirectory of `base` per farm."""
    return Path(base) / farm_id(redis_url)


def current_farm_id() -> str:
    """The id of the farm this process belongs to (from FARM_REDIS_URL)."""
    from farm.settings import get_settings

    return farm_id(get_settings().redis_url)


__all__ = ["DEFAULT_WORKDIR", "FARM_LABEL", "current_farm_id", "farm_id", "farm_workdir", "mask_url"]
