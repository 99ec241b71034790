// The raw-TCP data plane of a parameter server (wire format: ps_wire.h): a
// listening socket and one thread per worker connection, over the same
// PsShardRegistry as the server's gRPC service, so a shard's state and
// counters are one whatever the front end.
//
// Why: over gRPC a ps round of the main job's 814 KB gradient crosses
// gRPC's threads, protobuf copies and HTTP/2 flow control twice per worker
// (Push, then Pull). Here a worker sends one ROUND message per shard and
// step and reads the reduced shard straight into its gradient buffer; the
// server reads each push into the connection's buffer, folds it into the
// shard (rank order, PsShard), waits for the step's K pushes and writes
// the sum back from the same buffer.
//
// Threading: one accept thread, one thread per connection (at most
// max_connections; more are refused with a hello reply that says so).
// Blocking I/O with deadlines in those threads; no lock is held across I/O.
// A connection thread waiting for a step's pushes checks every 50 ms whether
// its client hung up or the server is shutting down.
//
// Authentication: every connection gets a challenge (a random nonce) on
// accept and must answer with a hello whose HMAC fits the job's data-plane
// secret, registered with RegisterSecret (the gRPC DataAddress does, for the
// workers that call it with their Assignment's secret). The mac is checked
// before the shard is looked up or anything allocated; a refusal is
// answered PERMISSION_DENIED, counted, and reported to options.on_reject
// naming the peer's address.
//
// Bad input never stops the server: a hello that does not fit (magic,
// version, K, shard length against the job's shard and the server's cap) is
// answered with the error and closed; a frame that does not fit (kind, job,
// chunk, worker, payload length) is answered with ERROR naming the field
// and closed, before any payload is read. rejected_connections() counts
// both.
#ifndef LOCKSTEP_COMMON_PSNET_PS_TCP_SERVER_H_
#define LOCKSTEP_COMMON_PSNET_PS_TCP_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/collective/ps_aggregator.h"
#include "common/psnet/ps_wire.h"

namespace lockstep {

struct PsTcpServerOptions {
  // How long an accepted connection may take to send its hello.
  absl::Duration hello_timeout = absl::Seconds(5);
  // A connection that ends having sent nothing within this of its accept
  // is a reachability probe (worker/net/reach_probe.h) or a port check:
  // closed without a refusal. Later it is refused as before.
  absl::Duration probe_close = absl::Seconds(1);
  // A connection without a request for this long is closed (clients stop
  // reusing a connection long before: PsTcpClientOptions::max_idle).
  absl::Duration idle_timeout = absl::Minutes(10);
  // Once a frame has started, its header and payload must arrive within this.
  absl::Duration frame_timeout = absl::Seconds(30);
  int max_connections = 256;
  // Called with the reason of every refused connection ("connection from
  // 10.0.0.7:51234: ..."), outside the server's locks. Empty: counted only.
  std::function<void(const std::string&)> on_reject;
  // Data-plane secrets held (RegisterSecret). When full, a new job's secret
  // replaces the one idle longest among those idle for `secret_idle` (no
  // registration, no authenticated hello and no open connection of that
  // job for that long); if none is, the new one is refused. A running job's
  // secret is never dropped.
  size_t max_secrets = 4096;
  absl::Duration secret_idle = absl::Minutes(10);
  // Under TLS (lockstep-server with --tls_*): only the coordinator fixes a
  // job's secret (SetCoordinatorSecret, from the ps service's Control RPC,
  // which only a coordinator certificate may call). RegisterSecret then
  // checks a worker's secret against it, waiting for it up to the caller's
  // deadline, and never stores one of its own, so a worker certificate
  // cannot claim a job key before that job's workers do. False (plain
  // text): the first registration fixes a job's secret, and the
  // coordinator's replaces it.
  bool secrets_from_coordinator = false;
  // The clock of secret idleness; empty = absl::Now (tests pass a fake one).
  std::function<absl::Time()> now;
  // --data_plane_tls: every connection is a mutual TLS session (the client
  // must hold a worker certificate from our CA) before the challenge; the
  // handshake counts against hello_timeout. Null: plain TCP.
  std::shared_ptr<const dataconn::DataTls> tls;
};

class PsTcpServer {
 public:
  // Listens on host:port (port 0: OS-chosen; "0.0.0.0" / "[::]" every
  // interface). `registry` is not owned and must outlive the server.
  static absl::StatusOr<std::unique_ptr<PsTcpServer>> Start(PsShardRegistry* registry,
                                                            const std::string& host, int port,
                                                            PsTcpServerOptions options = {});
  ~PsTcpServer();  // Shutdown()
  PsTcpServer(const PsTcpServer&) = delete;
  PsTcpServer& operator=(const PsTcpServer&) = delete;

