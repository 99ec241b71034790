"""lockstep.Client: the coordinator's user-facing RPCs from Python.

    import lockstep
    c = lockstep.Client("127.0.0.1:7070", insecure=True)    # plain text; or tls_* below
    job = c.submit(model="mlp:256", workers=4, sync="ring", peer_transport="tcp", epochs=10)
    for ev in c.follow(job): print(ev.state, ev.step, ev.total_steps, ev.loss)
    w = c.weights(job)        # {"W0": float32 (784, 256), "b0": (256,), "W1": ..., "b1": ...}

Every RPC error becomes a LockstepError carrying the gRPC status code and
the coordinator's message (which names the field, job or worker).

Mutual TLS (a coordinator started with --tls_*), as the CLI's flags:

    c = lockstep.Client("10.0.0.1:7070", tls_ca="pki/ca.pem", tls_cert="pki/client.pem",
                        tls_key="pki/client.key", token_file="pki/token")

token= / token_file= (default: $LOCKSTEP_TOKEN) is sent as "authorization:
Bearer <token>"; submit and cancel need it.

The server must be the coordinator: its certificate must carry the DNS SAN
coordinator.role.lockstep.invalid (deploy/certs.sh writes it next to the
role URI SAN lockstep://role/coordinator that the C++ channels read). grpcio
has no custom certificate verifier, so the client checks the role through
the host-name check: it overrides the name it verifies
(grpc.ssl_target_name_override) with that SAN, and not the host it dials.
A worker's or ps server's certificate, or one without that SAN (made by an
older certs.sh: re-issue it), fails the handshake (UNAVAILABLE). Before its
first call the client also makes one TLS handshake of its own (Python's
ssl, the same CA, client certificate and name) and reads the role URI SAN
the C++ channels read: a certificate whose first lockstep://role/<role> is
not coordinator is refused UNAUTHENTICATED, so a certificate that carries
the coordinator's DNS name but another role (issued by another tool) is
refused here as by the C++ client. Secure by default, as the CLI:
one of tls_* or insecure=True (plain text, warns) is required, else
ValueError.
"""

import math
import os
import socket
import ssl
import threading
import time
import warnings

import grpc
import numpy as np

from lockstep import job_flags
from lockstep._stubs import coordinator_pb2, coordinator_pb2_grpc
from lockstep.views import JobList, JobStatus, SyncHistory, WorkerInfo

# WatchJob reconnects when the stream breaks (UNAVAILABLE) before the job
# ended, as `lockstep submit --follow` does.
_FOLLOW_ATTEMPTS = 5


class LockstepError(Exception):
    """A failed coordinator RPC: `code` (grpc.StatusCode), `message`, `rpc`.

    str(e) reads like the CLI's errors: "GetJob: NOT_FOUND: job 999 ...".
    """

    def __init__(self, code, message, rpc=""):
        self.code = code
        self.message = message
        self.rpc = rpc
        super().__init__(f"{rpc + ': ' if rpc else ''}{code.name}: {message}")

    @property
    def code_name(self):
        """The status code's name, e.g. "NOT_FOUND"."""
        return self.code.name


def _rpc_error(rpc, e):
    return LockstepError(e.code(), e.details() or "", rpc)


def _job_id(job):
    """A job id from an int or a JobStatus; ValueError/TypeError otherwise."""
    if isinstance(job, JobStatus):
        return job.job_id
    if isinstance(job, bool) or not isinstance(job, int):
        raise TypeError(f"job: expected a job id (a positive int) or a JobStatus, "
                        f"got {type(job).__name__} {job!r}")
    if not 0 < job < 2**64:
        raise ValueError(f"job: expected a positive job id, got {job}")
    return job


def _check_timeout(name, timeout, allow_none):
    if timeout is None and allow_none:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or \
            not timeout > 0 or math.isinf(timeout):
        raise ValueError(f"{name}: expected a positive number of seconds, got {timeout!r}")
    return float(timeout)


