"""The trainers' loop against a fake trainer API (fake_trainer_api.py),
in-process: steps, checkpoints, publishing, resume, dropped leases."""
import json
import os
import time

import numpy as np
import pytest
import torch

from conftest import DEFAULT_MODEL
from fake_trainer_api import FakeTrainerApi
from flashroll import checkpoints, cpu_threads
from flashroll.batch import token_logprobs
from flashroll.model import load_model
from flashroll.trainers import grpo, loop

TEMPERATURE = 0.7


def make_groups(count, group_size=2, prompt=12, sampled=20, seed=0):
    """Groups of samples whose behaviour logprobs are the initial model's own
    (version 0), with advantages +-1 and one masked-stale token per sample."""
    rng = np.random.RandomState(seed)
    model = load_model(DEFAULT_MODEL)
    groups = []
    for g in range(count):
        samples = []
        for i in range(group_size):
            tokens = rng.randint(3, 2487, size=prompt + sampled).tolist()
            with torch.no_grad():
                logp, _ = token_logprobs(model(torch.tensor([tokens])), torch.tensor([tokens]), TEMPERATURE)
            mask = [0] * prompt + [1] * sampled
            mask[-1] = 0  # masked as too stale by the server
            samples.append({
                "sample_id": 100 * g + i, "tokens": tokens,
                "logprobs": [0.0] * prompt + logp[0, prompt:].tolist(), "versions": [-1] * prompt + [0] * sampled,
                "loss_mask": mask, "prompt_tokens": prompt, "reward": float(i), "reward_parts": {"verifier": float(i)},
                "advantage": 1.0 if i % 2 else -1.0, "reasoning_tokens": 10 + i, "status": "completed",
                "success": bool(i % 2)})
        groups.append({"group_id": g, "task_id": g, "task_key": f"t-{g}", "effort": 50 if g % 2 else 100,
                       "samples": samples})
    return groups


@pytest.fixture(scope="module")
def groups():
    return make_groups(6)


def argv(api, tmp_path, steps, *extra, algorithm="grpo"):
    """The flags the job passes every trainer, and those of `algorithm`'s
    (as TrainerArgv builds them: distill takes no --clip or --kl)."""
    (tmp_path / "token").write_text("secret\n")
    policy = ["--clip", "0.2", "--kl", "0"] if algorithm == "grpo" else []
    return ["--api", api.url, "--token-file", str(tmp_path / "token"), "--model", DEFAULT_MODEL,
            "--checkpoint-root", str(tmp_path / "ckpt"), "--steps", str(steps), "--lr", "1e-3", *policy,
            "--groups-per-step", "2", "--temperature", str(TEMPERATURE), "--loss-agg", "token_mean",
            "--log", str(tmp_path / "log.jsonl"), "--seed", "1", "--poll-timeout", "1", *extra]


def read_log(tmp_path):
    return [json.loads(line) for line in open(tmp_path / "log.jsonl")]


def test_steps_publish_checkpoints_and_log(tmp_path, groups):
    with FakeTrainerApi(groups[:4]) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 2)) == 0
    assert api.weights == [("v000001", 1), ("v000002", 2)]
    assert len(api.acked) == 2
    assert checkpoints.latest(tmp_path / "ckpt") == (2, str(tmp_path / "ckpt" / "v000002"))
    log = read_log(tmp_path)
    assert [r["step"] for r in log] == [1, 2] and [r["version"] for r in log] == [1, 2]
    first = log[0]
    assert first["samples"] == 4 and first["tokens"] == 4 * 32 and first["loss_tokens"] == 4 * 19
    assert first["reward_by_effort"] == {"50": 0.5, "100": 0.5} and first["success"] == 0.5
    assert first["reasoning_tokens_by_effort"] == {"50": 10.5, "100": 10.5}
    # Step 1 trains on the weights that sampled the batch (version 0): the
    # only mismatch is the trainer's fp32 arithmetic against the logged logprobs.
    assert first["mismatch_tokens"] == 4 * 19 and first["mismatch_abs"] < 1e-5
    assert first["clip_fraction"] == 0 and first["grad_norm"] > 0 and first["entropy"] > 0
    # Step 2's batch was sampled by version 0, the trainer holds version 1:
    # --mismatch-samples (default 2) of its samples are scored again under the
    # kept version-0 weights.
    assert log[1]["mismatch_tokens"] == 2 * 19 and log[1]["mismatch_abs"] < 1e-5
    # The published weights moved (in bf16, where two small steps move only some elements).
    trained, initial = load_model(tmp_path / "ckpt" / "v000002").state_dict(), load_model(DEFAULT_MODEL).state_dict()
    assert any(not torch.equal(trained[name], initial[name]) for name in initial)


