import json
import struct

import numpy as np
import pytest

from fake_trainer_api import encode_frtb
from flashroll import batch_format

BATCH = {"lease": "9f2c" * 8, "expires_at_ms": 1700000010000, "groups": [
    {"group_id": 12, "task_id": 3, "task_key": "arithmetic-17", "effort": 100, "samples": [
        {"sample_id": 1201, "tokens": [5, 6, 7], "logprobs": [0.0, -0.5, -1.25], "versions": [-1, 0, 1],
         "loss_mask": [0, 1, 0], "prompt_tokens": 1, "reward": 0.8, "reward_parts": {"verifier": 1.0, "length": -0.2},
         "advantage": 0.35, "reasoning_tokens": 2, "status": "completed", "success": True},
        {"sample_id": 1202, "tokens": [5, 9], "logprobs": [0.0, -2.0], "versions": [-1, 1], "loss_mask": [0, 1],
         "prompt_tokens": 1, "reward": 0, "reward_parts": {}, "advantage": -0.35, "reasoning_tokens": 1,
         "status": "failed", "success": False}]}]}


def as_plain(batch):
    return [(g.group_id, g.task_key, g.effort, s.sample_id, s.tokens.tolist(), s.logprobs.tolist(),
             s.versions.tolist(), s.loss_mask.tolist(), s.prompt_tokens, s.reward, s.reward_parts, s.advantage,
             s.reasoning_tokens, s.status, s.success) for g, s in batch.samples()]


def test_json_form():
    b = batch_format.decode_json(json.dumps(BATCH))
    assert (b.lease, b.expires_at_ms) == ("9f2c" * 8, 1700000010000)
    s = b.groups[0].samples[0]
    assert s.tokens.dtype == np.int32 and s.logprobs.dtype == np.float32 and s.loss_mask.dtype == np.uint8
    assert as_plain(b)[0] == (12, "arithmetic-17", 100, 1201, [5, 6, 7], [0.0, -0.5, -1.25], [-1, 0, 1], [0, 1, 0],
                              1, 0.8, {"verifier": 1.0, "length": -0.2}, 0.35, 2, "completed", True)


def test_hand_built_binary_buffer():
    body = encode_frtb(BATCH)
    # Header, then metadata padded to 4 bytes; the first block: n=3, 3 int32,
    # 3 float32, 3 int32, 3 bytes and one padding byte.
    magic, version, m, count = struct.unpack_from("<4sIII", body)
    assert (magic, version, count, m % 4) == (b"FRTB", 1, 2, 0)
    first = 16 + m
    assert struct.unpack_from("<I3i3f3i3B", body, first) == (3, 5, 6, 7, 0.0, -0.5, -1.25, -1, 0, 1, 0, 1, 0)
    assert len(body) == first + (4 + 36 + 4) + (4 + 24 + 4)
    assert as_plain(batch_format.decode_binary(body)) == as_plain(batch_format.decode_json(json.dumps(BATCH)))


def test_binary_errors_name_the_offset():
    body = encode_frtb(BATCH)
    with pytest.raises(batch_format.BatchFormatError, match="magic b'FRTX' at offset 0"):
        batch_format.decode_binary(b"FRTX" + body[4:])
    with pytest.raises(batch_format.BatchFormatError, match="FRTB version 2 at offset 4"):
        batch_format.decode_binary(body[:4] + struct.pack("<I", 2) + body[8:])
    with pytest.raises(batch_format.BatchFormatError, match=r"samples\[1\].versions: 2 values at offset"):
        batch_format.decode_binary(body[:-8])
    with pytest.raises(batch_format.BatchFormatError, match="4 bytes left over"):
        batch_format.decode_binary(body + b"\0" * 4)
    with pytest.raises(batch_format.BatchFormatError, match="header at offset 12 says 3 samples"):
        batch_format.decode_binary(body[:12] + struct.pack("<I", 3) + body[16:])


def test_json_errors_name_the_field():
    bad = json.loads(json.dumps(BATCH))
    bad["groups"][0]["samples"][1]["versions"] = [1]
    with pytest.raises(batch_format.BatchFormatError, match=r"batch.groups\[0\].samples\[1\]: per-token arrays differ"):
        batch_format.decode_json(json.dumps(bad))
    bad = json.loads(json.dumps(BATCH))
    del bad["groups"][0]["samples"][0]["advantage"]
    with pytest.raises(batch_format.BatchFormatError, match=r"batch.groups\[0\].samples\[0\].advantage: missing"):
        batch_format.decode_json(json.dumps(bad))
    bad = json.loads(json.dumps(BATCH))
    bad["groups"][0]["effort"] = "high"
    with pytest.raises(batch_format.BatchFormatError, match=r"batch.groups\[0\].effort: expected int, got str"):
        batch_format.decode_json(json.dumps(bad))
