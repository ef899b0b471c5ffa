"""Benchmarks (not timed tests): ``python -m bench`` runs them all and prints ratios measured in one run."""