  int port() const { return port_; }

  // Stops accepting, ends every connection (waiting requests return at
  // once) and joins the threads. Idempotent.
  void Shutdown();

  // The data-plane secret of job key `job` (dataauth::kSecretBytes bytes):
  // the first registration fixes it; another secret for the same job is
  // PermissionDeniedError (nothing changes), a wrong length
  // InvalidArgumentError. At most options.max_secrets jobs are held: one
  // more replaces the secret idle longest among those idle for
  // options.secret_idle (see there), else ResourceExhaustedError naming the
  // limit (the job's DataAddress fails with it). Re-registering the same
  // secret, and every authenticated hello, mark the job active.
  // Thread-safe.
  //
  // With options.secrets_from_coordinator, nothing is stored: the call
  // waits until SetCoordinatorSecret set job's secret (or `deadline`, or
  // Shutdown), then OK when `secret` is that one (the job is marked
  // active), PermissionDeniedError when not, DeadlineExceededError naming
  // the job when the coordinator set none by then, UnavailableError when
  // shut down.
  absl::Status RegisterSecret(uint64_t job, const std::string& secret,
                              absl::Time deadline = absl::InfinitePast());

  // The coordinator's secret for `job`: stored (replacing any other, a
  // worker's registration in plain text included), and every RegisterSecret
  // waiting for it is woken. The table's limit as in RegisterSecret.
  // Thread-safe; never blocks on I/O.
  absl::Status SetCoordinatorSecret(uint64_t job, const std::string& secret);

  // Drops job's secret (the coordinator's word that no rank uses the key
  // any more): later hellos for it are refused; open connections keep
  // going. Thread-safe.
  void ForgetSecret(uint64_t job);

  // Hellos and frames refused (see the header comment), and the last reason.
  int64_t rejected_connections() const;
  std::string last_rejection() const;
  // Connections currently open.
  int connections() const;

 private:
  struct Conn {
    int fd = -1;
    dataconn::Conn io;  // its stream (io.fd == fd); closed by Reap
    std::string peer;  // "host:port" of the client
    std::thread thread;
    std::atomic<bool> done{false};
    // The job its hello authenticated for (mu_; none before the hello).
    bool has_job = false;
    uint64_t job = 0;
  };
  struct Secret {
    std::string secret;
    absl::Time last_active;  // registration, authenticated hello, or a connection ending
    bool from_coordinator = false;  // SetCoordinatorSecret
  };
  // Stores a new job's secret, evicting an idle one when the table is full
  // (RegisterSecret's rule), or ResourceExhaustedError.
  absl::Status InsertSecretLocked(uint64_t job, const std::string& secret, absl::Time now,
                                  bool from_coordinator) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  PsTcpServer(PsShardRegistry* registry, int listen_fd, int wake_fd, int port,
              PsTcpServerOptions options);
  void AcceptLoop();
  void Serve(Conn* conn);
  void Reject(const std::string& why);
  // The secret registered for `job`, or "" when none is.
  std::string SecretOf(uint64_t job) const;
  absl::Time Now() const { return options_.now ? options_.now() : absl::Now(); }
  // Joins and frees finished connection threads (all when `all`).
  void Reap(bool all);

  PsShardRegistry* const registry_;
  const int listen_fd_;
  const int wake_fd_;  // eventfd: wakes the accept loop on shutdown
  const int port_;
  const PsTcpServerOptions options_;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;

  mutable absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<Conn>> conns_ ABSL_GUARDED_BY(mu_);
  int64_t rejected_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Secret> secrets_ ABSL_GUARDED_BY(mu_);
  std::string last_rejection_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_PSNET_PS_TCP_SERVER_H_
