#include "server/ps/ps_service.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/grpcutil/grpc_status.h"
#include "common/net/data_auth.h"

namespace lockstep {

PsService::PsService(int max_jobs)
    : owned_(std::make_unique<PsShardRegistry>(max_jobs)), registry_(owned_.get()) {}

PsService::PsService(PsShardRegistry* registry) : registry_(registry) {}

void PsService::SetDataAddress(int port, std::string host) {
  absl::MutexLock l(&data_mu_);
  data_host_ = std::move(host);
  data_port_ = port;
}

PsService::SecretHooks DataPlaneSecretHooks(PsTcpServer* plane) {
  PsService::SecretHooks hooks;
  hooks.register_secret = [plane](uint64_t job, const std::string& secret, absl::Time deadline) {
    return plane->RegisterSecret(job, secret, deadline);
  };
  hooks.set_secret = [plane](uint64_t job, const std::string& secret) {
    return plane->SetCoordinatorSecret(job, secret);
  };
  hooks.forget_secret = [plane](uint64_t job) { plane->ForgetSecret(job); };
  return hooks;
}

void PsService::SetSecretHooks(SecretHooks hooks) {
  absl::MutexLock l(&data_mu_);
  secret_hooks_ = std::move(hooks);
}

grpc::Status PsService::DataAddress(grpc::ServerContext* ctx, const v1::DataAddressRequest* req,
                                    v1::DataAddressReply* reply) {
  SecretHooks hooks;
  {
    absl::MutexLock l(&data_mu_);
    reply->set_port(data_port_);
    reply->set_host(data_host_);
    hooks = secret_hooks_;
  }
  if (req->data_plane_secret().empty() || reply->port() == 0) return grpc::Status::OK;
  if (!hooks.register_secret) {
    return ToGrpcStatus(absl::FailedPreconditionError(absl::StrCat(
        "ps DataAddress: job ", req->job(),
        ": this server's TCP data plane takes no data-plane secrets")));
  }
  absl::Time deadline = absl::Now() + kMaxSecretWait;
  if (ctx != nullptr) deadline = std::min(deadline, absl::FromChrono(ctx->deadline()));
  return ToGrpcStatus(hooks.register_secret(req->job(), req->data_plane_secret(), deadline));
}

grpc::Status PsService::Control(grpc::ServerContext*, const v1::PsControlRequest* req,
                                v1::PsControlReply*) {
  // Checked whole before anything is applied.
  if (req->secrets_size() > kMaxControlEntries || req->forget_jobs_size() > kMaxControlEntries) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "ps Control: ", req->secrets_size(), " secrets and ", req->forget_jobs_size(),
        " forget_jobs, expected at most ", kMaxControlEntries, " of each")));
  }
  bool any_secret = false;
  for (const v1::JobSecret& js : req->secrets()) {
    const size_t bytes = js.data_plane_secret().size();
    if (bytes != 0 && bytes != dataauth::kSecretBytes) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "ps Control: secrets: job ", js.job(), ": data_plane_secret has ", bytes,
          " bytes, expected ", dataauth::kSecretBytes, " (or none)")));
    }
    const bool shaped = js.num_workers() != 0 || js.num_shards() != 0;
    if (shaped && (js.num_workers() < 1 || js.num_workers() > PsShardRegistry::kMaxWorkers ||
                   js.num_shards() < 1 || js.num_shards() > PsShardRegistry::kMaxShards)) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "ps Control: secrets: job ", js.job(), ": num_workers ", js.num_workers(),
          " and num_shards ", js.num_shards(), ", expected 1..", PsShardRegistry::kMaxWorkers,
          " and 1..", PsShardRegistry::kMaxShards)));
    }
    if (bytes == 0 && !shaped) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "ps Control: secrets: job ", js.job(), ": neither a data_plane_secret nor a shape")));
    }
    any_secret = any_secret || bytes != 0;
  }
  SecretHooks hooks;
  PsKeyTable* table = nullptr;
  {
    absl::MutexLock l(&data_mu_);
    hooks = secret_hooks_;
    table = key_table_;
  }
  if (any_secret && !hooks.set_secret) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        "ps Control: this server has no TCP data plane to take data-plane secrets"));
  }
  for (const v1::JobSecret& js : req->secrets()) {
    // The shape first: a worker that has the secret may connect at once.
    if (table != nullptr && js.num_workers() != 0) {
      if (absl::Status s = table->Set(js.job(), PsKeyShape{js.num_workers(), js.num_shards()});
          !s.ok()) {
        return ToGrpcStatus(s);
      }
    }
    if (js.data_plane_secret().empty()) continue;
    if (absl::Status s = hooks.set_secret(js.job(), js.data_plane_secret()); !s.ok()) {
      return ToGrpcStatus(s);
    }
  }
  for (uint64_t job : req->forget_jobs()) {
    if (table != nullptr) table->Forget(job);
    registry_->Forget(job);
    if (hooks.forget_secret) hooks.forget_secret(job);
  }
  return grpc::Status::OK;
}

