#include "worker/worker_metrics.h"

#include <utility>

#include "absl/status/status.h"

namespace lockstep {
namespace {

class CountingTransport : public Transport {
 public:
  CountingTransport(Transport* inner, Counter* sent, Counter* received)
      : inner_(inner), sent_(sent), received_(received) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  int64_t max_message_bytes() const override { return inner_->max_message_bytes(); }
  absl::Status Send(int to, const MessageKey& key, absl::Span<const uint8_t> data,
                    absl::Time deadline) override {
    absl::Status s = inner_->Send(to, key, data, deadline);
    if (s.ok()) sent_->Increment(static_cast<double>(data.size()));
    return s;
  }
  absl::Status SendBorrowed(int to, const MessageKey& key, absl::Span<const uint8_t> data,
                            absl::Time deadline) override {
    absl::Status s = inner_->SendBorrowed(to, key, data, deadline);
    if (s.ok()) sent_->Increment(static_cast<double>(data.size()));
    return s;
  }
  absl::Status FlushSends(absl::Time deadline) override { return inner_->FlushSends(deadline); }
  absl::Status Recv(int from, const MessageKey& key, absl::Span<uint8_t> out,
                    absl::Time deadline) override {
    absl::Status s = inner_->Recv(from, key, out, deadline);
    if (s.ok()) received_->Increment(static_cast<double>(out.size()));
    return s;
  }

 private:
  Transport* const inner_;
  Counter* const sent_;
  Counter* const received_;
};

class CountingPsClient : public PsClient {
 public:
  CountingPsClient(PsClient* inner, Counter* sent, Counter* received, WorkerMetrics* metrics)
      : inner_(inner), sent_(sent), received_(received), metrics_(metrics) {}
  absl::Status Push(uint64_t job, int64_t step, int worker,
                    absl::Span<const float> shard_grad_sum, int64_t count,
                    absl::Time deadline) override {
    return Sent(inner_->Push(job, step, worker, shard_grad_sum, count, deadline),
                shard_grad_sum.size());
  }
  absl::Status Pull(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                    int64_t* count, absl::Time deadline) override {
    return Received(inner_->Pull(job, step, worker, out, count, deadline), out.size());
  }
  // The pipelined round (the raw-TCP ps client sends push and pull as one
  // message): forwarded, counted like Push and Pull.
  absl::Status StartRound(uint64_t job, int64_t step, int worker,
                          absl::Span<const float> shard_grad_sum, int64_t count,
                          absl::Time deadline, WireFormat wire) override {
    return Sent(inner_->StartRound(job, step, worker, shard_grad_sum, count, deadline, wire),
                shard_grad_sum.size(), wire);
  }
  absl::Status FinishRound(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                           int64_t* count, absl::Time deadline, WireFormat wire) override {
    return Received(inner_->FinishRound(job, step, worker, out, count, deadline, wire),
                    out.size(), wire);
  }
  void Cancel() override { inner_->Cancel(); }

 private:
  // On success, the bytes moved (the values as `wire` sends them, and the
  // count) onto `bytes`; otherwise the error counted as an RPC error of
  // `rpc` ("Push" / "Pull").
  absl::Status Counted(absl::Status s, size_t floats, WireFormat wire, Counter* bytes,
                       const char* rpc) {
    if (s.ok()) {
      bytes->Increment(static_cast<double>(static_cast<int64_t>(floats) * WireBytesPerFloat(wire) +
                                           static_cast<int64_t>(sizeof(int64_t))));
    } else {
      metrics_->RpcError(rpc, absl::StatusCodeToString(s.code()));
    }
    return s;
  }
  absl::Status Sent(absl::Status s, size_t floats, WireFormat wire = WireFormat::kFloat32) {
    return Counted(std::move(s), floats, wire, sent_, "Push");
  }
  absl::Status Received(absl::Status s, size_t floats, WireFormat wire = WireFormat::kFloat32) {
    return Counted(std::move(s), floats, wire, received_, "Pull");
  }
  PsClient* const inner_;
  Counter* const sent_;
  Counter* const received_;
  WorkerMetrics* const metrics_;
};

}  // namespace

std::vector<double> StepSecondsBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,     10};
}

