"""Benchmarks: measured side by side in one run, reported as ratios (the machines are shared and noisy)."""
