"""The REST facade: management API (ProRL-compatible), task API (POLAR-compatible), metrics."""
