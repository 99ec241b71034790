// The arithmetic of `lockstep scale` (no gRPC, no I/O): scaling efficiency
// of measured runs, a latency-bandwidth (alpha-beta) cost model of the two
// ways lockstep combines gradients, its least-squares fit to measured
// communication times, and its extrapolation to clusters larger than the
// one measured.
//
// Units: seconds, bytes, examples. n is the gradient a worker contributes
// per step, in bytes (4 x parameter count for float32).
//
//   per-worker efficiency  E = compute / (compute + exposed communication)
//     (the seed's worked example: 50 ms compute + 10 ms communication per
//     step give E = 50/60 = 0.8333, so 8 workers at 200 examples/s each
//     deliver 8 x 200 x 50/60 = 1,333.3 examples/s instead of 1,600)
//   ring all-reduce        T_ring(K) = 2(K-1) alpha + 2 (K-1)/K n beta
//     (reduce-scatter then all-gather: 2(K-1) rounds, each moving n/K
//     bytes per worker; K = 1 costs 0)
//   ps with S shards       T_ps(K, S) = 2 alpha + 2 max(1, K/S) n beta
//     (every worker pushes n bytes split over S shards and pulls n bytes
//     back: a push round and a pull round, so 2 alpha. A shard receives
//     K n/S bytes and sends K n/S bytes; a worker sends n and receives n.
//     Each round takes as long as the busier end, max(n, K n/S) beta. The
//     shards run on their own hosts; their summing is not modelled.)
#ifndef LOCKSTEP_COMMON_SCALING_MODEL_H_
#define LOCKSTEP_COMMON_SCALING_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {
namespace scaling {

// compute / (compute + exposed). 1 when both are 0; 0 for negative input.
double PerWorkerEfficiency(double compute_seconds, double exposed_seconds);

// Examples/s of K workers that each reach `per_worker` examples/s on
// compute alone, at per-worker efficiency `efficiency`: K x per_worker x E.
double ClusterThroughput(int k, double per_worker, double efficiency);

struct AlphaBeta {
  double alpha = 0;  // seconds per message round (latency + per-message software cost)
  double beta = 0;   // seconds per byte (1 / bandwidth + per-byte software cost)
};

double RingAllReduceSeconds(int k, double bytes, const AlphaBeta& ab);
double PsSeconds(int k, int shards, double bytes, const AlphaBeta& ab);

// The coefficients of alpha and beta in T_ring (shards == 0) or T_ps.
struct ModelTerms {
  double alpha_coef = 0;
  double beta_coef = 0;
};
ModelTerms Terms(int k, int shards, double bytes);

// One measured combine: K workers, ring (shards == 0) or ps with `shards`,
// `bytes` per worker, `seconds` per step spent transferring (communication
// minus the wait for the slowest peer).
struct CommSample {
  int k = 1;
  int shards = 0;
  double bytes = 0;
  double seconds = 0;
};

struct AlphaBetaFit {
  AlphaBeta ab;
  int points = 0;            // samples that carried information (K=1 ring has none)
  double rms_residual = 0;   // seconds
  std::string note;          // how the fit was constrained, "" for a plain least squares
};

// Least squares for alpha and beta over the samples, both >= 0: the
// unconstrained 2x2 solution when it is non-negative, else the better of
// the two one-parameter fits. When the samples cannot separate alpha from
// beta (one informative point, or all proportional) alpha is taken as 0
// and the note says so. FailedPrecondition when no sample carries
// information (e.g. only K = 1 measured); InvalidArgument for a sample
// with K < 1, negative shards, bytes or seconds.
absl::StatusOr<AlphaBetaFit> FitAlphaBeta(const std::vector<CommSample>& samples);

// A network link given on the command line.
struct Link {
  double latency_seconds = 50e-6;
  double bandwidth_bytes_per_second = 10e9 / 8;
};

// What the model needs to know about the job, from the measurements.
struct Workload {
  double compute_seconds = 0;   // per-worker compute per step at K = 1
  int64_t batch = 0;            // global batch at K = 1
  bool weak = true;             // weak: batch per worker fixed; strong: global batch fixed
  double bytes = 0;             // gradient bytes per worker per step
  double exposed_fraction = 1;  // share of communication not overlapped with compute
};

struct Prediction {
  int k = 0;
  double compute_seconds = 0;  // per worker per step at this K
  double ring_seconds = 0;
  double ps1_seconds = 0;      // ps with one shard
  int best_shards = 1;         // the fastest ps shard count <= max_shards
  double best_ps_seconds = 0;
  std::string pick;            // "ring" or "ps S=<n>"
  double comm_seconds = 0;     // of the pick
  double efficiency = 0;       // per-worker, with the pick
  double ring_efficiency = 0;  // per-worker, if ring were used
  double ps_efficiency = 0;    // per-worker, if ps with best_shards were used
  double examples_per_second = 0;
  double ideal_examples_per_second = 0;  // K x batch / compute at K = 1
};

// The link's cost added to the measured software cost:
//   alpha = fitted alpha + link latency, beta = fitted beta + 1 / bandwidth
// (on loopback the fit measures what the software spends per message and
// per byte; a real link adds its own latency and wire time on top).
AlphaBeta WithLink(const AlphaBeta& fitted, const Link& link);

// For each K: compute per worker (weak: the K = 1 figure; strong: it over
// K), T_ring and T_ps for S = 1, 2, 4, ... <= max_shards under `ab`, the
// faster mode (ties go to ring, which needs no servers), and the
// efficiency and examples/s it gives. InvalidArgument for K < 1,
// max_shards < 1 or a workload without compute time, batch or bytes.
absl::StatusOr<std::vector<Prediction>> Extrapolate(const Workload& w, const AlphaBeta& ab,
                                                    const std::vector<int>& ks, int max_shards);

// ---- measured runs -----------------------------------------------------

// One K's measurement. Timing fields are per-step medians (seconds),
// averaged over the ranks; has_timing is false when the workers reported
// none (all zero).
struct Measurement {
  int k = 0;
  int64_t global_batch = 0;
  double examples_per_second = 0;
  bool has_timing = false;
  double step_seconds = 0;
  double compute_seconds = 0;
  double communication_seconds = 0;
  double exposed_seconds = 0;
  double peer_wait_seconds = 0;
  // The most ranks of this run on one host, and that host ("" unknown).
  int max_workers_per_host = 0;
  std::string busiest_host;
};

struct Row {
  Measurement m;
  double ideal_examples_per_second = 0;  // X(K0) x K / K0, K0 the smallest K measured
  double speedup = 0;                    // X(K) / X(K0) x K0 (K0 = 1: X(K) / X(1))
  double efficiency = 0;                 // X(K) / ideal
};

// Sorts by K and relates each to the smallest K measured. Empty in, empty out.
std::vector<Row> Summarize(std::vector<Measurement> measured);

// The smallest K whose efficiency is below `threshold`, or 0 when none is.
int FirstKBelow(const std::vector<Row>& rows, double threshold);

// The transfer time per step the fit should explain, for a row at K > 1:
// with timing, communication minus peer wait; without, the step time's
// growth over the base row's (weak: T(K) - T(K0); strong: T(K) - T(K0) K0/K),
// floored at 0. The second is marked inferred.
struct CommEstimate {
  double seconds = 0;
  bool inferred = false;
};
CommEstimate TransferSeconds(const Row& row, const Row& base, bool weak);

}  // namespace scaling
}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_SCALING_MODEL_H_
