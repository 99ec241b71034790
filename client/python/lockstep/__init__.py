"""lockstep: a Python client for the lockstep data-parallel training service.

    import lockstep
    c = lockstep.Client("127.0.0.1:7070", insecure=True)   # or tls_ca=, tls_cert=, tls_key=
    job = c.submit(model="mlp:256", workers=4, sync="ring", peer_transport="tcp", epochs=10)
    for ev in c.follow(job): print(f"{ev.state} step {ev.step}/{ev.total_steps} loss {ev.loss:.4f}")
    w = c.weights(job); print(c.status(job).test_accuracy, {k: v.shape for k, v in w.items()})

Needs Debian's python3-grpcio, python3-protobuf and python3-numpy, and the
lockstep.v1 stubs generated from proto/ (client/python/gen_stubs.sh, or the
Bazel target //client/python:lockstep).
"""

from lockstep._stubs import coordinator_pb2, job_pb2
from lockstep.client import Client, LockstepError
from lockstep.job_flags import job_spec_from_flags
from lockstep.views import JobStatus, RankStatus, SyncCheck, SyncHistory, WorkerInfo

__all__ = [
    "Client",
    "JobStatus",
    "LockstepError",
    "RankStatus",
    "SyncCheck",
    "SyncHistory",
    "WorkerInfo",
    "coordinator_pb2",
    "job_pb2",
    "job_spec_from_flags",
]