void PsService::SetKeyTable(PsKeyTable* table) {
  absl::MutexLock l(&data_mu_);
  key_table_ = table;
}

namespace {
// How long a request may wait for its key's shape (PsKeyTable::Wait caps
// it too): at most kMaxSecretWait, and ending 100 ms before the call's
// deadline, so that the caller reads why (NOT_FOUND naming the key), not
// its own DEADLINE_EXCEEDED.
absl::Time KeyWaitDeadline(const grpc::ServerContext* ctx) {
  absl::Time d = absl::Now() + PsService::kMaxSecretWait;
  if (ctx != nullptr && ctx->deadline() != std::chrono::system_clock::time_point::max()) {
    d = std::min(d, absl::FromChrono(ctx->deadline()) - absl::Milliseconds(100));
  }
  return d;
}
}  // namespace

grpc::Status PsService::Push(grpc::ServerContext* ctx, const v1::PushRequest* req,
                             v1::PushReply*) {
  absl::StatusOr<WireFormat> wire = WireFormatFromCode(req->wire_format());
  if (!wire.ok()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("ps push: job ", req->job(), " step ", req->step(), " worker ",
                     req->worker_rank(), ": wire_format: ", wire.status().message())));
  }
  const int64_t per_value = WireBytesPerFloat(*wire);
  if (req->shard_len() < 0 ||
      req->grad_sum().size() != static_cast<size_t>(req->shard_len()) * per_value) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "ps push: job ", req->job(), " step ", req->step(), " worker ", req->worker_rank(),
        ": grad_sum has ", req->grad_sum().size(), " bytes, expected shard_len ",
        req->shard_len(), " x ", per_value, " (wire_format ", WireFormatName(*wire), ")")));
  }
  auto shard = registry_->GetShard(req->job(), req->shard(), req->num_workers(),
                                   req->shard_len(), KeyWaitDeadline(ctx));
  if (!shard.ok()) return ToGrpcStatus(shard.status());
  // The bytes are float32 in the sender's (and our) native layout; copied
  // into an aligned scratch buffer kept across calls.
  std::unique_ptr<std::vector<float>> data;
  {
    absl::MutexLock l(&scratch_mu_);
    if (!scratch_.empty()) {
      data = std::move(scratch_.back());
      scratch_.pop_back();
    }
  }
  if (data == nullptr) data = std::make_unique<std::vector<float>>();
  data->resize(req->shard_len());
  if (data->empty()) {
  } else if (*wire == WireFormat::kFloat32) {
    std::memcpy(data->data(), req->grad_sum().data(), req->grad_sum().size());
  } else {
    // The string's bytes copied to aligned 16-bit values, then widened.
    std::vector<uint16_t> packed(static_cast<size_t>(req->shard_len()));
    std::memcpy(packed.data(), req->grad_sum().data(), req->grad_sum().size());
    Decode16(*wire, packed.data(), req->shard_len(), data->data());
  }
  absl::Status pushed =
      (*shard)->Push(req->job(), req->step(), req->worker_rank(), *data, req->count());
  {
    absl::MutexLock l(&scratch_mu_);
    if (scratch_.size() < 16) scratch_.push_back(std::move(data));
  }
  if (pushed.ok()) {
    registry_->CountPush(static_cast<int64_t>(req->grad_sum().size() + sizeof(int64_t)));
  }
  return ToGrpcStatus(pushed);
}

