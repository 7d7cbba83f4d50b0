"""A small GGUF reader: metadata, tensor index, and tensors of type F32, F16, Q8_0 and Q4_0 as float32 numpy
arrays (dequantized exactly as ggml does: f16 scale times the integer code)."""
from __future__ import annotations

import struct

import numpy as np

F32, F16, Q4_0, Q8_0 = 0, 1, 2, 8
_BLOCK = {F32: (1, 4), F16: (1, 2), Q4_0: (32, 18), Q8_0: (32, 34)}
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class GGUFError(Exception):
    pass


class GGUFFile:
    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            self.buf = f.read()
        self.pos = 0
        if self._take(4) != b"GGUF":
            raise GGUFError(f"{path}: not a GGUF file (bad magic)")
        self.version = self._scalar("<I")
        if self.version not in (2, 3):
            raise GGUFError(f"{path}: GGUF version {self.version} is not supported")
        n_tensors, n_kv = self._scalar("<Q"), self._scalar("<Q")
        self.metadata = {}
        for _ in range(n_kv):
            key = self._string()
            self.metadata[key] = self._value(self._scalar("<I"))
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._string()
            n_dims = self._scalar("<I")
            shape = [self._scalar("<Q") for _ in range(n_dims)]  # ne0 first: ne0 is the contiguous dimension
            ttype = self._scalar("<I")
            offset = self._scalar("<Q")
            self.tensors[name] = (shape, ttype, offset)
        align = int(self.metadata.get("general.alignment", 32))
        self.data_offset = (self.pos + align - 1) // align * align

    def _take(self, n):
        if self.pos + n > len(self.buf):
            raise GGUFError(f"{self.path}: truncated at offset {self.pos}")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def _scalar(self, fmt):
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))[0]

    def _string(self):
        return self._take(self._scalar("<Q")).decode("utf-8", errors="surrogateescape")

    def _value(self, vtype):
        if vtype in _SCALAR:
            return self._scalar(_SCALAR[vtype])
        if vtype == 8:
            return self._string()
        if vtype == 9:
            etype, n = self._scalar("<I"), self._scalar("<Q")
            return [self._value(etype) for _ in range(n)]
        raise GGUFError(f"{self.path}: unknown metadata value type {vtype} at offset {self.pos}")

    def tensor(self, name: str) -> np.ndarray:
        """The tensor as float32 with numpy's shape outermost first (the reverse of GGUF's ne order)."""
        if name not in self.tensors:
            raise GGUFError(f"{self.path}: no tensor {name}")
        shape, ttype, offset = self.tensors[name]
        if ttype not in _BLOCK:
            raise GGUFError(f"{self.path}: {name} has type {ttype}; this reader knows F32, F16, Q8_0 and Q4_0")
        n = int(np.prod(shape))
        elems, nbytes = _BLOCK[ttype]
        start = self.data_offset + offset
        raw = np.frombuffer(self.buf, dtype=np.uint8, count=n // elems * nbytes, offset=start)
        if ttype == F32:
            x = raw.view(np.float32).copy()
        elif ttype == F16:
            x = raw.view(np.float16).astype(np.float32)
        elif ttype == Q8_0:
            b = raw.reshape(-1, 34)
            d = b[:, :2].copy().view(np.float16).astype(np.float32)
            x = (b[:, 2:].view(np.int8).astype(np.float32) * d).reshape(-1)
        else:
            b = raw.reshape(-1, 18)
            d = b[:, :2].copy().view(np.float16).astype(np.float32)
            qs = b[:, 2:]
            codes = np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.float32) - 8.0
            x = (codes * d).reshape(-1)
        return x.reshape(list(reversed(shape)))


def piece_text(tokens, token_types, ids) -> str:
    """SentencePiece detokenization of generated ids (no BOS): byte tokens <0xNN> as bytes, U+2581 as a space;
    control tokens print nothing."""
    out = bytearray()
    for i in ids:
        t = tokens[i]
        if token_types[i] == 3:  # control
            continue
        if token_types[i] == 6 and t.startswith("<0x") and t.endswith(">"):
            out.append(int(t[3:-1], 16))
        else:
            out += t.replace("\u2581", " ").encode("utf-8", errors="surrogateescape")
    return out.decode("utf-8", errors="replace")
