"""Units and byte sizes used across the cost model (SI inside; binary sizes named as such)."""

from __future__ import annotations

GiB = 2**30
"""Gibibyte: GPU memory is binary (an 'A100 80GB' has 80 GiB)."""
TiB = 2**40
"""Tebibyte: host DRAM sizes are binary."""
BYTES_16BIT = 2
"""One bf16/fp16 element: activations, weights and their gradients in mixed precision."""
