"""A leased batch and its two wire forms (docs/TRAINER_API.md), mirroring
scheduler/batch_format.h: decode_json for format=json, decode_binary for
format=binary (FRTB version 1). Both give the same Batch; a malformed body is
a BatchFormatError naming the field ("batch.groups[0].samples[1].tokens") or
the byte offset at fault.
"""
import json
import struct
from dataclasses import dataclass

import numpy as np

MAGIC = b"FRTB"
VERSION = 1
# The per-token arrays: name, wire dtype (little-endian), in-memory dtype.
PER_TOKEN = (("tokens", "<i4", np.int32), ("logprobs", "<f4", np.float32),
             ("versions", "<i4", np.int32), ("loss_mask", "u1", np.uint8))


class BatchFormatError(ValueError):
    pass


@dataclass
class Sample:
    sample_id: int
    tokens: np.ndarray     # [n] int32, the whole conversation, prompt included
    logprobs: np.ndarray   # [n] float32, the engine's log_softmax(logits / T) of each token; 0 where not sampled
    versions: np.ndarray   # [n] int32, the weight version that sampled each token; -1 where not sampled
    loss_mask: np.ndarray  # [n] uint8, 1 for sampled tokens to train on
    prompt_tokens: int
    reward: float
    reward_parts: dict
    advantage: float
    reasoning_tokens: int
    status: str            # "completed" or "failed"
    success: bool


@dataclass
class Group:
    group_id: int
    task_id: int
    task_key: str
    effort: int
    samples: list


@dataclass
class Batch:
    lease: str
    expires_at_ms: int
    groups: list

    def samples(self):
        """(group, sample) for every sample, groups in order."""
        return [(g, s) for g in self.groups for s in g.samples]


def _field(obj, key, kind, where):
    if not isinstance(obj, dict) or key not in obj:
        raise BatchFormatError(f"{where}.{key}: missing")
    value = obj[key]
    ok = {int: isinstance(value, int) and not isinstance(value, bool),
          float: isinstance(value, (int, float)) and not isinstance(value, bool),
          str: isinstance(value, str), bool: isinstance(value, bool),
          dict: isinstance(value, dict), list: isinstance(value, list)}[kind]
    if not ok:
        raise BatchFormatError(f"{where}.{key}: expected {kind.__name__}, got {type(value).__name__}")
    return value


def _decode(meta, arrays_of):
    """meta: the parsed JSON; arrays_of(sample_json, where) -> the four per-token arrays."""
    if not isinstance(meta, dict):
        raise BatchFormatError(f"batch: expected an object, got {type(meta).__name__}")
    groups = []
    for gi, g in enumerate(_field(meta, "groups", list, "batch")):
        gw = f"batch.groups[{gi}]"
        samples = []
        for si, s in enumerate(_field(g, "samples", list, gw)):
            sw = f"{gw}.samples[{si}]"
            tokens, logprobs, versions, loss_mask = arrays_of(s, sw)
            samples.append(Sample(
                sample_id=_field(s, "sample_id", int, sw), tokens=tokens, logprobs=logprobs,
                versions=versions, loss_mask=loss_mask,
                prompt_tokens=_field(s, "prompt_tokens", int, sw), reward=float(_field(s, "reward", float, sw)),
                reward_parts={k: float(v) for k, v in _field(s, "reward_parts", dict, sw).items()},
                advantage=float(_field(s, "advantage", float, sw)),
                reasoning_tokens=_field(s, "reasoning_tokens", int, sw), status=_field(s, "status", str, sw),
                success=_field(s, "success", bool, sw)))
        groups.append(Group(group_id=_field(g, "group_id", int, gw), task_id=_field(g, "task_id", int, gw),
                            task_key=_field(g, "task_key", str, gw), effort=_field(g, "effort", int, gw),
                            samples=samples))
    return Batch(lease=_field(meta, "lease", str, "batch"),
                 expires_at_ms=_field(meta, "expires_at_ms", int, "batch"), groups=groups)


def decode_json(body):
    """The format=json body (bytes or str) -> Batch."""
    try:
        meta = json.loads(body)
    except ValueError as e:
        raise BatchFormatError(f"batch: not JSON: {e}") from None

    def arrays_of(s, where):
        arrays = []
        for name, _, dtype in PER_TOKEN:
            values = _field(s, name, list, where)
            try:
                arrays.append(np.asarray(values, dtype=dtype))
            except (TypeError, ValueError, OverflowError) as e:
                raise BatchFormatError(f"{where}.{name}: {e}") from None
            if arrays[-1].ndim != 1:
                raise BatchFormatError(f"{where}.{name}: expected a list of numbers")
        if len({len(a) for a in arrays}) != 1:
            raise BatchFormatError(f"{where}: per-token arrays differ in length "
                                   f"({', '.join(f'{p[0]} {len(a)}' for p, a in zip(PER_TOKEN, arrays))})")
        return arrays

    return _decode(meta, arrays_of)


def decode_binary(body):
    """The format=binary (FRTB version 1) body -> Batch; arrays are copies, not views."""
    if len(body) < 16:
        raise BatchFormatError(f"batch: {len(body)} bytes, shorter than the 16-byte FRTB header")
    magic, version, m, count = struct.unpack_from("<4sIII", body, 0)
    if magic != MAGIC:
        raise BatchFormatError(f"batch: magic {magic!r} at offset 0, expected {MAGIC!r}")
    if version != VERSION:
        raise BatchFormatError(f"batch: FRTB version {version} at offset 4, this reader knows {VERSION}")
    if 16 + m > len(body):
        raise BatchFormatError(f"batch: metadata of {m} bytes at offset 16 runs past the body's {len(body)} bytes")
    try:
        meta = json.loads(body[16:16 + m])
    except ValueError as e:
        raise BatchFormatError(f"batch: metadata at offset 16 is not JSON: {e}") from None
    listed = sum(len(g.get("samples", [])) for g in meta.get("groups", []) if isinstance(g, dict))
    if listed != count:
        raise BatchFormatError(f"batch: header at offset 12 says {count} samples, the metadata lists {listed}")
    at = 16 + m

    def arrays_of(s, where):
        nonlocal at
        if at + 4 > len(body):
            raise BatchFormatError(f"{where}: block at offset {at} cut short")
        (n,) = struct.unpack_from("<I", body, at)
        at += 4
        arrays = []
        for name, wire, dtype in PER_TOKEN:
            size = n * np.dtype(wire).itemsize
            if at + size > len(body):
                raise BatchFormatError(f"{where}.{name}: {n} values at offset {at} run past the body's {len(body)} bytes")
            arrays.append(np.frombuffer(body, wire, n, at).astype(dtype))
            at += size
        at += -at % 4
        return arrays

    batch = _decode(meta, arrays_of)
    if at != len(body):
        raise BatchFormatError(f"batch: {len(body) - at} bytes left over after the last block at offset {at}")
    return batch