WorkerMetrics::WorkerMetrics(MetricsRegistry* r)
    : steps_(r->AddCounter("lockstep_worker_steps_total",
                           "Training steps this worker completed (ReportStep answered).")),
      examples_(r->AddCounter("lockstep_worker_examples_total",
                              "Training examples in this worker's slices of completed steps.")),
      jobs_(r->AddCounter("lockstep_worker_jobs_total",
                          "Jobs this worker ran to an end (any outcome).")),
      examples_per_second_(r->AddGauge(
          "lockstep_worker_examples_per_second",
          "This worker's examples per second of step time over the last >= 1 s of steps; "
          "0 when no job runs.")),
      compute_(r->AddHistogram(
          "lockstep_worker_step_compute_seconds",
          "Per step: batch slicing, forward + backward and optimizer update on the job thread "
          "(worker/step_observer.h).",
          StepSecondsBuckets())),
      communication_(r->AddHistogram(
          "lockstep_worker_step_communication_seconds",
          "Per step: the gradient combine (all-reduce or ps push/pull) in flight, including "
          "waiting there for slower ranks; with overlap, partly hidden behind backward.",
          StepSecondsBuckets())),
      wait_(r->AddHistogram(
          "lockstep_worker_step_wait_seconds",
          "Per step: blocked on the coordinator (more than the report lag of replies "
          "outstanding) or on the previous step's weights hash.",
          StepSecondsBuckets())),
      sent_(r->AddCounterFamily("lockstep_transport_sent_bytes_total",
                                "Payload bytes sent, by data plane (tcp, grpc ring peers; ps "
                                "pushes).",
                                {"transport"})),
      received_(r->AddCounterFamily("lockstep_transport_received_bytes_total",
                                    "Payload bytes received, by data plane (tcp, grpc ring "
                                    "peers; ps pulls).",
                                    {"transport"})),
      rpc_errors_(r->AddCounterFamily(
          "lockstep_worker_rpc_errors_total",
          "Failed RPCs this worker made (coordinator calls, ps pushes and pulls), by method "
          "and status code.",
          {"method", "code"})) {
  // Show the data planes at zero before the first job.
  for (const char* t : {"tcp", "grpc", "shm", "ps"}) {
    sent_->WithLabels({t});
    received_->WithLabels({t});
  }
}

void WorkerMetrics::OnStep(const StepTiming& t) {
  steps_->Increment();
  examples_->Increment(static_cast<double>(t.examples));
  compute_->Observe(t.compute_seconds);
  communication_->Observe(t.communication_seconds);
  wait_->Observe(t.wait_seconds);
  absl::MutexLock l(&mu_);
  window_seconds_ += t.step_seconds();
  window_examples_ += t.examples;
  if (window_seconds_ >= 1.0) {
    examples_per_second_->Set(static_cast<double>(window_examples_) / window_seconds_);
    window_seconds_ = 0;
    window_examples_ = 0;
  }
}

void WorkerMetrics::OnJobEnd(uint64_t job) {
  (void)job;
  jobs_->Increment();
  absl::MutexLock l(&mu_);
  window_seconds_ = 0;
  window_examples_ = 0;
  examples_per_second_->Set(0);
}

std::unique_ptr<Transport> WorkerMetrics::CountTransport(Transport* inner,
                                                         const std::string& transport) {
  return std::make_unique<CountingTransport>(inner, sent_->WithLabels({transport}),
                                             received_->WithLabels({transport}));
}

std::unique_ptr<PsClient> WorkerMetrics::CountPs(PsClient* inner) {
  return std::make_unique<CountingPsClient>(inner, sent_->WithLabels({"ps"}),
                                            received_->WithLabels({"ps"}), this);
}

void WorkerMetrics::RpcError(absl::string_view method, absl::string_view code) {
  rpc_errors_->WithLabels({std::string(method), std::string(code)})->Increment();
}

}  // namespace lockstep
