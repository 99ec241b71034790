"""The generated lockstep.v1 modules (see client/python/gen_stubs.sh)."""

try:
    from lockstep._gen.proto import coordinator_pb2, coordinator_pb2_grpc, job_pb2
except ImportError as e:  # pragma: no cover - depends on the installation
    if not (e.name or "").startswith("lockstep._gen"):
        raise
    raise ImportError(
        "lockstep: the generated lockstep.v1 stubs (lockstep/_gen) are missing: run "
        "client/python/gen_stubs.sh (needs Debian's protobuf-compiler and "
        "protobuf-compiler-grpc), or import the package Bazel builds "
        "(//client/python:lockstep)") from e

__all__ = ["coordinator_pb2", "coordinator_pb2_grpc", "job_pb2"]
