"""The trainer's checkpoint root: one directory per published weight version.

  ROOT/v000001/  config.json, generation_config.json, model.safetensors
                 (the engine's layout: the source model's tensor names, shapes
                 and dtypes), manifest.json (each tensor's dtype, shape, bytes
                 and sha256, which the engine checks), trainer_state.pt (fp32 master weights,
                 optimizer state, step, version, RNG states, how many
                 groups were trained into these weights) and
                 step_groups.json (the step that made this version, for
                 readers without torch, STEP_FIELDS below)

step_groups.json holds the groups of one step, not every group trained so
far (that list grew with every step; the job's store has it): following
trained_at_version from a version back to 0 gives the steps, and so the
groups, its weights hold.

A version is written into ROOT/.v000001.tmp-PID, every file and the
directory fsync'd, then renamed into place and ROOT fsync'd, so a directory
named vNNNNNN is complete unless someone else put it there; `latest`
also checks for the five files. Version directories are named with at
least six digits (v1000000 follows v999999).
"""
import json
import os
import re
import shutil

import torch

from flashroll import model as model_lib

FILES = ("config.json", "generation_config.json", "model.safetensors", model_lib.MANIFEST, "trainer_state.pt")
STEP_FILE = "step_groups.json"
# version: this checkpoint's; trained_at_version: the version whose weights
# the step started from (its loss was computed with them); groups: the ids
# of the groups the step trained; groups_trained: how many groups these
# weights hold in all (the step's and every earlier one's).
STEP_FIELDS = ("version", "trained_at_version", "groups", "groups_trained")
_NAME = re.compile(r"^v(\d{6,})$")


def version_dir(version):
    """The directory name of `version`, relative to the root: v000001."""
    return f"v{version:06d}"


def versions(root):
    """Every version with a vNNNNNN directory in root, complete or not, ascending."""
    if not os.path.isdir(root):
        return []
    found = (_NAME.match(name) for name in os.listdir(root))
    return sorted(int(m.group(1)) for m in found if m and os.path.isdir(os.path.join(root, m.group(0))))


def is_complete(path):
    return all(os.path.isfile(os.path.join(path, f)) for f in FILES)


def latest(root):
    """(version, path) of the highest complete checkpoint in root, or None."""
    for v in reversed(versions(root)):
        path = os.path.join(root, version_dir(v))
        if is_complete(path):
            return v, path
    return None


def prune(root, keep):
    """Removes all but the newest `keep` version directories (keep >= 1; an
    older version is never needed again: the engine loads the newest, and a
    resumed trainer starts from it). Returns the versions removed."""
    if keep < 1:
        raise ValueError(f"keep {keep}: at least the newest checkpoint stays")
    old = versions(root)[:-keep]
    for v in old:
        shutil.rmtree(os.path.join(root, version_dir(v)))
    return old


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(root, version, model, src_dir, trainer_state, step):
    """Writes checkpoint `version` of `model` (in src_dir's layout) with
    `trainer_state` (a dict for torch.save) and `step` (a dict with
    STEP_FIELDS' trained_at_version, groups and groups_trained) and returns
    its path relative to root. Refuses a version that already has a
    directory."""
    step = {"version": version, **step}
    if tuple(sorted(step)) != tuple(sorted(STEP_FIELDS)):
        raise ValueError(f"checkpoint {version}: step has {sorted(step)}, want {sorted(STEP_FIELDS)}")
    name = version_dir(version)
    final = os.path.join(root, name)
    if os.path.exists(final):
        raise FileExistsError(f"checkpoint {final} already exists: versions are never rewritten")
    os.makedirs(root, exist_ok=True)
    tmp = os.path.join(root, f".{name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model_lib.save_checkpoint(model, src_dir, tmp)
    torch.save(trainer_state, os.path.join(tmp, "trainer_state.pt"))
    with open(os.path.join(tmp, STEP_FILE), "w") as f:
        json.dump({k: step[k] for k in STEP_FIELDS}, f)
    for f in FILES + (STEP_FILE,):
        _fsync(os.path.join(tmp, f))
    _fsync(tmp)
    os.rename(tmp, final)
    _fsync(root)
    return name


def load_state(path):
    """The trainer_state.pt dict of the checkpoint at `path`."""
    return torch.load(os.path.join(path, "trainer_state.pt"))
