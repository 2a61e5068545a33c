"""Vectors sent to PostgreSQL as a binary ``real[]`` (float4[]), built by numpy.

A consolidation batch sends one 384-float vector per fact. As a Python list
psycopg writes it as text, element by element (a repr and a quoting check
per float): ~10 ms for 12 facts, more than the database spends on planning
them. The binary array format (header, then a length and a big-endian
float4 per element) is one numpy cast. The server reads the same float4
values: a float32 vector arrives bit for bit.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
from psycopg.adapt import Dumper
from psycopg.pq import Format

FLOAT4_OID = 700
FLOAT4_ARRAY_OID = 1021


class Float4Matrix:
    """Rows of floats (vectors of one dimension) to be sent as a two-dimensional binary ``real[]``.

    Args:
        rows: N vectors of D floats each (lists, tuples or numpy arrays).

    Raises:
        ValueError: the rows are not all of one length (or hold a value that is not a number).
    """

    def __init__(self, rows: Sequence[Sequence[float]]) -> None:
        self.values = np.asarray(rows, dtype=np.float32)
        if self.values.ndim != 2:
            raise ValueError(f"vectors: need N rows of one dimension, got an array of shape {self.values.shape}")


class Float4MatrixDumper(Dumper):
    """psycopg dumper of ``Float4Matrix``: PostgreSQL's binary array format, float4 elements, no nulls."""

    format = Format.BINARY
    oid = FLOAT4_ARRAY_OID

    def dump(self, obj: Float4Matrix) -> bytes:
        """The binary ``real[]`` of ``obj``: ndim 2, no null bitmap, element oid float4, then (length 4, value) pairs."""
        rows, dimension = obj.values.shape
        header = struct.pack(">iiIiiii", 2, 0, FLOAT4_OID, rows, 1, dimension, 1)
        body = np.empty((rows * dimension, 2), dtype=">i4")
        body[:, 0] = 4
        body[:, 1] = obj.values.astype(">f4").reshape(-1).view(">i4")
        return header + body.tobytes()