def test_without_mismatch_samples_a_lagging_batch_has_no_mismatch(tmp_path, groups):
    with FakeTrainerApi(groups[:4]) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 2, "--mismatch-samples", "0")) == 0
    log = read_log(tmp_path)
    assert log[0]["mismatch_tokens"] == 4 * 19
    assert log[1]["mismatch_tokens"] == 0 and log[1]["mismatch_abs"] is None


def test_the_trainer_names_its_version_and_drops_tokens_the_job_left_past_the_bound(tmp_path, groups):
    # The fake serves masks as they are (the job would mask them at lease
    # time): step 2 holds version 1 and the batch was sampled by version 0,
    # one version more than --max-staleness 0 allows.
    with FakeTrainerApi(groups[:4]) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 2, "--max-staleness", "0")) == 0
    assert api.trainer_versions == [0, 1]
    log = read_log(tmp_path)
    assert [r["trained_at_version"] for r in log] == [0, 1]
    assert log[0]["stale_tokens_dropped"] == 0 and log[0]["loss_tokens"] == 4 * 19
    assert log[1]["stale_tokens_dropped"] == 4 * 19 and log[1]["loss_tokens"] == 0
    assert log[1]["trained_samples"] == 0, "no token is left to train on"


def test_old_checkpoints_are_pruned_after_each_publish(tmp_path, groups):
    with FakeTrainerApi(groups[:6]) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 3, "--keep-checkpoints", "2")) == 0
    assert api.weights == [("v000001", 1), ("v000002", 2), ("v000003", 3)]
    assert checkpoints.versions(tmp_path / "ckpt") == [2, 3]


def step_groups(tmp_path, version):
    return json.load(open(tmp_path / "ckpt" / checkpoints.version_dir(version) / "step_groups.json"))


def test_resume_continues_from_the_jobs_last_published_checkpoint(tmp_path, groups, capsys):
    with FakeTrainerApi(groups[:2]) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 1)) == 0
    os.makedirs(tmp_path / "ckpt" / ".v000002.tmp-1")  # a crash mid-write leaves this behind
    state = checkpoints.load_state(tmp_path / "ckpt" / "v000001")
    with FakeTrainerApi(groups[2:6], published=("v000001", 1)) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 3)) == 0
    assert "resumed from" in capsys.readouterr().err
    assert api.weights == [("v000002", 2), ("v000003", 3)]
    assert [r["step"] for r in read_log(tmp_path)] == [1, 2, 3]
    assert state["step"] == 1 and state["version"] == 1 and set(state) >= {"model", "optimizer", "rng"}
    # Each checkpoint names its own step's groups and the version it trained
    # at (the chain back to 0 gives every group in the weights) and counts
    # them all, resumed ones too; nothing in it grows with the steps.
    assert [step_groups(tmp_path, v) for v in (1, 2, 3)] == [
        {"version": 1, "trained_at_version": 0, "groups": [0, 1], "groups_trained": 2},
        {"version": 2, "trained_at_version": 1, "groups": [2, 3], "groups_trained": 4},
        {"version": 3, "trained_at_version": 2, "groups": [4, 5], "groups_trained": 6}]
    assert checkpoints.load_state(tmp_path / "ckpt" / "v000003")["groups_trained"] == 6
    assert "trained_groups" not in checkpoints.load_state(tmp_path / "ckpt" / "v000003")
    # At --steps already: nothing leased, nothing published.
    with FakeTrainerApi(groups[:2], published=("v000003", 3)) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 3)) == 0
    assert api.weights == [] and len(api.queue) == 2


