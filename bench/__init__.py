"""Benchmarks: each prints ratios measured in one run and writes bench/results/."""
