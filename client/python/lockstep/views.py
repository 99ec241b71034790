"""Plain Python views of the coordinator's replies (lockstep.v1 in coordinator.proto).

Each dataclass has one attribute per field of its message, with the proto's
field names; enum fields are their names as str ("RUNNING", "IDLE"),
repeated fields tuples, `spec` stays a lockstep.v1.JobSpec message, and
`proto` holds the message itself (for fields added to the proto later).
"""

import dataclasses
from typing import Any, Tuple

from google.protobuf.descriptor import FieldDescriptor

from lockstep._stubs import job_pb2

TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


def _convert(cls, msg):
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name == "proto":
            continue
        fd = msg.DESCRIPTOR.fields_by_name[f.name]
        value = getattr(msg, f.name)
        nested = _NESTED.get((cls.__name__, f.name))
        if fd.enum_type is not None and fd.label != FieldDescriptor.LABEL_REPEATED:
            ev = fd.enum_type.values_by_number.get(value)
            value = ev.name if ev is not None else str(value)
        elif fd.label == FieldDescriptor.LABEL_REPEATED:
            value = tuple(nested.from_proto(v) for v in value) if nested else tuple(value)
        elif fd.message_type is not None:
            copy = type(value)()
            copy.CopyFrom(value)
            value = copy
        kwargs[f.name] = value
    return cls(proto=msg, **kwargs)


class _View:
    """from_proto for the dataclasses below (their fields name the message's)."""

    @classmethod
    def from_proto(cls, msg):
        return _convert(cls, msg)


@dataclasses.dataclass(frozen=True)
class RankStatus(_View):
    """One rank of a job: its worker, progress, last hash and whether it is in sync."""
    rank: int
    worker_id: str
    address: str
    hostname: str
    step: int
    last_hash: str
    in_sync: bool
    last_heartbeat_age_s: float
    data_address: str
    median_step_seconds: float           # medians over the rank's recent steps
    median_compute_seconds: float
    median_communication_seconds: float
    median_exposed_seconds: float        # communication the compute waited for
    median_peer_wait_seconds: float      # waiting for the slowest peer
    resident_bytes: int                  # the worker's last reported VmRSS
    # At its last heartbeat: the peer rank + 1 or ps shard + 1 its combine
    # waited for (0 = none) and for how long (seconds).
    waiting_for_peer: int
    waiting_for_shard: int
    waiting_s: float
    proto: Any = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class MembershipEvent(_View):
    """A change of a running job's group (on_worker_lost=shrink / wait, late joiners)."""
    kind: str                  # "shrink", "wait", "replace" or "join"
    generation: int            # the generation it started
    world_before: int
    world_after: int
    worker_id: str             # the worker lost (replace, join: the worker added)
    rank: int                  # its rank in the previous generation (replace, join: its new rank)
    step: int
    unix_s: float
    reason: str
    proto: Any = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class JobStatus(_View):
    """A job's state and progress: lockstep.v1.JobStatus (GetJob, WatchJob events)."""
    job_id: int
    spec: Any                  # lockstep.v1.JobSpec
    state: str                 # PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED
    reason: str
    step: int                  # steps every rank completed
    total_steps: int
    epoch: int
    loss: float
    test_accuracy: float
    test_loss: float
    examples_per_second: float
    out_of_sync: bool
    checked_steps: int
    mismatched_steps: int
    ranks: Tuple[RankStatus, ...]
    submitted_unix_s: float
    started_unix_s: float
    finished_unix_s: float
    final_hash: str
    has_weights: bool
    skipped_steps: int                 # steps skipped for a non-finite gradient
    last_skipped_step: int
    last_nonfinite_ranks: Tuple[int, ...]
    repairs: int                       # diverged replicas repaired
    last_divergence: str
    evaluated: bool                    # test_accuracy/test_loss are from an evaluation
    generation: int                    # membership generation (0 = the original group)
    world: int                         # ranks in the current generation
    regrouping: bool
    membership_events: Tuple[MembershipEvent, ...]
    waiting_for_ranks: Tuple[int, ...]  # on_worker_lost=wait: ranks waiting for a worker
    wait_deadline_unix_s: float        # when that wait fails the job (0 = not waiting)
    proto: Any = dataclasses.field(repr=False, compare=False)

    @property
    def done(self):
        """True once the job SUCCEEDED, FAILED or was CANCELLED."""
        return self.state in TERMINAL_STATES

    @property
    def mode(self):
        """"ring/tcp", "ring/grpc", "ring/shm", "ps/tcp" or "ps/grpc", as
        `lockstep status` shows it."""
        ps = self.spec.sync_mode == job_pb2.PS
        transport = self.spec.ps_transport if ps else self.spec.peer_transport
        try:
            return ("ps/" if ps else "ring/") + job_pb2.PeerTransport.Name(transport).lower()
        except ValueError:
            return ("ps" if ps else "ring") + "/unknown"


