"""Microbenchmarks that measure a cluster and write a hardware profile (``autopar profile``).

The benchmark modules import torch (the ``profile`` extra); the profile they produce follows the
torch-free schema in ``search`` (:class:`search.HardwareProfile`), which the cost model reads. Each
section (matmul, collectives, host links, NVMe, CPU Adam) is a :class:`ProfileSection` registered once
in :data:`PROFILE_SECTIONS`, which says the profile fields it fills.
"""

from profiler._errors import ProfilerUnavailable
from profiler._run import ProfileRun, run_profile
from profiler._sections import (
    PROFILE_SECTIONS,
    SECTIONS,
    Measured,
    ProfileSection,
    Section,
    SectionContext,
    profile_section,
)

__all__ = [
    "PROFILE_SECTIONS",
    "SECTIONS",
    "Measured",
    "ProfileRun",
    "ProfileSection",
    "ProfilerUnavailable",
    "Section",
    "SectionContext",
    "profile_section",
    "run_profile",
]
