"""A fake of the job's trainer API (docs/TRAINER_API.md) for the trainer loop
tests: serves given groups (JSON form) under leases, and records acks and
published weights. TEST_expire_next_ack makes the next ack answer 409, as
for a lease that expired while the trainer computed; TEST_drop_next_ack_reply
records the next ack and closes the connection without a reply, as a job
whose answer was lost. `published` is (path, version) of the weights GET
/v1/weights reports before any is posted (a resumed job's).
"""
import json
import struct
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PER_TOKEN = (("tokens", "<i"), ("logprobs", "<f"), ("versions", "<i"), ("loss_mask", "<B"))


def encode_frtb(batch_json):
    """The FRTB version 1 body of a JSON-form batch, laid out by hand per
    docs/TRAINER_API.md."""
    meta = json.loads(json.dumps(batch_json))
    samples = [s for g in meta["groups"] for s in g["samples"]]
    arrays = [{name: s.pop(name) for name, _ in PER_TOKEN} for s in samples]
    m = json.dumps(meta).encode()
    m += b" " * (-len(m) % 4)
    out = bytearray(b"FRTB" + struct.pack("<III", 1, len(m), len(samples)) + m)
    for a in arrays:
        n = len(a["tokens"])
        out += struct.pack("<I", n)
        for name, code in PER_TOKEN:
            out += struct.pack(f"<{n}{code[1]}", *a[name])
        out += b"\0" * (-len(out) % 4)
    return bytes(out)


class FakeTrainerApi:
    def __init__(self, groups, token="secret", close_when_empty=True, published=(None, 0), lease_ms=None):
        self.queue = list(groups)  # JSON-form groups, oldest first
        self.token = token
        self.close_when_empty = close_when_empty
        self.leases = {}  # id -> groups
        self.acked = []   # lease ids, in order
        self.weights = []  # (path, version), in order
        self.published = published
        self.lease_ms = lease_ms  # leases last this long (None: for ever)
        self.ack_bodies = []  # each ack's JSON body (None when empty), in order, retries too
        self.renewed, self.released = [], []  # lease ids, in order
        self.TEST_drop_next_ack_reply = False
        self.trainer_versions = []  # each lease's trainer_version (None when not given), in order
        self.TEST_expire_next_ack = False
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def expires_at_ms(self):
        return 1 << 41 if self.lease_ms is None else int(time.time() * 1000) + self.lease_ms

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, status, body=b"", content_type="application/json"):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def error(self, status, code, message):
                self.reply(status, json.dumps({"error": {"code": code, "message": message}}).encode())

            def authorised(self):
                if self.headers.get("Authorization") != f"Bearer {api.token}":
                    self.error(401, "unauthenticated", "missing or wrong bearer token")
                    return False
                return True

            def do_GET(self):
                if not self.authorised():
                    return
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/v1/weights":
                    path, version = api.weights[-1] if api.weights else api.published
                    return self.reply(200, json.dumps({"version": version, "path": path,
                                                       "next_version": version + 1}).encode())
                if url.path == "/v1/status":
                    return self.reply(200, json.dumps({"queued": len(api.queue)}).encode())
                q = dict(urllib.parse.parse_qsl(url.query))
                n = int(q.get("max_groups", q.get("min_groups", 1)))
                with api.lock:
                    api.trainer_versions.append(int(q["trainer_version"]) if "trainer_version" in q else None)
                    if not api.queue:
                        if api.close_when_empty:
                            return self.error(409, "failed_precondition", "batch queue closed and drained")
                        return self.reply(204)
                    groups, api.queue = api.queue[:n], api.queue[n:]
                    lease = uuid.uuid4().hex
                    api.leases[lease] = groups
                batch = {"lease": lease, "expires_at_ms": api.expires_at_ms(), "groups": groups}
                if q.get("format") == "binary":
                    return self.reply(200, encode_frtb(batch), "application/octet-stream")
                return self.reply(200, json.dumps(batch).encode())

            def do_POST(self):
                if not self.authorised():
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                parts = self.path.strip("/").split("/")
                if parts[:2] == ["v1", "batches"] and parts[3:] in (["renew"], ["release"]):
                    with api.lock:
                        if parts[2] in api.acked:
                            return self.error(409, "failed_precondition", f"lease {parts[2]} acknowledged")
                        if parts[3] == "renew":
                            api.renewed.append(parts[2])
                            return self.reply(200, json.dumps({"lease": parts[2], "expires_at_ms": api.expires_at_ms()}).encode())
                        api.released.append(parts[2])
                        api.queue = api.leases.pop(parts[2], []) + api.queue
                    return self.reply(200, json.dumps({"lease": parts[2]}).encode())
                if parts[:2] == ["v1", "batches"] and parts[3:] == ["ack"]:
                    with api.lock:
                        api.ack_bodies.append(json.loads(body) if body else None)
                        if parts[2] in api.acked:
                            return self.reply(200, json.dumps({"lease": parts[2]}).encode())  # a retry
                        if parts[2] not in api.leases:
                            return self.error(404, "not_found", f"lease {parts[2]} unknown")
                        if api.TEST_expire_next_ack:
                            api.TEST_expire_next_ack = False
                            api.queue = api.leases.pop(parts[2]) + api.queue
                            return self.error(409, "failed_precondition", f"lease {parts[2]} expired")
                        api.acked.append(parts[2])
                        if api.TEST_drop_next_ack_reply:
                            api.TEST_drop_next_ack_reply = False
                            self.close_connection = True
                            self.connection.shutdown(2)  # recorded, but no reply
                            return
                    return self.reply(200, json.dumps({"lease": parts[2]}).encode())
                if self.path == "/v1/weights":
                    w = json.loads(body)
                    api.weights.append((w["path"], w["version"]))
                    return self.reply(200, json.dumps(w).encode())
                self.error(404, "not_found", self.path)

        return Handler