def _read_option_file(option, path, limit):
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ValueError(f"{option}: cannot read {path} ({e.strerror})") from None
    if len(data) > limit:
        raise ValueError(f"{option}: {path} is larger than {limit} bytes")
    return data


def _channel_credentials(tls_ca, tls_cert, tls_key, token, token_file, insecure):
    """grpc channel credentials for the options of Client (the CLI's --tls_ca,
    --tls_cert, --tls_key, --token_file / $LOCKSTEP_TOKEN and --insecure),
    or None for plain text."""
    tls = {"tls_ca": tls_ca, "tls_cert": tls_cert, "tls_key": tls_key}
    given = [k for k, v in tls.items() if v]
    if insecure and (given or token or token_file):
        raise ValueError("insecure: cannot be combined with tls_* or a token (pick one)")
    if given and len(given) < 3:
        missing = [k for k in tls if k not in given][0]
        raise ValueError(f"{missing}: missing; mutual TLS needs tls_ca, tls_cert and tls_key "
                         "together")
    if token and token_file:
        raise ValueError("token and token_file: give one")
    if token_file:
        token = _read_option_file("token_file", token_file, 4096).decode("ascii", "replace")
    if token is not None:
        token = token.strip()
        if not token or any(not 0x21 <= ord(ch) <= 0x7e for ch in token):
            raise ValueError("token: expected one token of printable ASCII without spaces")
    if not given:
        if token:
            raise ValueError("token: needs mutual TLS (tls_ca, tls_cert, tls_key); a token sent "
                             "in plain text protects nothing")
        if not insecure:
            raise ValueError("no transport security chosen: pass tls_ca, tls_cert and tls_key "
                             "for mutual TLS (certificates from deploy/certs.sh), or "
                             "insecure=True for plain text with no authentication")
        return None
    pem = {}
    for option, path in tls.items():
        data = _read_option_file(option, path, 1 << 20)
        what = b"PRIVATE KEY" if option == "tls_key" else b"CERTIFICATE"
        if b"-----BEGIN " not in data or what not in data:
            raise ValueError(f"{option}: {path} is not a PEM {what.decode()}")
        pem[option] = data
    creds = grpc.ssl_channel_credentials(root_certificates=pem["tls_ca"],
                                         private_key=pem["tls_key"],
                                         certificate_chain=pem["tls_cert"])
    if token is None:
        env = os.environ.get("LOCKSTEP_TOKEN", "").strip()
        token = env or None
    if token:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))
    return creds


# The DNS SAN deploy/certs.sh gives the coordinator's certificate (next to
# its role URI SAN): the name a TLS channel verifies instead of the host it
# dials, so the check is "the server is the coordinator" (see the module doc).
COORDINATOR_ROLE_NAME = "coordinator.role.lockstep.invalid"
# The URI SAN prefix of a role (common/grpcutil/call_policy.h kRoleUriPrefix).
ROLE_URI_PREFIX = "lockstep://role/"


def _host_port(address):
    """("host", port) of "host:port" or "[v6]:port"; ValueError otherwise."""
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address: expected host:port, got {address!r}")
    return host, int(port)


def role_of_sans(sans):
    """The role of the first lockstep://role/<role> URI SAN among
    getpeercert()'s subjectAltName pairs, or "" (as call_policy.h reads it)."""
    for kind, value in sans:
        if kind == "URI" and value.startswith(ROLE_URI_PREFIX):
            return value[len(ROLE_URI_PREFIX):]
    return ""


