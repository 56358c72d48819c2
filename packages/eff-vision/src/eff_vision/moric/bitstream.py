"""MoRIC's container format (our design; spec "The bitstream (required)").

Every rate MoRIC reports is computed from ``len(bytes)`` of this container:

    header   = b"MRIC" | version (1 B) | kind (1 B) | flags (1 B) | H | W | N | n_sections  (varints)
               | CRC32 of the header bytes (4 B)
    section  = tag (1 B) | index (varint) | length (varint) | payload | CRC32 of the section (4 B)

``kind`` 0 is a contour stream (``ChainCoder``), 1 an image stream (``MoRIC``). Tags: ``CONTOURS``
(the partition or the single-object mask), ``MODULATOR``, ``REGION_PARAMS`` r (quantised ARM and
synthesis parameters with their step indices) and ``REGION_LATENTS`` r. Parsing checks the magic,
version, every CRC, every length, and that no byte trails the last section; any failure raises
:class:`MoRICDecodeError` (a ``ValueError``) naming the part that failed — never an ``IndexError``.
``bits_by_part()`` attributes every byte (framing included) to latents / params / modulator /
contours / header, so the parts sum exactly to 8·``len(bytes)``.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np

from eff_vision.moric.contours import decode_partition_payload
from eff_vision.moric.errors import MoRICDecodeError

__all__ = [
    "FLAG_MODULATOR",
    "FLAG_SINGLE",
    "MAGIC",
    "VERSION",
    "Bitstream",
    "MoRICDecodeError",
    "Section",
    "Tag",
    "coded_region_pixels",
    "read_varint",
    "write_varint",
]

MAGIC = b"MRIC"
VERSION = 1
#: ``flags`` of an image stream: it has a ``MODULATOR`` section / it codes a single object
FLAG_MODULATOR, FLAG_SINGLE = 1, 2


class Tag:
    """Section tags and, per tag, its name and the part of ``bits_by_part`` it counts towards."""

    CONTOURS = 1
    MODULATOR = 2
    REGION_PARAMS = 3
    REGION_LATENTS = 4
    NAMES: ClassVar[dict[int, str]] = {
        1: "CONTOURS",
        2: "MODULATOR",
        3: "REGION_PARAMS",
        4: "REGION_LATENTS",
    }
    PART: ClassVar[dict[int, str]] = {1: "contours", 2: "modulator", 3: "params", 4: "latents"}


def write_varint(value: int) -> bytes:
    if value < 0:
        raise ValueError(f"varints are non-negative, got {value}")
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_varint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    value, shift = 0, 0
    for _ in range(10):
        if pos >= len(data):
            raise MoRICDecodeError(f"{what}: truncated (varint runs past the end)")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise MoRICDecodeError(f"{what}: malformed varint")


@dataclass
class Section:
    tag: int
    index: int
    payload: bytes

    @property
    def name(self) -> str:
        base = Tag.NAMES.get(self.tag, f"tag {self.tag}")
        return (
            f"{base} {self.index}" if self.tag in (Tag.REGION_PARAMS, Tag.REGION_LATENTS) else base
        )

    def to_bytes(self) -> bytes:
        body = (
            bytes([self.tag])
            + write_varint(self.index)
            + write_varint(len(self.payload))
            + self.payload
        )
        return body + zlib.crc32(body).to_bytes(4, "big")


@dataclass
class Bitstream:
    """A parsed or freshly encoded MoRIC stream (``to_bytes`` ↔ ``from_bytes``).

    ``reconstruction`` (image streams from the encoder only, not serialised) is the uint8 image the
    encoder's own decoder path produced; ``region_pixels`` the coded pixel count (single object)."""

    kind: int
    flags: int
    height: int
    width: int
    n_regions: int
    sections: list[Section] = field(default_factory=list)
    reconstruction: np.ndarray | None = None
    region_pixels: int | None = None

    def _header(self) -> bytes:
        head = MAGIC + bytes([VERSION, self.kind, self.flags])
        for v in (self.height, self.width, self.n_regions, len(self.sections)):
            head += write_varint(v)
        return head + zlib.crc32(head).to_bytes(4, "big")

    def to_bytes(self) -> bytes:
        return self._header() + b"".join(s.to_bytes() for s in self.sections)

    def __len__(self) -> int:
        return len(self.to_bytes())

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview) -> Bitstream:
        """Parse and validate (magic, version, CRCs, lengths, no trailing bytes)."""
        if isinstance(data, Bitstream):
            return data
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"data must be bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) < 7 or data[:4] != MAGIC:
            raise MoRICDecodeError("header: not a MoRIC stream (bad magic)")
        if data[4] != VERSION:
            raise MoRICDecodeError(
                f"header: unsupported version {data[4]} (this decoder reads {VERSION})"
            )
        kind, flags = data[5], data[6]
        pos = 7
        fields = []
        for what in ("height", "width", "region count", "section count"):
            v, pos = read_varint(data, pos, f"header {what}")
            fields.append(v)
        if pos + 4 > len(data):
            raise MoRICDecodeError("header: truncated (CRC missing)")
        if zlib.crc32(data[:pos]) != int.from_bytes(data[pos : pos + 4], "big"):
            raise MoRICDecodeError("header: CRC mismatch (corrupt header)")
        pos += 4
        height, width, n_regions, n_sections = fields
        if kind not in (0, 1):
            raise MoRICDecodeError(f"header: unknown stream kind {kind}")
        if not (1 <= height <= 1 << 16 and 1 <= width <= 1 << 16 and 1 <= n_regions <= 255):
            raise MoRICDecodeError(
                f"header: implausible size {height}×{width} with {n_regions} regions"
            )
        if n_sections > 3 + 2 * n_regions:
            raise MoRICDecodeError(f"header: too many sections ({n_sections})")
        sections = []
        for k in range(n_sections):
            start = pos
            if pos >= len(data):
                raise MoRICDecodeError(f"section {k}: truncated (missing)")
            tag = data[pos]
            pos += 1
            name = Tag.NAMES.get(tag)
            if name is None:
                raise MoRICDecodeError(f"section {k}: unknown tag {tag}")
            index, pos = read_varint(data, pos, f"section {name}")
            length, pos = read_varint(data, pos, f"section {name}")
            end = pos + length
            if end + 4 > len(data):
                raise MoRICDecodeError(
                    f"section {name} {index}: truncated ({len(data) - pos} of {length + 4} bytes)"
                )
            if zlib.crc32(data[start:end]) != int.from_bytes(data[end : end + 4], "big"):
                raise MoRICDecodeError(f"section {name} {index}: CRC mismatch (corrupt payload)")
            sections.append(Section(tag, index, data[pos:end]))
            pos = end + 4
        if pos != len(data):
            raise MoRICDecodeError(
                f"stream: {len(data) - pos} trailing bytes after the last section"
            )
        return cls(kind, flags, height, width, n_regions, sections)

    def section(self, tag: int, index: int = 0) -> Section:
        for s in self.sections:
            if s.tag == tag and s.index == index:
                return s
        name = Tag.NAMES.get(tag, str(tag))
        raise MoRICDecodeError(f"section {name} {index}: missing from the stream")

    def bits_by_part(self) -> dict[str, int]:
        """Bits per part from the section sizes (framing included); sums to 8·len(bytes)."""
        parts = {
            "latents": 0,
            "params": 0,
            "modulator": 0,
            "contours": 0,
            "header": 8 * len(self._header()),
        }
        for s in self.sections:
            parts[Tag.PART[s.tag]] += 8 * len(s.to_bytes())
        return parts

    def bpp(self, normalize: Literal["image", "region"] = "image") -> float:
        """8·len(bytes) / (H·W), or / |coded region| with ``normalize="region"``."""
        bits = 8 * len(self.to_bytes())
        if normalize == "image":
            return bits / (self.height * self.width)
        if normalize == "region":
            if self.region_pixels is None:
                self.region_pixels = coded_region_pixels(self)
            return bits / self.region_pixels
        raise ValueError(f"normalize must be one of ['image', 'region'], got {normalize!r}")


def coded_region_pixels(bs: Bitstream) -> int:
    """Pixels of the coded region(s) of an image stream (decodes the contours only)."""
    if bs.kind != 1:
        raise MoRICDecodeError("header: not an image stream")
    single = bool(bs.flags & FLAG_SINGLE)
    labels = decode_partition_payload(
        bs.section(Tag.CONTOURS).payload, bs.height, bs.width, bs.n_regions, not single
    )
    ids = {s.index for s in bs.sections if s.tag == Tag.REGION_PARAMS}
    return int(np.isin(labels, list(ids)).sum())
