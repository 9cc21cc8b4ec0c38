"""On-policy distillation against a real `flashroll serve` teacher and the
fake trainer API."""
import subprocess

import numpy as np
import pytest

from conftest import DEFAULT_MODEL, MOE_MODEL
from fake_trainer_api import FakeTrainerApi
from flashroll.trainers import distill, loop
from test_trainer_loop import TEMPERATURE, argv, make_groups, read_log


@pytest.fixture
def teacher(flashroll_bin, request):
    """(url, name) of `flashroll serve` on request.param's model."""
    proc = subprocess.Popen([flashroll_bin, "serve", "--model", request.param, "--port", "0", "--threads", "1",
                             "--kv-memory", "64M"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()  # "serving NAME on URL"
        assert line.startswith("serving "), line
        _, name, _, url = line.split()
        yield url, name
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("teacher", [DEFAULT_MODEL], indirect=True)
def test_teacher_rows_are_log_softmax_rows(teacher):
    url, name = teacher
    rows = distill.Teacher(url, name).score([5, 6, 7], [8, 9, 10], TEMPERATURE, 2487)
    assert rows.shape == (3, 2487)
    assert np.allclose(np.exp(rows).sum(1), 1, atol=1e-4)
    with pytest.raises(distill.TeacherError, match="expected 3 rows x 100"):
        distill.Teacher(url, name).score([5, 6, 7], [8, 9, 10], TEMPERATURE, 100)
    with pytest.raises(distill.TeacherError, match="HTTP 404"):
        distill.Teacher(url, "no-such-model").score([5], [8], TEMPERATURE, 2487)


@pytest.mark.parametrize("teacher", [DEFAULT_MODEL, MOE_MODEL], indirect=True)
def test_distill_steps(tmp_path, teacher):
    url, name = teacher
    with FakeTrainerApi(make_groups(2)) as api:
        args = argv(api, tmp_path, 1, "--teacher-url", url, "--teacher-model", name, algorithm="distill")
        assert loop.main(distill.Distill, "test", distill.add_flags, args) == 0
    assert api.weights == [("v000001", 1)]
    (record,) = read_log(tmp_path)
    print(f"teacher {name}: reverse KL {record['reverse_kl']:.3g}")
    if name == "default":  # the teacher is the student's initial model: KL only from bf16 KV rounding
        assert record["reverse_kl"] < 1e-3
    else:
        assert record["reverse_kl"] > 0.01
    assert record["loss"] == pytest.approx(record["reverse_kl"], rel=1e-5)
