// What the coordinator tells the parameter servers named by its
// --ps_addresses (lockstep-server shards), without gRPC types: each job key
// it starts on them, with the job's shape (K workers, S shards) and, for a
// raw-TCP job, its data-plane secret; and the job keys no rank uses any
// more. server/grpc_ps_control.h sends it (the ps service's Control RPC,
// which only a coordinator certificate may call); tests record it.
//
// Why: a lockstep-server creates only the keys its coordinator started,
// with the job's K and S (server/ps/ps_key_table.h), so a request cannot
// make it hold shards for a key, K or shard index no job has; under TLS it
// takes a job's data-plane secret only from the coordinator
// (PsTcpServerOptions::secrets_from_coordinator), so a worker certificate
// cannot claim a job key before that job's workers do; and an older
// generation's or an ended job's shards are freed at once instead of at
// the registry's idle eviction.
#ifndef LOCKSTEP_SERVER_PS_CONTROL_H_
#define LOCKSTEP_SERVER_PS_CONTROL_H_

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep {

// A job group's shape-agreement key: its group key with bit 63 set
// (worker/job_runner.h ShapeAgreementJob), under the same secret.
inline constexpr uint64_t kShapeRoundBit = uint64_t{1} << 63;

struct PsKeyStart {
  uint64_t job = 0;    // a group key, or its shape-agreement key (bit 63)
  std::string secret;  // dataauth::kSecretBytes bytes; empty for a gRPC ps job
  int num_workers = 0; // the generation's K
  int num_shards = 0;  // the job's S
};

class PsControl {
 public:
  virtual ~PsControl() = default;
  // Both are called under the coordinator's lock: they must queue and
  // return at once, never block on I/O and never call back into the
  // coordinator. `shards`: the job's ps addresses (each gets the message).
  // Delivery is best effort, with retries; the coordinator sends every
  // running job's current keys again every 5 s (Coordinator::
  // ResendPsKeysLocked), so a lost message or a restarted shard costs at
  // most that. A shard that still has no key refuses its workers' requests
  // after 10 s (NOT_FOUND naming the key; a DataAddress waiting for the
  // secret: DEADLINE_EXCEEDED), which fails or regroups the job by its
  // policy; a lost forget leaves the key to the shard's idle eviction.
  virtual void StartKeys(const std::vector<std::string>& shards, std::vector<PsKeyStart> keys) = 0;
  virtual void Forget(const std::vector<std::string>& shards, std::vector<uint64_t> jobs) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_PS_CONTROL_H_
