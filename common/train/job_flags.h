// The job flags shared by `lockstep submit` and `lockstep-train`: one set
// of flag names, one place that turns them into a lockstep.v1.JobSpec.
//
// Without --job_file every flag (with its default) goes into the spec.
// With --job_file=F (a JobSpec in protobuf text format) the file is the
// spec and only flags given explicitly on the command line override it.
#ifndef LOCKSTEP_COMMON_TRAIN_JOB_FLAGS_H_
#define LOCKSTEP_COMMON_TRAIN_JOB_FLAGS_H_

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "proto/job.pb.h"

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, job_file);
ABSL_DECLARE_FLAG(std::string, sync);
ABSL_DECLARE_FLAG(std::string, peer_transport);
ABSL_DECLARE_FLAG(std::string, ps_transport);
ABSL_DECLARE_FLAG(int64_t, bucket_bytes);
ABSL_DECLARE_FLAG(std::string, compression);
ABSL_DECLARE_FLAG(std::string, ring_algorithm);
ABSL_DECLARE_FLAG(std::string, optimizer);
ABSL_DECLARE_FLAG(float, momentum);

namespace lockstep {

// Names of the flags given on a command line ("--lr=0.1" and "--lr 0.1"
// give "lr", "--nonesterov" gives "nesterov"); call with main's argv.
std::set<std::string> FlagsGivenOnCommandLine(int argc, char** argv);

// Builds the spec from the flags (call after absl::ParseCommandLine);
// `given` says which flags override a --job_file.
// Errors: the job file cannot be read (NotFound naming it) or does not
// parse (InvalidArgument "job file F: line L col C: ..."); a flag value
// that is not one of its choices (InvalidArgument naming the flag).
absl::StatusOr<v1::JobSpec> JobSpecFromFlags(const std::set<std::string>& given);

// The ring peer transport as --peer_transport spells it: "grpc", "tcp", "shm";
// "unknown" for a value job.proto does not define.
const char* PeerTransportName(v1::PeerTransport transport);

// The inverse of PeerTransportName: "grpc" -> GRPC, "tcp" -> TCP, "shm" ->
// SHM; anything else InvalidArgument "expected grpc, tcp or shm, got
// \"quic\"" (the caller names the flag; --ps_transport refuses shm).
absl::StatusOr<v1::PeerTransport> ParsePeerTransport(const std::string& name);

// --resume_from's value: "DIR/job-<id>" (newest valid checkpoint: step 0)
// or "DIR/job-<id>/step-<N>.ckpt" -> CheckpointRef{DIR, id, N}; anything
// else InvalidArgument saying the expected forms (the caller names the flag).
absl::StatusOr<v1::CheckpointRef> ParseResumeFrom(const std::string& path);

// Parses a JobSpec in protobuf text format; `origin` names it in errors.
absl::StatusOr<v1::JobSpec> ParseJobSpecText(const std::string& text,
                                             const std::string& origin);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TRAIN_JOB_FLAGS_H_
