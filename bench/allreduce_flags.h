// The flags of //bench:allreduce (defined in allreduce.cc), declared for
// allreduce_rank.cc: the parent process passes them on to the ranks it
// starts (the same binary with --worker).
#ifndef LOCKSTEP_BENCH_ALLREDUCE_FLAGS_H_
#define LOCKSTEP_BENCH_ALLREDUCE_FLAGS_H_

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, sizes);
ABSL_DECLARE_FLAG(std::string, worlds);
ABSL_DECLARE_FLAG(int, repeats);
ABSL_DECLARE_FLAG(bool, mpi);
ABSL_DECLARE_FLAG(bool, tcp);
ABSL_DECLARE_FLAG(int64_t, segment_bytes);
ABSL_DECLARE_FLAG(int64_t, max_queued_bytes);
ABSL_DECLARE_FLAG(int64_t, direct_max_bytes);
ABSL_DECLARE_FLAG(int64_t, first_step_window_bytes);
ABSL_DECLARE_FLAG(int, send_buffer_bytes);
ABSL_DECLARE_FLAG(bool, progress_in_recv);
ABSL_DECLARE_FLAG(bool, progress_mark);
ABSL_DECLARE_FLAG(int, streams_per_peer);
ABSL_DECLARE_FLAG(int, recv_spin_us);
ABSL_DECLARE_FLAG(bool, stats);
ABSL_DECLARE_FLAG(std::string, grpc_args);
ABSL_DECLARE_FLAG(std::string, mpi_source);
ABSL_DECLARE_FLAG(std::string, transports);
ABSL_DECLARE_FLAG(std::string, certs_dir);
ABSL_DECLARE_FLAG(bool, worker);
ABSL_DECLARE_FLAG(std::string, transport);
ABSL_DECLARE_FLAG(int, rank);
ABSL_DECLARE_FLAG(int, world);
ABSL_DECLARE_FLAG(std::string, dir);
ABSL_DECLARE_FLAG(bool, malloc_probe);

#endif  // LOCKSTEP_BENCH_ALLREDUCE_FLAGS_H_
