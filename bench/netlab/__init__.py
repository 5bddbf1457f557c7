"""Farm nodes in their own network namespaces, and the partition scenario `python -m bench.nodes` measures
and tests/nodes/test_partitions.py checks."""
