"""The job flags of `lockstep submit` as keyword arguments -> lockstep.v1.JobSpec.

A mirror of common/train/job_flags.cc (JobSpecFromFlags): the same flag names, the
same defaults, the same order of application and the same rules:

* Without job_file every flag (given or defaulted) goes into the spec.
* With job_file=F (a JobSpec in protobuf text format) the file is the spec
  and only the keyword arguments given override its fields.
* momentum's default (0.9) is for sgd: adam/adamw take it only when it is
  given explicitly (and the coordinator then rejects it, naming the field).

A keyword argument whose value is None counts as not given.
Errors: an unknown keyword -> TypeError naming it; a value of the wrong
Python type -> TypeError naming the flag; a value out of the field's range or
not one of the flag's choices -> ValueError naming the flag with the CLI's
words (`--sync: expected ring or ps, got "mesh"`). Everything else (a model
spec, an optimizer name, lr <= 0, ...) is checked by the coordinator, as for
the CLI, and comes back as a LockstepError INVALID_ARGUMENT naming the field.
"""

import difflib
import math
import numbers

from google.protobuf import text_format

from lockstep._stubs import job_pb2

_FLT_MAX = 3.4028234663852886e38

# (flag, kind, default, proto path) in the order JobSpecFromFlags applies
# them. kind: str | int32 | int64 | uint64 | float | bool, or a special
# rule (sync, peer_transport, momentum). Defaults as in common/train/job_flags.cc.
FLAGS = (
    ("name", "str", "", ("name",)),
    ("model", "str", "mlp:256", ("model",)),
    ("dataset", "str", "fashion-mnist", ("data", "dataset")),
    ("normalize", "str", "", ("data", "normalize")),
    ("label_column", "int32", 0, ("data", "label_column")),
    ("csv_header", "str", "auto", ("data", "csv_header")),
    ("dim", "int64", 0, ("data", "dim")),
    ("num_classes", "int32", 0, ("data", "num_classes")),
    ("libsvm_labels", "str", "auto", ("data", "libsvm_labels")),
    ("sync", "sync", "ring", ("sync_mode",)),
    ("peer_transport", "peer_transport", "tcp", ("peer_transport",)),
    ("bucket_bytes", "int64", 0, ("bucket_bytes",)),
    ("compression", "choice", "none", ("compression",)),
    ("ring_algorithm", "choice", "auto", ("ring_algorithm",)),
    ("ps_transport", "peer_transport", "tcp", ("ps_transport",)),
    ("on_divergence", "choice", "repair", ("on_divergence",)),
    ("on_nonfinite", "choice", "fail", ("on_nonfinite",)),
    ("on_worker_lost", "choice", "fail", ("on_worker_lost",)),
    ("wait_timeout_ms", "int64", 0, ("wait_timeout_ms",)),
    ("stall_timeout_ms", "int64", 0, ("stall_timeout_ms",)),
    ("workers", "int32", 4, ("num_workers",)),
    ("ps_shards", "int32", 1, ("ps_shards",)),
    ("batch", "int64", 128, ("global_batch",)),
    ("epochs", "int64", 10, ("epochs",)),
    ("steps", "int64", 0, ("steps",)),
    ("seed", "uint64", 1, ("seed",)),
    ("eval_each_epoch", "bool", True, ("eval_each_epoch",)),
    ("optimizer", "str", "sgd", ("optimizer", "kind")),
    ("momentum", "momentum", 0.9, ("optimizer", "momentum")),
    ("nesterov", "bool", False, ("optimizer", "nesterov")),
    ("weight_decay", "float", 0.0, ("optimizer", "weight_decay")),
    ("beta1", "float", 0.9, ("optimizer", "beta1")),
    ("beta2", "float", 0.999, ("optimizer", "beta2")),
    ("eps", "float", 1e-8, ("optimizer", "eps")),
    ("lr", "float", 0.05, ("lr", "base_lr")),
    ("linear_scaling", "bool", False, ("lr", "linear_scaling")),
    ("reference_batch", "int64", 256, ("lr", "reference_batch")),
    ("warmup_steps", "int64", 0, ("lr", "warmup_steps")),
    ("warmup_start_factor", "float", 0.0, ("lr", "warmup_start_factor")),
    ("decay", "str", "cosine", ("lr", "decay")),
    ("step_size", "int64", 0, ("lr", "step_size")),
    ("gamma", "float", 0.1, ("lr", "gamma")),
    ("min_lr", "float", 0.0, ("lr", "min_lr")),
    ("checkpoint_dir", "str", "", ("checkpoint_dir",)),
    ("checkpoint_every_steps", "int64", 0, ("checkpoint_every_steps",)),
    ("checkpoint_every_seconds", "int64", 0, ("checkpoint_every_seconds",)),
    ("checkpoint_keep", "int32", 3, ("checkpoint_keep",)),
    ("resume_from", "resume", "", ("resume_from",)),
)

# kind "choice": the flag's allowed values, in the CLI's error order; the
# first one (the default) is stored as "" in the spec.
_CHOICES = {
    "compression": ("none", "bf16", "fp16"),
    "ring_algorithm": ("auto", "ring", "direct"),
    "on_divergence": ("repair", "halt"),
    "on_nonfinite": ("fail", "skip"),
    "on_worker_lost": ("fail", "shrink", "wait"),
}

FLAG_NAMES = frozenset(f[0] for f in FLAGS) | {"job_file"}

_INT_RANGES = {
    "int32": (-(2**31), 2**31 - 1, "a 32-bit integer"),
    "int64": (-(2**63), 2**63 - 1, "a 64-bit integer"),
    "uint64": (0, 2**64 - 1, "an unsigned 64-bit integer"),
}


