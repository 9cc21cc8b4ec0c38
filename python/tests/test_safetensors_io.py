import json
import struct

import pytest
import torch

from conftest import DEFAULT_MODEL
from flashroll import safetensors_io


def test_round_trip_bf16_f16_f32_bit_exact(tmp_path):
    tensors = {"b.bf16": torch.randn(3, 5).to(torch.bfloat16), "a.f32": torch.randn(7),
               "c.f16": torch.randn(2, 2, 2).to(torch.float16), "d.empty": torch.zeros(0, 4)}
    path = tmp_path / "t.safetensors"
    safetensors_io.save(path, tensors, {"format": "pt"})
    back = safetensors_io.load(path)
    assert sorted(back) == sorted(tensors)
    for name, t in tensors.items():
        assert back[name].dtype == t.dtype and back[name].shape == t.shape, name
        assert torch.equal(back[name], t), name


def test_layout_sorted_names_aligned_padded_header(tmp_path):
    path = tmp_path / "t.safetensors"
    safetensors_io.save(path, {"z": torch.ones(3), "a": torch.ones(1).to(torch.bfloat16)}, {"format": "pt"})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert (8 + n) % 8 == 0
    header_text = raw[8:8 + n].decode()
    assert header_text == header_text.rstrip() + " " * (len(header_text) - len(header_text.rstrip()))
    header = json.loads(header_text)
    assert header["__metadata__"] == {"format": "pt"}
    assert header["a"] == {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}
    assert header["z"] == {"dtype": "F32", "shape": [3], "data_offsets": [2, 14]}
    assert len(raw) == 8 + n + 14


def test_rewriting_the_default_model_keeps_its_header(tmp_path):
    src = f"{DEFAULT_MODEL}/model.safetensors"
    out = tmp_path / "model.safetensors"
    header, metadata, _ = safetensors_io.read_header(src)
    safetensors_io.save(out, safetensors_io.load(src), metadata)
    assert safetensors_io.read_header(out)[:2] == (header, metadata)
    assert out.read_bytes() == open(src, "rb").read()


def test_malformed_file_names_the_tensor(tmp_path):
    path = tmp_path / "bad.safetensors"
    header = json.dumps({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    with pytest.raises(safetensors_io.SafetensorsError, match="tensor w: data_offsets 0..8"):
        safetensors_io.load(path)
    header = json.dumps({"q": {"dtype": "I8", "shape": [1], "data_offsets": [0, 1]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0")
    with pytest.raises(safetensors_io.SafetensorsError, match="tensor q: unsupported dtype 'I8'"):
        safetensors_io.read_header(path)