def check_coordinator_role(address, tls_ca, tls_cert, tls_key, timeout):
    """One TLS handshake with the server at `address` (the CA, our
    certificate, the coordinator's role name); LockstepError UNAVAILABLE if it
    fails, UNAUTHENTICATED if its certificate's role is not coordinator."""
    host, port = _host_port(address)
    ctx = ssl.create_default_context(cafile=tls_ca)
    ctx.load_cert_chain(tls_cert, tls_key)
    ctx.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            with ctx.wrap_socket(sock, server_hostname=COORDINATOR_ROLE_NAME) as tls:
                cert = tls.getpeercert()
    except (OSError, ssl.SSLError) as e:  # SSLCertVerificationError included
        raise LockstepError(grpc.StatusCode.UNAVAILABLE,
                            f"{address}: TLS handshake failed: {e}", "connect") from None
    role = role_of_sans(cert.get("subjectAltName", ()))
    if role != "coordinator":
        raise LockstepError(grpc.StatusCode.UNAUTHENTICATED,
                            f"{address}: the server's certificate has role {role or 'none'} "
                            f"({ROLE_URI_PREFIX}<role> URI SAN), expected coordinator: not the "
                            "coordinator", "connect")


def _split_layout(names, shapes, total, job_id):
    """[(name, shape)] from a WeightsChunk's block_names / block_shapes."""
    blocks, dims = [], []
    for d in shapes:
        if d == -1:
            blocks.append(tuple(dims))
            dims = []
        elif d >= 0:
            dims.append(d)
        else:
            raise LockstepError(grpc.StatusCode.DATA_LOSS,
                                f"job {job_id}: block_shapes holds {d}, expected dims >= 0 "
                                "separated by -1", "GetWeights")
    if dims:
        blocks.append(tuple(dims))
    if len(blocks) != len(names):
        raise LockstepError(grpc.StatusCode.DATA_LOSS,
                            f"job {job_id}: {len(names)} block names but {len(blocks)} "
                            "block shapes", "GetWeights")
    size = sum(math.prod(b) for b in blocks)
    if size != total:
        raise LockstepError(grpc.StatusCode.DATA_LOSS,
                            f"job {job_id}: the layout holds {size} floats, the weights "
                            f"{total}", "GetWeights")
    return list(zip(names, blocks))