@dataclasses.dataclass(frozen=True)
class SyncCheck(_View):
    """The replica-hash comparison of one step."""
    step: int
    all_match: bool
    majority_hash: str
    differing_ranks: Tuple[int, ...]
    rank_hashes: Tuple[str, ...]   # index = rank
    first_differing_block: str     # e.g. "W0" or "optimizer state"
    no_majority: bool
    note: str                      # divergence / repair notes
    proto: Any = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class SyncRun(_View):
    """Consecutive all-matching checks, summarised."""
    first_step: int
    last_step: int
    checks: int
    last_majority_hash: str
    proto: Any = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class SyncHistory(_View):
    """A job's per-step hash agreement (most recent check last)."""
    job_id: int
    checked_steps: int
    mismatched_steps: int
    first_mismatch_step: int       # -1 when none
    checks: Tuple[SyncCheck, ...]
    runs: Tuple[SyncRun, ...]
    next_step: int                 # paging: the from_step of the next page
    summarised_to_step: int        # > 0: steps before it kept only as runs + mismatches
    summary: str                   # what was summarised, in words ("" = nothing)
    proto: Any = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class JobList(_View):
    """Every job in the coordinator's memory (and, with --state_dir, the evicted ones)."""
    jobs: Tuple["JobStatus", ...]
    evicted_jobs: int                  # finished jobs dropped from memory
    max_finished_jobs_in_memory: int
    state_db_has_evicted: bool         # status / sync / watch / weights still answer (--state_dir)
    evicted_listed: int                # evicted jobs listed anyway, from the state database
    evicted_next_before: int           # > 0: older evicted jobs left (job_list(evicted_before=))
    proto: Any = dataclasses.field(repr=False, compare=False)


@dataclasses.dataclass(frozen=True)
class WorkerInfo(_View):
    """A registered worker daemon."""
    worker_id: str
    address: str
    hostname: str
    state: str                     # IDLE, BUSY, LOST
    job_id: int
    last_heartbeat_age_s: float
    data_address: str
    blas_core: str                 # OpenBLAS kernel set ("" = not said)
    blas_advice: str               # what to set when it is too narrow
    proto: Any = dataclasses.field(repr=False, compare=False)


_NESTED = {
    ("JobStatus", "ranks"): RankStatus,
    ("SyncHistory", "checks"): SyncCheck,
    ("SyncHistory", "runs"): SyncRun,
    ("JobList", "jobs"): JobStatus,
    ("JobStatus", "membership_events"): MembershipEvent,
}

# Which message each view mirrors (the tests check the field lists agree).
MESSAGES = {
    RankStatus: "RankStatus",
    JobStatus: "JobStatus",
    SyncCheck: "SyncCheck",
    SyncHistory: "SyncHistory",
    MembershipEvent: "MembershipEvent",
    SyncRun: "SyncRun",
    JobList: "JobList",
    WorkerInfo: "WorkerInfo",
}
