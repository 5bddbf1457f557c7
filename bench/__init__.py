"""Benchmarks: scripts that print tables with medians and ratios against baselines run alongside."""