def test_a_checkpoint_the_job_never_published_is_not_resumed_from(tmp_path, groups):
    # v000002 was written, but the trainer died before publishing it: the
    # job serves its groups (2, 3) again, and the trainer resumes from v1.
    with FakeTrainerApi(groups[:4]) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 2)) == 0
    with FakeTrainerApi(groups[2:4], published=("v000001", 1)) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 2)) == 0
    assert api.weights == [("v000003", 3)], "above every version on disk"
    assert step_groups(tmp_path, 3) == {"version": 3, "trained_at_version": 1, "groups": [2, 3], "groups_trained": 4}


def test_each_ack_names_the_version_that_trained_it_and_the_one_it_goes_into(tmp_path, groups):
    os.makedirs(tmp_path / "ckpt" / "v000004")  # taken: the next version is 5
    with FakeTrainerApi(groups[:4]) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 2)) == 0
    assert api.ack_bodies == [{"trained_at_version": 0, "into_version": 5}, {"trained_at_version": 5, "into_version": 6}]
    assert api.weights == [("v000005", 5), ("v000006", 6)]


def test_an_ack_whose_reply_was_lost_is_sent_again(tmp_path, groups):
    with FakeTrainerApi(groups[:2]) as api:
        api.TEST_drop_next_ack_reply = True
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 1)) == 0
    assert len(api.ack_bodies) == 2 and len(api.acked) == 1, "recorded once, sent twice"
    assert api.weights == [("v000001", 1)]


def test_a_step_longer_than_the_lease_renews_it(tmp_path, groups, monkeypatch):
    slow = loop.Trainer._forward_backward
    def forward_backward(self, pairs):
        time.sleep(1.0)
        return slow(self, pairs)
    monkeypatch.setattr(loop.Trainer, "_forward_backward", forward_backward)
    with FakeTrainerApi(groups[:2], lease_ms=300) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 1)) == 0
    assert len(api.renewed) >= 2 and api.weights == [("v000001", 1)]


def test_a_step_that_fails_before_its_ack_releases_the_lease(tmp_path, groups, monkeypatch):
    def broken(self, pairs):
        raise RuntimeError("out of memory")
    monkeypatch.setattr(loop.Trainer, "_forward_backward", broken)
    with FakeTrainerApi(groups[:2]) as api:
        with pytest.raises(RuntimeError):
            loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 1))
    assert len(api.released) == 1 and api.acked == [] and len(api.queue) == 2, "the groups are back at once"


def test_never_publishes_a_version_already_on_disk(tmp_path, groups):
    os.makedirs(tmp_path / "ckpt" / "v000007")  # incomplete, but its version is taken
    with FakeTrainerApi(groups[:2]) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 1)) == 0
    assert api.weights == [("v000008", 8)]


def test_an_expired_lease_drops_the_batch(tmp_path, groups, capsys):
    with FakeTrainerApi(groups[:2]) as api:
        api.TEST_expire_next_ack = True
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 1)) == 0
    assert "lease expired" in capsys.readouterr().err
    # The same groups came back under a new lease; only that one was acked and stepped on.
    assert len(api.acked) == 1 and api.weights == [("v000001", 1)]
    assert [r["step"] for r in read_log(tmp_path)] == [1]


def test_a_closed_queue_ends_the_run(tmp_path, capsys):
    with FakeTrainerApi([]) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 5)) == 0
    assert "the job has finished" in capsys.readouterr().err
    assert api.weights == []


def test_kl_and_dr_grpo(tmp_path, groups):
    with FakeTrainerApi(groups[:4]) as api:
        args = argv(api, tmp_path, 2)
        args[args.index("--kl") + 1] = "0.5"
        args[args.index("--loss-agg") + 1] = "dr_grpo"
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, args + ["--max-tokens", "64"]) == 0
    log = read_log(tmp_path)
    assert log[0]["kl"] == pytest.approx(0, abs=1e-9)  # the policy is the reference before step 1
    assert log[1]["kl"] > 0


