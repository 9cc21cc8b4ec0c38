"""TrainerClient: the trainer's side of the RL job's trainer API
(docs/TRAINER_API.md, scheduler/trainer_api.h), over http.client.

Every call sends the bearer token. A reply outside a route's documented
successes raises ApiError naming the route, the HTTP status and the
server's error message; the two an RL loop must act on have their own
types: LeaseExpired (ack 409: drop the batch) and UnknownLease (ack 404).
QueueClosed is a lease poll's 409: the job has finished.

An ack whose reply never came (the connection dropped, perhaps after the
job recorded it) or that the job answered 503 (it could not record the ack
in its store, e.g. the store was busy) is sent again, up to ACK_ATTEMPTS
times, waiting ACK_RETRY_SECONDS, doubled after each attempt up to
ACK_RETRY_MAX_SECONDS, in between: acks are idempotent, so a retry of one
the job recorded is a 200 that changes nothing. Without the retry the
groups of an unrecorded ack would come back only when the trainer restarts.

Thread safety: one connection per call, so a client may be shared by threads.
"""
import http.client
import json
import time
import urllib.parse

from flashroll import batch_format


class ApiError(RuntimeError):
    def __init__(self, route, status, message):
        super().__init__(f"{route}: HTTP {status}: {message}")
        self.route, self.status, self.message = route, status, message


class LeaseExpired(ApiError):
    """The lease expired before its ack; its groups went to another lease."""


class UnknownLease(ApiError):
    """The server never issued the lease, or has forgotten it."""


class QueueClosed(ApiError):
    """The job's batch queue is closed and drained: stop polling."""


def _error_message(body):
    try:
        error = json.loads(body)["error"]
        return f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace")[:500] or "(no body)"


ACK_ATTEMPTS = 8
ACK_RETRY_SECONDS = 0.5
ACK_RETRY_MAX_SECONDS = 10.0
# The ack answers worth sending again: no reply (0) and 503 (not recorded).
_ACK_RETRIED = (0, 503)


class TrainerClient:
    def __init__(self, base_url, token, connect_timeout=10.0):
        url = urllib.parse.urlsplit(base_url)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"trainer API URL {base_url!r}: expected http://HOST:PORT")
        self.host, self.port = url.hostname, url.port or 80
        self.token = token
        self.connect_timeout = connect_timeout

    def _request(self, method, path, body=None, read_timeout=None):
        """-> (status, content type, body bytes). `path` includes the query."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=read_timeout or self.connect_timeout)
        headers = {"Authorization": f"Bearer {self.token}"}
        if body is not None:
            body = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        route = f"{method} {path.split('?')[0]}"
        try:
            conn.request(method, path, body=body, headers=headers)
            reply = conn.getresponse()
            return reply.status, reply.getheader("Content-Type", ""), reply.read()
        except (OSError, http.client.HTTPException) as e:
            raise ApiError(route, 0, f"no reply from {self.host}:{self.port}: {e!r}") from None
        finally:
            conn.close()

    def lease(self, min_groups, max_groups=None, timeout=30, format="binary", trainer_version=None):
        """Long-polls for at least min_groups finished groups (up to max_groups,
        default min_groups). trainer_version: the weight version that will
        compute the batch's loss; the job masks tokens sampled more than its
        max_staleness versions before it (default: the last version posted to
        /v1/weights). Returns a batch_format.Batch, or None when `timeout`
        seconds passed first (poll again). Raises QueueClosed once the job has
        finished, ApiError otherwise."""
        if format not in ("binary", "json"):
            raise ValueError(f"lease: format {format!r}: expected 'binary' or 'json'")
        query = urllib.parse.urlencode({"min_groups": min_groups, "max_groups": max_groups or min_groups,
                                        "timeout": timeout, "format": format,
                                        **({} if trainer_version is None else {"trainer_version": trainer_version})})
        status, _, body = self._request("GET", f"/v1/batches?{query}", read_timeout=timeout + 30)
        if status == 204:
            return None
        if status == 409:
            raise QueueClosed("GET /v1/batches", status, _error_message(body))
        if status != 200:
            raise ApiError("GET /v1/batches", status, _error_message(body))
        return batch_format.decode_binary(body) if format == "binary" else batch_format.decode_json(body)

    def ack(self, lease, trained_at_version=None, into_version=None):
        """Consumes the lease's groups (idempotent). `lease` is a Batch or its
        id; trained_at_version: the version whose weights computed the loss
        (the lease's trainer_version); into_version: the version the step
        will publish (default trained_at_version + 1): the job holds the
        groups until a version >= it is published. Retried when no reply
        came or the job could not record it (503; module docstring). Returns
        True; raises LeaseExpired (409), UnknownLease (404), or ApiError
        (the last attempt's) once ACK_ATTEMPTS were not recorded."""
        body = {k: v for k, v in (("trained_at_version", trained_at_version), ("into_version", into_version))
                if v is not None}
        wait = ACK_RETRY_SECONDS
        for attempt in range(1, ACK_ATTEMPTS + 1):
            try:
                self._lease_call(lease, "ack", body or None)
                return True
            except ApiError as e:
                if e.status not in _ACK_RETRIED or attempt == ACK_ATTEMPTS:
                    raise
                time.sleep(wait)
                wait = min(2 * wait, ACK_RETRY_MAX_SECONDS)

    def renew(self, lease):
        """Keeps a live lease for the job's lease_timeout from now (a step that
        outlasts the lease). Returns the new expires_at_ms; raises LeaseExpired
        (409: acknowledged, expired or released) or UnknownLease (404)."""
        return json.loads(self._lease_call(lease, "renew"))["expires_at_ms"]

    def release(self, lease):
        """Gives the lease's groups back to the queue now (again True once
        released or expired; its ack then raises LeaseExpired). Raises
        LeaseExpired (409: already acknowledged) or UnknownLease (404)."""
        self._lease_call(lease, "release")
        return True

    def _lease_call(self, lease, verb, request_body=None):
        lease_id = lease if isinstance(lease, str) else lease.lease
        route = f"POST /v1/batches/{lease_id}/{verb}"
        status, _, body = self._request("POST", f"/v1/batches/{urllib.parse.quote(lease_id)}/{verb}", request_body)
        if status == 409:
            raise LeaseExpired(route, status, _error_message(body))
        if status == 404:
            raise UnknownLease(route, status, _error_message(body))
        if status != 200:
            raise ApiError(route, status, _error_message(body))
        return body

    def publish_weights(self, path, version):
        """Tells the job weights `version` are saved at `path` (relative to the
        job's checkpoint root). Returns the server's {"path", "version"}."""
        status, _, body = self._request("POST", "/v1/weights", {"path": path, "version": version})
        if status != 200:
            raise ApiError("POST /v1/weights", status, _error_message(body))
        return json.loads(body)

    def weights(self):
        """The job's last published weights and the lowest version the trainer
        may publish next (GET /v1/weights): {"version", "path" (None before
        any), "next_version"}."""
        status, _, body = self._request("GET", "/v1/weights")
        if status != 200:
            raise ApiError("GET /v1/weights", status, _error_message(body))
        return json.loads(body)

    def status(self):
        """The job's status object (GET /v1/status)."""
        status, _, body = self._request("GET", "/v1/status")
        if status != 200:
            raise ApiError("GET /v1/status", status, _error_message(body))
        return json.loads(body)