class Client:
    """A connection to a lockstep coordinator (host:port).

    `timeout` (seconds) is the deadline of each unary RPC, like the CLI's
    --timeout_s; follow() and weights() take their own.
    """

    def __init__(self, address="127.0.0.1:7070", timeout=10.0, *, tls_ca=None, tls_cert=None,
                 tls_key=None, token=None, token_file=None, insecure=False):
        if not isinstance(address, str) or not address:
            raise ValueError(f"address: expected host:port, got {address!r}")
        self.address = address
        self.timeout = _check_timeout("timeout", timeout, allow_none=False)
        creds = _channel_credentials(tls_ca, tls_cert, tls_key, token, token_file, insecure)
        # The role check of the module doc, once, before the first call.
        self._role_check = (None if creds is None else
                            (lambda: check_coordinator_role(address, tls_ca, tls_cert, tls_key,
                                                            self.timeout)))
        self._role_lock = threading.Lock()
        if insecure:
            warnings.warn("lockstep.Client(insecure=True): plain text, no authentication")
        self._channel = (grpc.insecure_channel(address) if creds is None
                         else grpc.secure_channel(address, creds, options=[
                             ("grpc.ssl_target_name_override", COORDINATOR_ROLE_NAME)]))
        self._stub = coordinator_pb2_grpc.CoordinatorStub(self._channel)

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"lockstep.Client({self.address!r})"

    def _check_role(self):
        with self._role_lock:
            if self._role_check is not None:
                self._role_check()  # raises; checked again on the next call
                self._role_check = None

    def _call(self, rpc, request):
        self._check_role()
        try:
            return getattr(self._stub, rpc)(request, timeout=self.timeout)
        except grpc.RpcError as e:
            raise _rpc_error(rpc, e) from None

    # ---- jobs -------------------------------------------------------------

    def submit(self, *, no_wait=False, job_file=None, **flags):
        """Submits a job; returns its id (int).

        Keyword arguments are the job flags of `lockstep submit` (see
        `lockstep --help`): model, dataset, sync ("ring"|"ps"),
        peer_transport ("grpc"|"tcp"|"shm"), workers, batch, epochs, steps, lr,
        optimizer, momentum, ... with the CLI's defaults, or job_file=F (a
        JobSpec in text format) overridden by the flags given. no_wait: fail
        with RESOURCE_EXHAUSTED instead of waiting PENDING for idle workers.
        """
        for name in flags:
            if name not in job_flags.FLAG_NAMES:
                raise job_flags.unknown_flag_error("submit", name)
        if not isinstance(no_wait, bool):
            raise TypeError(f"no_wait: expected a bool, got {type(no_wait).__name__}")
        spec = job_flags.job_spec_from_flags(job_file=job_file, **flags)
        reply = self._call("SubmitJob", coordinator_pb2.SubmitJobRequest(spec=spec,
                                                                          no_wait=no_wait))
        return reply.job_id

    def status(self, job):
        """The job's JobStatus (state, step, loss, test_accuracy, ranks, ...)."""
        return JobStatus.from_proto(self._call("GetJob", coordinator_pb2.JobRef(
            job_id=_job_id(job))))

    def jobs(self):
        """Every job the coordinator knows, as JobStatus."""
        reply = self._call("ListJobs", coordinator_pb2.ListRequest())
        return [JobStatus.from_proto(j) for j in reply.jobs]

    def job_list(self, evicted_before=0):
        """ListJobs as a JobList: the jobs, and how many finished ones were evicted.

        evicted_before: a later page of the evicted jobs the coordinator's state
        database holds (those with an id below it: the previous page's
        evicted_next_before; 0 = the first page, with the jobs in memory).
        """
        if isinstance(evicted_before, bool) or not isinstance(evicted_before, int) \
                or evicted_before < 0:
            raise ValueError(f"evicted_before: expected a job id >= 0, got {evicted_before!r}")
        return JobList.from_proto(self._call("ListJobs", coordinator_pb2.ListRequest(
            evicted_before=evicted_before)))

    def workers(self):
        """Every registered worker, as WorkerInfo."""
        reply = self._call("ListWorkers", coordinator_pb2.ListRequest())
        return [WorkerInfo.from_proto(w) for w in reply.workers]

    def cancel(self, job):
        """Cancels the job; returns its JobStatus (CANCELLED, or its end state)."""
        return JobStatus.from_proto(self._call("CancelJob", coordinator_pb2.JobRef(
            job_id=_job_id(job))))

    def sync(self, job, max_entries=0):
        """The job's per-step hash agreement: SyncHistory (max_entries 0 = all kept)."""
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
            raise ValueError(f"max_entries: expected an int >= 0, got {max_entries!r}")
        return SyncHistory.from_proto(self._call("GetSyncHistory",
                                                 coordinator_pb2.SyncHistoryRequest(
                                                     job_id=_job_id(job),
                                                     max_entries=max_entries)))

    def sync_pages(self, job, per_page=1000):
        """Every check of the job, page by page in step order (as `lockstep sync --all`).

        Yields SyncHistory pages from step 0 (each at most per_page checks),
        following next_step. Steps the coordinator no longer has per step (no
        --state_dir) come first as runs, with summarised_to_step and summary set.
        """
        if isinstance(per_page, bool) or not isinstance(per_page, int) or per_page < 1:
            raise ValueError(f"per_page: expected an int >= 1, got {per_page!r}")
        next_step = 0
        while next_step >= 0:
            page = SyncHistory.from_proto(self._call(
                "GetSyncHistory", coordinator_pb2.SyncHistoryRequest(
                    job_id=_job_id(job), max_entries=per_page, from_step=next_step)))
            yield page
            if not page.checks and not page.runs:
                break
            next_step = page.next_step

    def follow(self, job, timeout=None):
        """Yields a JobStatus after each step or state change until the job ends.

        The last event is the job's end state (SUCCEEDED, FAILED, CANCELLED).
        timeout: seconds until the job must have ended (None: no limit, as
        `lockstep submit --follow`); past it, LockstepError DEADLINE_EXCEEDED.
        A stream that breaks (UNAVAILABLE) is reopened up to 4 times.
        """
        job_id = _job_id(job)
        timeout = _check_timeout("timeout", timeout, allow_none=True)
        self._check_role()
        deadline = None if timeout is None else time.monotonic() + timeout
        last, timed_out = None, False
        for attempt in range(_FOLLOW_ATTEMPTS):
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                timed_out = True
                break
            call = self._stub.WatchJob(coordinator_pb2.JobRef(job_id=job_id), timeout=remaining)
            try:
                for event in call:
                    last = JobStatus.from_proto(event.status)
                    yield last
                    if last.done:
                        return
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED and deadline is not None:
                    timed_out = True
                    break
                if e.code() != grpc.StatusCode.UNAVAILABLE or attempt + 1 == _FOLLOW_ATTEMPTS:
                    raise _rpc_error("WatchJob", e) from None
                time.sleep(0.1 * (attempt + 1))  # back off before reconnecting
            finally:
                call.cancel()  # no-op once the stream ended; frees it if the caller stops early
        state = f", last seen {last.state} at step {last.step}/{last.total_steps}" if last else ""
        if timed_out:
            raise LockstepError(grpc.StatusCode.DEADLINE_EXCEEDED,
                                f"job {job_id} did not end within {timeout:g} s{state}",
                                "WatchJob")
        raise LockstepError(grpc.StatusCode.UNAVAILABLE,
                            f"job {job_id}: the watch stream ended {_FOLLOW_ATTEMPTS} times "
                            f"before the job did{state}", "WatchJob")

    def weights(self, job, timeout=60.0, flat=False):
        """The job's final weights: {"W0": array, "b0": ..., "W1": ...} (float32).

        Names, order and shapes are the model's layout, as `lockstep export`
        writes them: W_l is (fan_in, fan_out), so a layer is x @ W_l + b_l.
        flat=True returns the single flat array of all parameters instead.
        """
        job_id = _job_id(job)
        timeout = _check_timeout("timeout", timeout, allow_none=False)
        self._check_role()
        call = self._stub.GetWeights(coordinator_pb2.WeightsRequest(job_id=job_id),
                                     timeout=timeout)
        parts, names, shapes, total, received = [], [], [], None, 0

        def lost(what):
            call.cancel()
            return LockstepError(grpc.StatusCode.DATA_LOSS, f"job {job_id}: {what}",
                                 "GetWeights")
        try:
            for chunk in call:
                if total is None:
                    if chunk.offset != 0 or chunk.total < 1:
                        raise lost(f"first chunk at offset {chunk.offset} of {chunk.total} "
                                   "floats, expected offset 0 of >= 1")
                    total = chunk.total
                    names = list(chunk.block_names)
                    shapes = list(chunk.block_shapes)
                elif chunk.total != total:
                    raise lost(f"chunk says {chunk.total} floats in all, the first said {total}")
                if chunk.offset != received:
                    raise lost(f"chunk at offset {chunk.offset}, expected {received} "
                               "(chunks in order)")
                if len(chunk.data) % 4:
                    raise lost(f"chunk of {len(chunk.data)} bytes, expected a multiple of 4")
                n = len(chunk.data) // 4
                if received + n > total:
                    raise lost(f"chunk at offset {chunk.offset} with {n} floats runs past "
                               f"{total}")
                parts.append(chunk.data)
                received += n
        except grpc.RpcError as e:
            raise _rpc_error("GetWeights", e) from None
        if total is None or received != total:
            raise lost(f"stream ended after {received} of {total or 0} floats")
        values = np.frombuffer(b"".join(parts), dtype="<f4").astype(np.float32)
        if flat:
            return values
        out, offset = {}, 0
        for name, shape in _split_layout(names, shapes, total, job_id):
            n = math.prod(shape)
            out[name] = values[offset:offset + n].reshape(shape)
            offset += n
        return out
