"""MAJOR.MINOR.PATCH versions."""

from semver.versions import compare, latest, parse

__all__ = ["compare", "latest", "parse"]
