// What the coordinator tells the parameter servers named by its
// --ps_addresses (lockstep-server shards), without gRPC types: the
// data-plane secret of each job key it starts on them, and the job keys no
// rank uses any more. server/grpc_ps_control.h sends it (the ps service's
// Control RPC, which only a coordinator certificate may call); tests record
// it.
//
// Why: under TLS a ps server takes a job's data-plane secret only from the
// coordinator (PsTcpServerOptions::secrets_from_coordinator), so a worker
// certificate cannot claim a job key before that job's workers do; and an
// older generation's or an ended job's shards are freed at once instead of
// at the registry's idle eviction.
#ifndef LOCKSTEP_SERVER_PS_CONTROL_H_
#define LOCKSTEP_SERVER_PS_CONTROL_H_

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep {

// A job group's shape-agreement key: its group key with bit 63 set
// (worker/job_runner.h ShapeAgreementJob), under the same secret.
inline constexpr uint64_t kShapeRoundBit = uint64_t{1} << 63;

struct PsJobSecret {
  uint64_t job = 0;    // a group key, or its shape-agreement key (bit 63)
  std::string secret;  // dataauth::kSecretBytes bytes
};

class PsControl {
 public:
  virtual ~PsControl() = default;
  // Both are called under the coordinator's lock: they must queue and
  // return at once, never block on I/O and never call back into the
  // coordinator. `shards`: the job's ps addresses (each gets the message).
  // Delivery is best effort, with retries: a shard that never gets a secret
  // makes its workers' DataAddress fail (DEADLINE_EXCEEDED naming the job),
  // which fails or regroups the job by its policy; a lost forget leaves the
  // key to the shard's idle eviction.
  virtual void SetSecrets(const std::vector<std::string>& shards,
                          std::vector<PsJobSecret> secrets) = 0;
  virtual void Forget(const std::vector<std::string>& shards, std::vector<uint64_t> jobs) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_PS_CONTROL_H_
