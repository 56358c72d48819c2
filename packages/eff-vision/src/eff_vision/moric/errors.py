"""The error every malformed MoRIC stream raises (its own module: the contour coding, the container
and the codec all raise it, and :mod:`eff_vision.moric.bitstream` re-exports it)."""

from __future__ import annotations

__all__ = ["MoRICDecodeError"]


class MoRICDecodeError(ValueError):
    """A MoRIC stream is truncated, corrupt or otherwise malformed (the message names the part)."""
