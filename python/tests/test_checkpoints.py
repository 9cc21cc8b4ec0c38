import hashlib
import json
import os

import pytest
import torch

from conftest import DEFAULT_MODEL
from flashroll import checkpoints, safetensors_io
from flashroll.model import load_model


def fake_checkpoint(root, name, files=checkpoints.FILES):
    os.makedirs(root / name)
    for f in files:
        (root / name / f).write_text("{}")


def test_latest_is_the_highest_complete_version(tmp_path):
    assert checkpoints.latest(tmp_path / "missing") is None
    fake_checkpoint(tmp_path, "v000001")
    fake_checkpoint(tmp_path, "v000002")
    fake_checkpoint(tmp_path, "v000003", files=("config.json",))  # cut short
    fake_checkpoint(tmp_path, ".v000004.tmp-123")                 # never renamed
    fake_checkpoint(tmp_path, "step-9")                           # not a version
    assert checkpoints.versions(tmp_path) == [1, 2, 3]
    assert checkpoints.latest(tmp_path) == (2, str(tmp_path / "v000002"))


def test_write_is_atomic_and_in_the_engine_layout(tmp_path):
    model = load_model(DEFAULT_MODEL)
    step = {"trained_at_version": 0, "groups": [4, 7], "groups_trained": 2}
    name = checkpoints.write(tmp_path, 1, model, DEFAULT_MODEL, {"step": 1, "version": 1}, step)
    assert name == "v000001"
    assert sorted(os.listdir(tmp_path)) == ["v000001"]  # the temp directory was renamed
    assert sorted(os.listdir(tmp_path / name)) == sorted(checkpoints.FILES + ("step_groups.json",))
    assert json.load(open(tmp_path / name / "step_groups.json")) == {
        "version": 1, "trained_at_version": 0, "groups": [4, 7], "groups_trained": 2}
    assert safetensors_io.read_header(tmp_path / name / "model.safetensors")[:2] == \
        safetensors_io.read_header(f"{DEFAULT_MODEL}/model.safetensors")[:2]
    assert checkpoints.load_state(tmp_path / name) == {"step": 1, "version": 1}
    with pytest.raises(FileExistsError, match="v000001 already exists"):
        checkpoints.write(tmp_path, 1, model, DEFAULT_MODEL, {}, step)
    assert checkpoints.version_dir(1234567) == "v1234567"
    assert torch.equal(load_model(tmp_path / name).model.norm.weight, model.model.norm.weight)


def test_the_manifest_lists_every_tensor_with_the_sha256_of_its_stored_bytes(tmp_path):
    model = load_model(DEFAULT_MODEL)
    name = checkpoints.write(tmp_path, 1, model, DEFAULT_MODEL, {}, {"trained_at_version": 0, "groups": [],
                                                                     "groups_trained": 0})
    weights = tmp_path / name / "model.safetensors"
    header, _, start = safetensors_io.read_header(weights)
    data = weights.read_bytes()[start:]
    manifest = json.load(open(tmp_path / name / "manifest.json"))
    assert sorted(manifest) == ["tensors"] and sorted(manifest["tensors"]) == sorted(header)
    for tensor, info in header.items():
        begin, end = info["data_offsets"]
        assert manifest["tensors"][tensor] == {"dtype": info["dtype"], "shape": info["shape"], "bytes": end - begin,
                                               "sha256": hashlib.sha256(data[begin:end]).hexdigest()}


def test_prune_keeps_the_newest_versions(tmp_path):
    root = str(tmp_path)
    for v in (1, 2, 3, 4, 5):
        os.makedirs(os.path.join(root, checkpoints.version_dir(v)))
    os.makedirs(os.path.join(root, ".v000006.tmp-1"))
    assert checkpoints.prune(root, 2) == [1, 2, 3]
    assert checkpoints.versions(root) == [4, 5]
    assert os.path.isdir(os.path.join(root, ".v000006.tmp-1")), "a write in progress is not touched"
    assert checkpoints.prune(root, 5) == []
    with pytest.raises(ValueError):
        checkpoints.prune(root, 0)
