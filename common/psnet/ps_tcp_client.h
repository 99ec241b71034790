// PsClient over the raw-TCP ps data plane (wire format: ps_wire.h; server:
// ps_tcp_server.h): a worker's handle on one shard of one parameter server.
//
// Connections are persistent and dialed lazily, one per job in use (the
// hello names the job, the shard, K and the shard length; the server checks
// them against the job's shard before it allocates anything). A call takes
// an idle connection of its job or dials one, does one request/answer on
// it, and gives it back; concurrent calls (tests share one client among K
// worker threads) use as many connections. PsAllReduce's StartRound sends
// a ROUND (push + pull in one message) and keeps the connection for the
// matching FinishRound, which reads the reduced shard straight into the
// caller's buffer: one message each way per shard and step, no copy in
// user space on the worker.
//
// Errors name the shard and address: "ps shard 1 (10.0.0.5:7081, tcp):
// ..."; the server's own errors (missing pushes naming the workers, a
// mismatched K or length, an old step) keep their codes. A FinishRound
// that gets no answer by its deadline + reply_grace returns
// DeadlineExceededError (the server answers at the deadline itself, naming
// the missing workers). Thread-safe; Cancel() from any thread.
#ifndef LOCKSTEP_COMMON_PSNET_PS_TCP_CLIENT_H_
#define LOCKSTEP_COMMON_PSNET_PS_TCP_CLIENT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/collective/ps_aggregator.h"
#include "common/psnet/ps_wire.h"

namespace lockstep {

struct PsTcpClientOptions {
  // The job's data-plane secret (Assignment.data_plane_secret): each dial
  // answers the server's challenge with an HMAC under it (ps_wire.h). The
  // server must know it (PsTcpServer::RegisterSecret, or the gRPC
  // DataAddress the worker calls first).
  std::string secret;
  // Longest a dial (connect + hello) may take (also bounded by the call's
  // deadline).
  absl::Duration connect_timeout = absl::Seconds(10);
  // How long after its deadline a call still waits for the server's answer
  // (the server answers at the deadline, naming the missing workers).
  absl::Duration reply_grace = absl::Seconds(1);
  // An idle connection unused for this long is closed instead of reused
  // (the server closes idle ones after PsTcpServerOptions::idle_timeout).
  absl::Duration max_idle = absl::Minutes(5);
  // Idle connections kept per client.
  int max_idle_connections = 8;
  // --data_plane_tls: each dial is a mutual TLS session (the server must
  // hold a server or coordinator certificate from our CA) before the
  // challenge; null: plain TCP.
  std::shared_ptr<const dataconn::DataTls> tls;
  // Touched whenever a request's or answer's bytes move (PeerWait's
  // progress: a slow shard transfer is not a stuck one). Not owned; null =
  // none; must outlive the client.
  ProgressMark* progress = nullptr;
};

class PsTcpClient : public PsClient {
 public:
  // address: "host:port" of the shard server's data plane; shard: this
  // shard's index; num_workers: K; shard_len: its length in floats.
  PsTcpClient(std::string address, int shard, int num_workers, int64_t shard_len,
              PsTcpClientOptions options = {});
  ~PsTcpClient() override;
  PsTcpClient(const PsTcpClient&) = delete;
  PsTcpClient& operator=(const PsTcpClient&) = delete;

  absl::Status Push(uint64_t job, int64_t step, int worker, absl::Span<const float> shard_grad_sum,
                    int64_t count, absl::Time deadline) override;
  absl::Status Pull(uint64_t job, int64_t step, int worker, absl::Span<float> out, int64_t* count,
                    absl::Time deadline) override;
  // A round's connection carries `wire` (ps_wire.h's hello): connections
  // are kept per (job, wire). 16-bit values are encoded into and decoded
  // from the connection's own buffer (allocated once per connection).
  absl::Status StartRound(uint64_t job, int64_t step, int worker,
                          absl::Span<const float> shard_grad_sum, int64_t count,
                          absl::Time deadline, WireFormat wire) override;
  absl::Status FinishRound(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                           int64_t* count, absl::Time deadline, WireFormat wire) override;
  // Shuts every connection down (calls in flight return CancelledError at
  // once) and makes later calls return CancelledError.
  void Cancel() override;

  // Connections dialed so far (for tests).
  int64_t dials() const;

 private:
  struct Conn {
    int fd = -1;
    dataconn::Conn io;  // the stream (io.fd == fd); Release / the destructor close it
    uint64_t job = 0;
    WireFormat wire = WireFormat::kFloat32;
    // 16-bit values on their way (shared by the copies of this Conn, which
    // are one connection; used by one call at a time).
    std::shared_ptr<std::vector<uint16_t>> scratch;
    absl::Time idle_since;
  };

  absl::Status Named(const absl::Status& s) const;
  absl::Status CancelledStatus() const;
  // An idle connection of (job, wire) or a new one (dial + hello).
  absl::StatusOr<Conn> Acquire(uint64_t job, WireFormat wire, absl::Time deadline);
  // Back to the idle pool (reusable) or closed.
  void Release(Conn c, bool reusable);
  absl::Status SendRequest(const Conn& c, psnet::Kind kind, uint64_t job, int64_t step,
                           int worker, absl::Span<const float> payload, int64_t count,
                           absl::Time deadline);
  // Reads the answer to (job, step, worker): ACK (expect_result false) or
  // RESULT into `out`. *stream_ok false when the connection cannot be reused.
  absl::Status ReadAnswer(const Conn& c, uint64_t job, int64_t step, int worker,
                          bool expect_result, absl::Span<float> out, int64_t* count,
                          absl::Time deadline, bool* stream_ok);

  const std::string address_;
  const int shard_;
  const int num_workers_;
  const int64_t shard_len_;
  const PsTcpClientOptions options_;

  mutable absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  int64_t dials_ ABSL_GUARDED_BY(mu_) = 0;
  // Every open connection by fd (Cancel shuts them down; the destructor
  // closes them).
  std::map<int, dataconn::Conn> live_ ABSL_GUARDED_BY(mu_);
  std::vector<Conn> idle_ ABSL_GUARDED_BY(mu_);
  // Connections holding a started round (a vector that keeps its capacity:
  // no allocation per step).
  struct Round {
    uint64_t job;
    int64_t step;
    int worker;
    Conn conn;
  };
  std::vector<Round> rounds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_PSNET_PS_TCP_CLIENT_H_
