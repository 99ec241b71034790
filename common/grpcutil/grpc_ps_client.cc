#include "common/grpcutil/grpc_ps_client.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpcutil/grpc_status.h"
#include "common/grpcutil/health_check.h"

namespace lockstep {
namespace {

constexpr absl::Duration kPullGrace = absl::Seconds(1);

}  // namespace

GrpcPsClient::GrpcPsClient(std::shared_ptr<grpc::Channel> channel, std::string address,
                           int shard, int num_workers, int64_t shard_len)
    : channel_(channel),
      stub_(v1::ParameterServer::NewStub(channel)),
      address_(std::move(address)),
      shard_(shard),
      num_workers_(num_workers),
      shard_len_(shard_len) {}

absl::Status GrpcPsClient::Named(const grpc::Status& s) const {
  absl::Status st = FromGrpcStatus(s);
  if (st.ok()) return st;
  // Calls wait for a connection (a shard still starting is not an error):
  // one that never came ends "Deadline Exceeded", or "Cancelled" when the
  // job was stopped meanwhile (the coordinator stops a job whose every rank
  // waits for a shard); say why it did not (a refused connection, a TLS
  // handshake naming the certificate's role).
  std::string why;
  if (st.code() == absl::StatusCode::kDeadlineExceeded ||
      st.code() == absl::StatusCode::kCancelled) {
    const std::string failure = ConnectFailure(channel_, absl::Seconds(1));
    if (!failure.empty()) why = absl::StrCat(" (cannot connect: ", failure, ")");
  }
  return absl::Status(st.code(), absl::StrCat("ps shard ", shard_, " (", address_, "): ",
                                              st.message(), why));
}

bool GrpcPsClient::Begin(grpc::ClientContext* ctx) {
  absl::MutexLock l(&mu_);
  if (cancelled_) return false;
  active_.insert(ctx);
  return true;
}

void GrpcPsClient::End(grpc::ClientContext* ctx) {
  absl::MutexLock l(&mu_);
  active_.erase(ctx);
}

void GrpcPsClient::Cancel() {
  absl::MutexLock l(&mu_);
  cancelled_ = true;
  for (grpc::ClientContext* ctx : active_) ctx->TryCancel();
}

absl::StatusOr<std::string> GrpcPsClient::DataAddress(absl::Time deadline, uint64_t job,
                                                      const std::string& secret) {
  v1::DataAddressRequest req;
  req.set_job(job);
  req.set_data_plane_secret(secret);
  v1::DataAddressReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  ctx.set_wait_for_ready(true);
  if (!Begin(&ctx)) return Named(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  grpc::Status rpc = stub_->DataAddress(&ctx, req, &reply);
  End(&ctx);
  if (absl::Status s = Named(rpc); !s.ok()) return s;
  if (reply.port() <= 0 || reply.port() > 65535) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ps shard ", shard_, " (", address_,
        "): spec.ps_transport is TCP but this server has no raw-TCP data plane (start "
        "lockstep-server with --data_port >= 0, the coordinator with --ps_data_port >= 0, or "
        "submit with --ps_transport=grpc)"));
  }
  std::string host = reply.host();
  if (host.empty()) {
    const size_t colon = address_.rfind(':');
    host = colon == std::string::npos ? address_ : address_.substr(0, colon);
  }
  return absl::StrCat(host, ":", reply.port());
}

absl::Status GrpcPsClient::Push(uint64_t job, int64_t step, int worker,
                                absl::Span<const float> shard_grad_sum, int64_t count,
                                absl::Time deadline) {
  return PushAs(job, step, worker, shard_grad_sum, count, deadline, WireFormat::kFloat32);
}

absl::Status GrpcPsClient::Pull(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                                int64_t* count, absl::Time deadline) {
  return PullAs(job, step, worker, out, count, deadline, WireFormat::kFloat32);
}

absl::Status GrpcPsClient::StartRound(uint64_t job, int64_t step, int worker,
                                      absl::Span<const float> shard_grad_sum, int64_t count,
                                      absl::Time deadline, WireFormat wire) {
  return PushAs(job, step, worker, shard_grad_sum, count, deadline, wire);
}

