"""On-policy distillation: the student's own samples, scored by a teacher.

  python3 -m flashroll.trainers.distill (grpo's flags) --teacher-url URL
      --teacher-model NAME [--teacher-token-file F]

For every sample the teacher (a `flashroll serve`) scores the sampled
continuation through POST /v1/score with full_vocab (float32 rows, row i
the log-softmax(logits / T) before token i); the loss is the per-token
reverse KL(student || teacher) over the full vocabulary on loss-masked
tokens. Rewards and advantages are logged, not trained on. The loop is
loop.py's.
"""
import http.client
import json
import sys
import urllib.parse

import numpy as np
import torch

from flashroll import losses
from flashroll.model import read_config
from flashroll.trainers import loop


class TeacherError(RuntimeError):
    pass


class Teacher:
    """POST /v1/score of a `flashroll serve` process."""

    def __init__(self, url, model, token=None, timeout=600.0):
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"--teacher-url {url!r}: expected http://HOST:PORT")
        self.host, self.port, self.model, self.token, self.timeout = u.hostname, u.port or 80, model, token, timeout

    def score(self, prompt, continuation, temperature, vocab):
        """prompt, continuation: token id lists -> [len(continuation), vocab] float32
        log-probs, row i the teacher's distribution before continuation[i]."""
        body = json.dumps({"model": self.model, "prompt_token_ids": prompt, "token_ids": continuation,
                           "temperature": temperature, "full_vocab": True, "format": "f32"}).encode()
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", "/v1/score", body=body, headers=headers)
            reply = conn.getresponse()
            data = reply.read()
        except (OSError, http.client.HTTPException) as e:
            raise TeacherError(f"POST /v1/score at {self.host}:{self.port}: no reply: {e!r}") from None
        finally:
            conn.close()
        if reply.status != 200:
            raise TeacherError(f"POST /v1/score: HTTP {reply.status}: {data.decode('utf-8', 'replace')[:500]}")
        if len(data) != 4 * len(continuation) * vocab:
            raise TeacherError(f"POST /v1/score: {len(data)} bytes, expected {len(continuation)} rows x {vocab} "
                               "float32 (does the teacher share the student's vocabulary?)")
        return np.frombuffer(data, "<f4").reshape(len(continuation), vocab)


class Distill:
    def __init__(self, args):
        token = loop.read_token(args.teacher_token_file) if args.teacher_token_file else None
        self.teacher = Teacher(args.teacher_url, args.teacher_model, token)
        self.temperature = args.temperature
        self.vocab = read_config(args.model).vocab_size

    def trains_on(self, sample):
        return True  # every sample's tokens are distilled, whatever its advantage

    def prepare(self, pairs):
        """Per sample: (first scored position p, teacher log-probs [n - p, V]) or None
        when nothing is loss-masked."""
        contexts = []
        for _, s in pairs:
            masked = np.flatnonzero(s.loss_mask)
            if len(masked) == 0:
                contexts.append(None)
                continue
            p = max(int(masked[0]), 1)
            tokens = s.tokens.tolist()
            contexts.append((p, self.teacher.score(tokens[:p], tokens[p:], self.temperature, self.vocab)))
        return contexts

    def loss(self, mb, logp, log_probs, contexts, denominator):
        teacher = torch.zeros_like(log_probs)  # [B, T, V]; rows left 0 are masked out
        for i, ctx in enumerate(contexts):
            if ctx is not None:
                p, rows = ctx
                teacher[i, p:p + len(rows)] = torch.from_numpy(rows.copy())
        loss = losses.reverse_kl_loss(log_probs, teacher, mb.loss_mask, denominator)
        return loss, {"reverse_kl": float(loss) * denominator}


def add_flags(parser):
    parser.add_argument("--teacher-url", required=True, help="a `flashroll serve` of the teacher, http://HOST:PORT")
    parser.add_argument("--teacher-model", required=True, help="the teacher's served model name")
    parser.add_argument("--teacher-token-file", help="file holding the teacher's API key")


if __name__ == "__main__":
    sys.exit(loop.main(Distill, "On-policy distillation trainer for a Flashroll RL job", add_flags))
