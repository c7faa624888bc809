"""Microbenchmarks that measure a cluster and write a hardware profile (``autopar profile``).

The benchmark modules import torch (the ``profile`` extra); the profile they produce follows the
torch-free schema in ``search`` (:class:`search.HardwareProfile`), which the cost model reads.
"""

from profiler._errors import ProfilerUnavailable
from profiler._run import SECTIONS, ProfileRun, run_profile

__all__ = ["SECTIONS", "ProfileRun", "ProfilerUnavailable", "run_profile"]
