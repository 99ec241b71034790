#include "common/train/replica_state.h"

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

constexpr char kMagic[4] = {'L', 'K', 'R', 'S'};
constexpr uint32_t kVersion = 1;

void PutU64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

// The body's floats, read without assuming alignment.
std::vector<float> Floats(const char* p, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (n > 0) std::memcpy(out.data(), p, static_cast<size_t>(n) * sizeof(float));
  return out;
}

}  // namespace

WeightHash ReplicaIdentity(const Replica& replica) {
  return HashReplica(replica.params(), replica.optimizer().steps(), replica.optimizer().slots());
}

int64_t ExpectedStateBytes(const Replica& replica) {
  return kReplicaStateHeaderBytes + 4 * (replica.num_params() + replica.optimizer().num_slots());
}

std::string EncodeReplicaState(const Replica& replica, int64_t next_step) {
  const auto params = replica.params();
  const auto slots = replica.optimizer().slots();
  std::string out(static_cast<size_t>(ExpectedStateBytes(replica)), '\0');
  char* p = out.data();
  std::memcpy(p, kMagic, 4);
  for (int i = 0; i < 4; ++i) p[4 + i] = static_cast<char>((kVersion >> (8 * i)) & 0xff);
  PutU64(p + 8, static_cast<uint64_t>(next_step));
  PutU64(p + 16, params.size());
  PutU64(p + 24, static_cast<uint64_t>(replica.optimizer().steps()));
  PutU64(p + 32, slots.size());
  const WeightHash h = ReplicaIdentity(replica);
  PutU64(p + 40, h.hi);
  PutU64(p + 48, h.lo);
  char* body = p + kReplicaStateHeaderBytes;
  if (!params.empty()) std::memcpy(body, params.data(), params.size() * sizeof(float));
  if (!slots.empty()) {
    std::memcpy(body + params.size() * sizeof(float), slots.data(), slots.size() * sizeof(float));
  }
  return out;
}

absl::StatusOr<ReplicaStateHeader> ParseReplicaStateHeader(absl::string_view bytes,
                                                           int64_t expected_params,
                                                           int64_t expected_slots) {
  if (static_cast<int64_t>(bytes.size()) < kReplicaStateHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat("replica state: ", bytes.size(),
                                                   " bytes, shorter than its ",
                                                   kReplicaStateHeaderBytes, "-byte header"));
  }
  const char* p = bytes.data();
  if (std::memcmp(p, kMagic, 4) != 0) {
    return absl::InvalidArgumentError("replica state: bad magic (expected \"LKRS\")");
  }
  uint32_t version = 0;
  for (int i = 0; i < 4; ++i) version |= uint32_t{static_cast<unsigned char>(p[4 + i])} << (8 * i);
  if (version != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica state: version ", version, ", this build reads ", kVersion));
  }
  ReplicaStateHeader h;
  const uint64_t fields[4] = {GetU64(p + 8), GetU64(p + 16), GetU64(p + 24), GetU64(p + 32)};
  const char* names[4] = {"next_step", "num_params", "optimizer_steps", "num_slots"};
  for (int i = 0; i < 4; ++i) {
    if (fields[i] > (uint64_t{1} << 62)) {
      return absl::InvalidArgumentError(
          absl::StrCat("replica state: ", names[i], " ", fields[i], " is out of range"));
    }
  }
  h.next_step = static_cast<int64_t>(fields[0]);
  h.num_params = static_cast<int64_t>(fields[1]);
  h.optimizer_steps = static_cast<int64_t>(fields[2]);
  h.num_slots = static_cast<int64_t>(fields[3]);
  h.hash.hi = GetU64(p + 40);
  h.hash.lo = GetU64(p + 48);
  if (h.num_params != expected_params) {
    return absl::FailedPreconditionError(
        absl::StrCat("replica state has ", h.num_params, " parameters, this job's model has ",
                     expected_params));
  }
  if (h.num_slots != expected_slots) {
    return absl::FailedPreconditionError(
        absl::StrCat("replica state has ", h.num_slots, " optimizer slots, this job's optimizer has ",
                     expected_slots));
  }
  return h;
}

absl::StatusOr<int64_t> RestoreReplicaState(absl::string_view bytes, Replica* replica) {
  auto header = ParseReplicaStateHeader(bytes, replica->num_params(),
                                        replica->optimizer().num_slots());
  if (!header.ok()) return header.status();
  if (static_cast<int64_t>(bytes.size()) != header->total_bytes()) {
    return absl::DataLossError(absl::StrCat("replica state: ", bytes.size(),
                                            " bytes, its header says ", header->total_bytes()));
  }
  const char* body = bytes.data() + kReplicaStateHeaderBytes;
  OptimizerState opt;
  opt.steps = header->optimizer_steps;
  opt.slots = Floats(body + 4 * header->num_params, header->num_slots);
  std::vector<float> params = Floats(body, header->num_params);
  const WeightHash h = HashReplica(params, opt.steps, opt.slots);
  if (h != header->hash) {
    return absl::DataLossError(absl::StrCat("replica state: the body's hash ", h.ToHex(),
                                            " differs from the header's ",
                                            header->hash.ToHex()));
  }
  if (absl::Status s = replica->mutable_optimizer().SetState(opt); !s.ok()) return s;
  std::copy(params.begin(), params.end(), replica->mutable_params().begin());
  return header->next_step;
}

}  // namespace lockstep