def _type_name(value):
    return type(value).__name__


def _check(flag, kind, value):
    """The value converted for the proto field; TypeError/ValueError naming the flag."""
    if kind in ("str", "sync", "peer_transport", "choice", "resume"):
        if not isinstance(value, str):
            raise TypeError(f"--{flag}: expected a str, got {_type_name(value)} {value!r}")
        return value
    if kind == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"--{flag}: expected a bool, got {_type_name(value)} {value!r}")
        return value
    if kind in _INT_RANGES:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"--{flag}: expected an int, got {_type_name(value)} {value!r}")
        lo, hi, what = _INT_RANGES[kind]
        value = int(value)
        if not lo <= value <= hi:
            raise ValueError(f"--{flag}: expected {what}, got {value}")
        return value
    # float (and momentum): a float32 field
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"--{flag}: expected a float, got {_type_name(value)} {value!r}")
    value = float(value)
    if math.isfinite(value) and abs(value) > _FLT_MAX:
        raise ValueError(f"--{flag}: {value!r} is out of range for a 32-bit float")
    return value


def _set(spec, path, value):
    msg = spec
    for part in path[:-1]:
        msg = getattr(msg, part)
    setattr(msg, path[-1], value)


def _read_job_file(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise FileNotFoundError(f"job file {path}: cannot open ({e.strerror})") from e
    spec = job_pb2.JobSpec()
    try:
        text_format.Parse(text, spec)
    except text_format.ParseError as e:
        where = f"line {e.GetLine()} col {e.GetColumn()}: " if e.GetLine() is not None else ""
        msg = str(e)
        prefix = f"{e.GetLine()}:{e.GetColumn()} : "
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
        raise ValueError(f"job file {path}: {where}{msg} "
                         "(expected a lockstep.v1.JobSpec in protobuf text format)") from None
    return spec


def _parse_resume_from(path):
    """--resume_from's value -> lockstep.v1.CheckpointRef (ParseResumeFrom)."""
    err = ValueError(f'--resume_from: expected DIR/job-<id> (a job\'s checkpoint directory) or '
                     f'DIR/job-<id>/step-<N>.ckpt (one checkpoint), got "{path}"')

    def split(p):
        slash = p.rfind("/")
        if slash < 0:
            return ".", p
        return ("/" if slash == 0 else p[:slash]), p[slash + 1:]

    def number(text):
        if not text.isdigit():
            raise err
        return int(text)

    p = path
    while len(p) > 1 and p.endswith("/"):
        p = p[:-1]
    ref = job_pb2.CheckpointRef()
    d, base = split(p)
    if base.startswith("step-") and base.endswith(".ckpt"):
        step = number(base[len("step-"):-len(".ckpt")])
        if step <= 0:
            raise err
        ref.step = step
        d, base = split(d)
    if not base.startswith("job-"):
        raise err
    job = number(base[len("job-"):])
    if job == 0:
        raise err
    ref.checkpoint_dir = d
    ref.job_id = job
    return ref


def unknown_flag_error(function, name):
    close = difflib.get_close_matches(name, sorted(FLAG_NAMES), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return TypeError(f"{function}() got an unexpected keyword argument {name!r}: "
                     f"not a job flag{hint}")


def job_spec_from_flags(job_file=None, **flags):
    """Builds a lockstep.v1.JobSpec from job flags, as `lockstep submit` does."""
    for name in flags:
        if name not in FLAG_NAMES:
            raise unknown_flag_error("job_spec_from_flags", name)
    given = {k: v for k, v in flags.items() if v is not None}
    if job_file is not None and not isinstance(job_file, str):
        raise TypeError(f"--job_file: expected a str, got {_type_name(job_file)} {job_file!r}")
    from_file = bool(job_file)
    spec = _read_job_file(job_file) if from_file else job_pb2.JobSpec()
    # JobSpecFromFlags takes mutable_data(), mutable_optimizer() and
    # mutable_lr() whatever is set: the three submessages are always present.
    spec.data.SetInParent()
    spec.optimizer.SetInParent()
    spec.lr.SetInParent()
    # Checks every given value first, so a bad one is reported whatever else.
    values = {}
    for flag, kind, default, _ in FLAGS:
        values[flag] = _check(flag, kind, given[flag]) if flag in given else default
    for flag, kind, _, path in FLAGS:
        if from_file and flag not in given:
            continue  # a job file is in use: only given flags override it
        value = values[flag]
        if kind == "sync":
            if value == "ring":
                value = job_pb2.RING
            elif value == "ps":
                value = job_pb2.PS
            else:
                raise ValueError(f'--sync: expected ring or ps, got "{value}"')
        elif kind == "peer_transport":
            if value == "grpc":
                value = job_pb2.GRPC
            elif value == "tcp":
                value = job_pb2.TCP
            elif value == "shm" and flag == "peer_transport":
                value = job_pb2.SHM
            elif flag == "peer_transport":
                raise ValueError(f'--{flag}: expected grpc, tcp or shm, got "{value}"')
            else:
                raise ValueError(f'--{flag}: expected grpc or tcp, got "{value}"')
        elif kind == "choice":
            choices = _CHOICES[flag]
            if value not in choices:
                listed = ", ".join(choices[:-1]) + " or " + choices[-1]
                raise ValueError(f'--{flag}: expected {listed}, got "{value}"')
            value = "" if value == choices[0] else value
        elif kind == "resume":
            if not value:
                continue
            spec.resume_from.CopyFrom(_parse_resume_from(value))
            continue
        elif kind == "momentum":
            sgd = spec.optimizer.kind in ("", "sgd")
            if not (sgd or flag in given):
                continue
        _set(spec, path, value)
    return spec
