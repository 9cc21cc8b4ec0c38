"""Reading and writing .safetensors files with the standard library and torch.

Layout: an 8-byte little-endian u64 N, then N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
then the raw little-endian tensor data (offsets relative to its start).
Supported dtypes: BF16, F16, F32.
"""
import hashlib
import json
import struct

import numpy as np
import torch

DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
NAMES = {v: k for k, v in DTYPES.items()}
# The little-endian integer of the same width, through which each dtype's
# bits pass to and from bytes (numpy has no bfloat16).
_BITS = {torch.bfloat16: (torch.int16, "<i2"), torch.float16: (torch.int16, "<i2"),
         torch.float32: (torch.int32, "<i4")}


class SafetensorsError(ValueError):
    """A malformed file; the message names the file and, where known, the tensor."""


def read_header(path):
    """Returns (header dict without "__metadata__", metadata dict, data start offset)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise SafetensorsError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", head)
        raw = f.read(n)
    if len(raw) != n:
        raise SafetensorsError(f"{path}: header of {n} bytes cut short at {len(raw)}")
    try:
        header = json.loads(raw)
    except ValueError as e:
        raise SafetensorsError(f"{path}: header is not JSON: {e}") from None
    metadata = header.pop("__metadata__", {})
    for name, info in header.items():
        if info.get("dtype") not in DTYPES:
            raise SafetensorsError(f"{path}: tensor {name}: unsupported dtype {info.get('dtype')!r} "
                                   f"(supported: {', '.join(DTYPES)})")
    return header, metadata, 8 + n


def load(path):
    """Returns {name: tensor} with each tensor in its stored dtype."""
    header, _, start = read_header(path)
    with open(path, "rb") as f:
        f.seek(start)
        data = f.read()
    tensors = {}
    for name, info in header.items():
        dtype = DTYPES[info["dtype"]]
        shape = info["shape"]
        begin, end = info["data_offsets"]
        count = 1
        for d in shape:
            count *= d
        le = _BITS[dtype][1]
        if end - begin != count * np.dtype(le).itemsize or end > len(data) or begin < 0:
            raise SafetensorsError(f"{path}: tensor {name}: data_offsets {begin}..{end} do not hold "
                                   f"{info['dtype']}{shape} within {len(data)} data bytes")
        bits = np.frombuffer(data, dtype=le, count=count, offset=begin).astype(le[1:])
        tensors[name] = torch.from_numpy(bits).view(dtype).reshape(shape)
    return tensors


def save(path, tensors, metadata=None):
    """Writes {name: tensor} (BF16/F16/F32, stored as given) with names sorted and
    the header padded with spaces so the data starts 8-byte aligned. Returns the
    manifest entries of what it wrote, {name: {"dtype", "shape", "bytes",
    "sha256"}}, the form the engine's manifest.json takes."""
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    chunks = []
    manifest = {}
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        if t.dtype not in NAMES:
            raise SafetensorsError(f"{path}: tensor {name}: unsupported dtype {t.dtype}")
        int_dtype, le = _BITS[t.dtype]
        raw = t.view(int_dtype).numpy().astype(le).tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        manifest[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "bytes": len(raw),
                          "sha256": hashlib.sha256(raw).hexdigest()}
        chunks.append(raw)
        offset += len(raw)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-(8 + len(encoded)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for raw in chunks:
            f.write(raw)
    return manifest
