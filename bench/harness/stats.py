"""The statistics the benchmark commands report."""

from __future__ import annotations


def percentile(sorted_values: list[float], p: int) -> float:
    """Nearest-rank percentile of an ascending list."""
    rank = max(1, -(-p * len(sorted_values) // 100))
    return sorted_values[min(rank, len(sorted_values)) - 1]