def test_samples_that_add_nothing_to_the_loss_are_not_run_and_the_gradient_is_unchanged(tmp_path, groups, monkeypatch):
    """With --negative-weight 0 the negative samples' loss is 0 whatever the
    weights: the loop skips their forward, and the step's loss and gradients
    are those of a pass that ran them."""
    parser = loop.arg_parser("test")
    grpo.add_flags(parser)
    with FakeTrainerApi(groups[:2]) as api:
        args = parser.parse_args(argv(api, tmp_path, 1, "--negative-weight", "0"))
        trainer = loop.Trainer(args, grpo.Grpo(args))
        pairs = trainer.client.lease(2, timeout=1).samples()

    def gradients():
        trainer.model.zero_grad(set_to_none=True)
        metrics = trainer._forward_backward(pairs)
        return metrics, {name: p.grad.clone() for name, p in trainer.model.named_parameters()}

    skipped_metrics, skipped = gradients()
    monkeypatch.setattr(grpo.Grpo, "trains_on", lambda self, sample: True)
    full_metrics, full = gradients()
    assert len(pairs) == 4 and skipped_metrics["trained_samples"] == 2 and full_metrics["trained_samples"] == 4
    assert skipped_metrics["loss"] == pytest.approx(full_metrics["loss"], rel=1e-5)
    for name, grad in full.items():
        assert float((skipped[name] - grad).abs().max()) <= 1e-4 * float(grad.abs().max()), (name, float((skipped[name] - grad).abs().max()), float(grad.abs().max()))
    assert any(float(g.abs().max()) > 0 for g in full.values())


def test_grpo_trains_on_what_moves_its_loss():
    def objective(kl, negative_weight, entropy_weight=0.0):
        return grpo.Grpo(type("Args", (), {"clip": 0.2, "kl": kl, "temperature": 1.0, "entropy_weight": entropy_weight, "negative_weight": negative_weight,
                                           "ratio_bound": "dual_clip", "ratio_cap": 3.0,
                                           "model": DEFAULT_MODEL})())

    def sample(advantage):
        return type("Sample", (), {"advantage": advantage})()

    plain, positive_only, anchored = objective(0, 1), objective(0, 0), objective(0.1, 0)
    assert plain.trains_on(sample(-0.5)) and plain.trains_on(sample(0.5)) and not plain.trains_on(sample(0.0))
    assert not positive_only.trains_on(sample(-0.5)) and positive_only.trains_on(sample(0.5))
    assert anchored.trains_on(sample(0.0)) and anchored.trains_on(sample(-0.5))  # the KL term has a gradient
    sharpened = objective(0, 0, entropy_weight=0.1)
    assert sharpened.trains_on(sample(0.0)) and sharpened.trains_on(sample(-0.5))  # so has the entropy term


def test_a_step_whose_samples_all_have_advantage_0_runs_none_and_still_publishes(tmp_path, groups):
    flat = [dict(g, samples=[dict(s, advantage=0.0) for s in g["samples"]]) for g in groups[:2]]
    with FakeTrainerApi(flat) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 1)) == 0
    assert api.weights == [("v000001", 1)]
    record = read_log(tmp_path)[0]
    assert record["trained_samples"] == 0 and record["loss"] == 0 and record["entropy"] is None
    assert record["grad_norm"] == 0 and record["mismatch_abs"] is None


def test_the_trainer_runs_openblas_on_one_thread_unless_told(tmp_path):
    cpu_threads.set_blas_threads(2)
    with FakeTrainerApi([]) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 1)) == 0
    assert cpu_threads.blas_threads() == 1
    with FakeTrainerApi([]) as api:
        assert loop.main(grpo.Grpo, "test", grpo.add_flags, argv(api, tmp_path, 1, "--blas-threads", "2")) == 0
    assert cpu_threads.blas_threads() == 2
    cpu_threads.set_blas_threads(1)
