"""TrainerClient against a real `flashroll run` job serving the trainer API.

The job's own trainer is a sleep (training.command), so this test is the
only consumer of its groups; the job is terminated at the end (the sleep
ends by itself should the job leave it behind). Needs root: the job's
sandboxes do.
"""
import os
import signal
import socket
import sqlite3
import subprocess
import time
import warnings

import pytest

from conftest import DEFAULT_MODEL, REPO
from fake_trainer_api import FakeTrainerApi
from flashroll.client import ApiError, LeaseExpired, QueueClosed, TrainerClient, UnknownLease
from test_batch_format import as_plain

LEASE_TIMEOUT_S = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def job(flashroll_bin, tmp_path):
    """A TrainerClient for a running job with two groups of two samples."""
    if os.geteuid() != 0:
        pytest.skip("flashroll run needs root for its sandboxes")
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    token.chmod(0o600)
    port = free_port()
    config = tmp_path / "job.yaml"
    config.write_text(f"""kind: rl_job
name: client-test
store: {tmp_path}/store.db
model: {{path: {DEFAULT_MODEL}, threads: 1}}
tasks: {{families: [arithmetic], count: 2, seed: 1}}
rollout: {{max_tokens: 400, max_turns: 2, efforts: [100]}}
scheduler: {{group_size: 2, max_in_flight: 2, max_per_task: 2, batch_groups: 1}}
training: {{steps: 1, checkpoint_dir: {tmp_path}/ckpt, command: [/bin/sh, -c, "exec sleep 60", trainer]}}
trainer_api: {{listen: "127.0.0.1:{port}", token_file: {token}, lease_timeout: {LEASE_TIMEOUT_S}s}}
""")
    log = open(tmp_path / "job.log", "w+")
    proc = subprocess.Popen([flashroll_bin, "run", str(config)], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    client = TrainerClient(f"http://127.0.0.1:{port}", "s3cret-token")
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                client.status()
                break
            except ApiError:
                log.seek(0)
                assert proc.poll() is None, f"the job exited with {proc.returncode}:\n{log.read()}"
                assert time.monotonic() < deadline, f"no trainer API on port {port} in 30 s:\n{log.read()}"
                time.sleep(0.1)
        yield client
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            warnings.warn(f"flashroll run (pid {proc.pid}) ignored SIGTERM for 15 s; killed")
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_a_job_through_the_client(job):
    """The job's two groups: one leased and left to expire, leased again
    (binary this time) and acked; the other acked; then the queue is closed."""
    first = job.lease(1, timeout=60, format="json")
    assert first is not None and len(first.lease) == 32 and len(first.groups) == 1
    (group,) = first.groups
    assert len(group.samples) == 2 and group.effort == 100
    for s in group.samples:
        assert len(s.tokens) == len(s.logprobs) == len(s.versions) == len(s.loss_mask) > s.prompt_tokens
        assert s.loss_mask.sum() > 0 and set(s.versions[s.loss_mask == 1]) == {0}
    left_ms = first.expires_at_ms - time.time() * 1000
    assert 0 < left_ms <= LEASE_TIMEOUT_S * 1000 + 100

    time.sleep(max(left_ms, 0) / 1000 + 0.5)
    with pytest.raises(LeaseExpired, match=f"POST /v1/batches/{first.lease}/ack: HTTP 409: .*expired"):
        job.ack(first)

    # The expired group comes back first, under a new lease, renewed, then
    # released: it comes back at once under a third; binary equals JSON.
    renewed = job.lease(1, timeout=30, format="binary")
    assert renewed.groups[0].group_id == group.group_id
    assert job.renew(renewed) >= renewed.expires_at_ms
    assert job.release(renewed) is True
    assert job.release(renewed) is True  # a retried release changes nothing
    with pytest.raises(LeaseExpired, match=f"POST /v1/batches/{renewed.lease}/ack: HTTP 409: .*was released at"):
        job.ack(renewed)
    with pytest.raises(LeaseExpired, match="renew: HTTP 409"):
        job.renew(renewed)
    again = job.lease(1, timeout=5, format="binary")
    assert again.lease not in (first.lease, renewed.lease) and again.groups[0].group_id == group.group_id
    assert as_plain(again) == as_plain(first)
    assert job.ack(again) is True
    assert job.ack(again) is True  # a retried ack consumes nothing twice
    with pytest.raises(UnknownLease, match="HTTP 404"):
        job.ack("0" * 32)

    with pytest.raises(ApiError, match="GET /v1/batches: HTTP 400: .*max_groups"):
        job.lease(3, max_groups=2, timeout=1)
    with pytest.raises(ApiError, match="GET /v1/status: HTTP 401"):
        TrainerClient(f"http://{job.host}:{job.port}", "wrong").status()
    assert isinstance(job.status(), dict)
    with pytest.raises(ApiError, match=r"POST /v1/weights: HTTP 404: .*weights version 1 at v000001: "):
        job.publish_weights("v000001", 1)  # no such checkpoint under the job's root

    last = job.lease(1, timeout=60)
    assert last.groups[0].group_id != group.group_id
    assert job.ack(last) is True
    with pytest.raises(QueueClosed, match="closed"):  # every group handed out, rollouts done
        job.lease(1, timeout=5)


def test_an_ack_the_job_could_not_record_is_sent_again(job, tmp_path):
    """The job records an ack in its store before answering; while another
    connection holds the store's write lock that write fails (busy, after
    the store's 5 s busy timeout) and the ack is a 503. The client sends it
    again, after the lock is let go, and the store records it: the groups do
    not wait for a trainer restart to come back (the old client raised)."""
    batch = job.lease(2, timeout=120)  # both groups: every rollout has written its samples
    assert batch is not None and len(batch.groups) == 2
    store = sqlite3.connect(tmp_path / "store.db", timeout=30, isolation_level=None)
    store.execute("BEGIN IMMEDIATE")
    answers = []
    request = job._request

    def request_and_let_go_on_503(*args, **kwargs):
        reply = request(*args, **kwargs)
        answers.append(reply[0])
        if reply[0] == 503 and store.in_transaction:
            store.execute("COMMIT")
        return reply

    job._request = request_and_let_go_on_503
    try:
        assert job.ack(batch, trained_at_version=0, into_version=1) is True
    finally:
        if store.in_transaction:
            store.execute("COMMIT")
    assert answers[0] == 503 and answers[-1] == 200, answers
    acked = store.execute("SELECT count(*) FROM samples WHERE acked_into_version = 1").fetchone()[0]
    assert acked == sum(len(g.samples) for g in batch.groups) == 4
    store.close()


def test_a_poll_timeout_is_none():
    with FakeTrainerApi([], close_when_empty=False) as api:
        assert TrainerClient(api.url, "secret").lease(1, timeout=1) is None