absl::Status GrpcPsClient::FinishRound(uint64_t job, int64_t step, int worker,
                                       absl::Span<float> out, int64_t* count,
                                       absl::Time deadline, WireFormat wire) {
  return PullAs(job, step, worker, out, count, deadline, wire);
}

absl::Status GrpcPsClient::PushAs(uint64_t job, int64_t step, int worker,
                                  absl::Span<const float> shard_grad_sum, int64_t count,
                                  absl::Time deadline, WireFormat wire) {
  v1::PushRequest req;
  req.set_job(job);
  req.set_step(step);
  req.set_shard(shard_);
  req.set_worker_rank(worker);
  req.set_num_workers(num_workers_);
  req.set_count(count);
  req.set_shard_len(static_cast<int64_t>(shard_grad_sum.size()));
  const int64_t n = static_cast<int64_t>(shard_grad_sum.size());
  if (wire == WireFormat::kFloat32) {
    req.set_grad_sum(reinterpret_cast<const char*>(shard_grad_sum.data()), n * sizeof(float));
  } else {
    // Each value rounded once to 16 bits (ps.proto wire_format).
    req.set_wire_format(WireFormatCode(wire));
    std::string* bytes = req.mutable_grad_sum();
    bytes->resize(static_cast<size_t>(n) * sizeof(uint16_t));
    Encode16(wire, shard_grad_sum.data(), n, reinterpret_cast<uint16_t*>(bytes->data()));
  }
  v1::PushReply reply;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(deadline));
  ctx.set_wait_for_ready(true);  // a server still starting is not an error
  if (!Begin(&ctx)) return Named(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  grpc::Status s = stub_->Push(&ctx, req, &reply);
  End(&ctx);
  return Named(s);
}

absl::Status GrpcPsClient::PullAs(uint64_t job, int64_t step, int worker,
                                  absl::Span<float> out, int64_t* count, absl::Time deadline,
                                  WireFormat wire) {
  if (count == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("ps shard ", shard_, " (", address_, "): count is null"));
  }
  v1::PullRequest req;
  req.set_wire_format(WireFormatCode(wire));
  req.set_job(job);
  req.set_step(step);
  req.set_shard(shard_);
  req.set_worker_rank(worker);
  req.set_num_workers(num_workers_);
  req.set_shard_len(static_cast<int64_t>(out.size()));
  req.set_wait_micros(std::max<int64_t>(1, absl::ToInt64Microseconds(deadline - absl::Now())));
  v1::PullReply reply;
  grpc::ClientContext ctx;
  // The server answers at `deadline` with the missing workers named; give
  // that answer time to arrive before the RPC itself gives up.
  ctx.set_deadline(absl::ToChronoTime(deadline + kPullGrace));
  ctx.set_wait_for_ready(true);
  if (!Begin(&ctx)) return Named(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  grpc::Status rpc = stub_->Pull(&ctx, req, &reply);
  End(&ctx);
  if (absl::Status s = Named(rpc); !s.ok()) return s;
  const int64_t n = static_cast<int64_t>(out.size());
  const size_t want = static_cast<size_t>(n * WireBytesPerFloat(wire));
  if (reply.grad_sum().size() != want) {
    return absl::DataLossError(absl::StrCat("ps shard ", shard_, " (", address_, "): pulled ",
                                            reply.grad_sum().size(), " bytes, expected ", want,
                                            " (", n, " values, wire ", WireFormatName(wire),
                                            ")"));
  }
  if (n > 0 && wire == WireFormat::kFloat32) {
    std::memcpy(out.data(), reply.grad_sum().data(), want);
  } else if (n > 0) {
    // The bytes of a std::string: copied to aligned 16-bit values first.
    std::vector<uint16_t> values(static_cast<size_t>(n));
    std::memcpy(values.data(), reply.grad_sum().data(), want);
    Decode16(wire, values.data(), n, out.data());
  }
  *count = reply.count();
  return absl::OkStatus();
}

}  // namespace lockstep
