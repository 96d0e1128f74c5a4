"""Testing helpers for tricomb pipelines: the torch oracle, tolerant comparison, launch counting, and
schedule overrides that force small tiles (to reach every code path on small inputs)."""
from ..runtime.launch import schedule_overrides
from .assertions import assert_matches_torch, mismatches, tolerance
from .launches import LaunchCount, count_launches
from .reference import Reference, reference

__all__ = ["assert_matches_torch", "mismatches", "tolerance", "count_launches", "LaunchCount", "reference",
           "Reference", "schedule_overrides"]
