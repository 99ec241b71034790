// One rank of //bench:allreduce (the binary re-executed with --worker):
// builds the transport the flags name (tcp, tcp_tls or grpc) to its peers,
// whose ports it learns through files in --dir, times the ring all-reduce
// for every size in --sizes and prints "RESULT bytes iters median_us
// min_us" lines (rank 0). Plus the small helpers the parent process shares.
#ifndef LOCKSTEP_BENCH_ALLREDUCE_RANK_H_
#define LOCKSTEP_BENCH_ALLREDUCE_RANK_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lockstep::allreduce_bench {

// Timed and warm-up calls per size (must match mpi_allreduce.c).
int IterationsFor(int64_t bytes);
int WarmupFor(int64_t bytes);
// "1,2,3" -> {1, 2, 3}; exits 2 naming a bad entry.
std::vector<int64_t> ParseInts(const std::string& csv);
// "name=1,name=2" -> pairs; exits 2 naming a bad entry.
std::vector<std::pair<std::string, int>> ParseGrpcArgs(const std::string& s);
// The whole file; false if it cannot be read.
bool ReadFile(const std::string& path, std::string* out);

// Runs this process as rank --rank of --world; the exit status.
int RunRank();

}  // namespace lockstep::allreduce_bench

#endif  // LOCKSTEP_BENCH_ALLREDUCE_RANK_H_