grpc::Status PsService::Pull(grpc::ServerContext* ctx, const v1::PullRequest* req,
                             v1::PullReply* reply) {
  absl::StatusOr<WireFormat> wire = WireFormatFromCode(req->wire_format());
  if (!wire.ok()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("ps pull: job ", req->job(), " step ", req->step(), " worker ",
                     req->worker_rank(), ": wire_format: ", wire.status().message())));
  }
  auto shard = registry_->GetShard(req->job(), req->shard(), req->num_workers(),
                                   req->shard_len(), KeyWaitDeadline(ctx));
  if (!shard.ok()) return ToGrpcStatus(shard.status());
  int64_t count = 0;
  // Wait as long as the client asked (wait_micros), never past its RPC
  // deadline, never longer than 5 minutes.
  absl::Time deadline = absl::Now() + absl::Minutes(5);
  if (req->wait_micros() > 0) {
    deadline = std::min(deadline, absl::Now() + absl::Microseconds(req->wait_micros()));
  }
  if (ctx->deadline() != std::chrono::system_clock::time_point::max()) {
    deadline = std::min(deadline, absl::FromChrono(ctx->deadline()));
  }
  // Wait in slices so that a pull the client has given up on (a cancelled
  // job) frees this server thread within a slice, not at its deadline. The
  // reply is allocated only once the step is complete, at the length the
  // shard holds (checked against the request by GetShard): a pull that
  // waits costs no memory.
  waiting_pulls_.fetch_add(1, std::memory_order_relaxed);
  absl::Status s;
  for (;;) {
    const absl::Time slice = std::min(deadline, absl::Now() + kCancelCheckEvery);
    s = (*shard)->WaitComplete(req->job(), req->step(), req->worker_rank(), slice);
    if (s.code() != absl::StatusCode::kDeadlineExceeded || slice >= deadline) break;
    if (ctx->IsCancelled()) {
      s = absl::CancelledError(absl::StrFormat(
          "pull (job %d step %d shard %d) by worker %d: cancelled by the client", req->job(),
          req->step(), req->shard(), req->worker_rank()));
      break;
    }
  }
  std::string* bytes = reply->mutable_grad_sum();
  if (s.ok() && *wire == WireFormat::kFloat32) {
    bytes->resize(static_cast<size_t>((*shard)->shard_len()) * sizeof(float));
    // Complete: returns at once unless the step was recycled meanwhile.
    s = (*shard)->Pull(
        req->job(), req->step(), req->worker_rank(),
        absl::MakeSpan(reinterpret_cast<float*>(bytes->data()), (*shard)->shard_len()), &count,
        absl::Now());
  } else if (s.ok()) {
    // The float32 sum, rounded once to 16 bits: every worker decodes the
    // same bits.
    const int64_t n = (*shard)->shard_len();
    std::vector<float> sum(static_cast<size_t>(n));
    s = (*shard)->Pull(req->job(), req->step(), req->worker_rank(), absl::MakeSpan(sum),
                       &count, absl::Now());
    if (s.ok()) {
      bytes->resize(static_cast<size_t>(n) * sizeof(uint16_t));
      Encode16(*wire, sum.data(), n, reinterpret_cast<uint16_t*>(bytes->data()));
    }
  }
  waiting_pulls_.fetch_sub(1, std::memory_order_relaxed);
  if (!s.ok()) return ToGrpcStatus(s);
  reply->set_count(count);
  registry_->CountPull(static_cast<int64_t>(bytes->size() + sizeof(int64_t)));
  return grpc::Status::OK;
}

}  // namespace lockstep
