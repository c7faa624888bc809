"""The profiler's own exception: a benchmark that cannot run on this machine."""

from __future__ import annotations

from search import AutoparError


class ProfilerUnavailable(AutoparError):
    """A benchmark cannot run here.

    The message names what is missing (a CUDA GPU, O_DIRECT support, a writable directory,
    free space, ...) and what to do about it, e.g. ``NVMe benchmark: /mnt/nvme is not
    writable (Permission denied); give --nvme-path a directory on the NVMe you can write to``.
    Callers skip the benchmark and keep the rest of the profile.
    """
