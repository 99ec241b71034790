// Conformance suite for collective transports and parameter-server clients,
// written once and instantiated per implementation. It checks the Transport
// contract (transport.h: FIFO, key/size mismatch errors, stale discard,
// deadlines), the ring all-reduce on top of it (closed-form sums for K = 1..8
// and many lengths, bit-identical results, peer failures that never hang;
// the same for the small-buffer direct exchange and the kAuto switch),
// and the parameter-server round (ps_aggregator.h) through PsClient.
//
// To run it against a transport, link the "conformance" target (testonly,
// alwayslink) and instantiate, e.g.:
//
//   INSTANTIATE_TEST_SUITE_P(
//       InProcess, TransportConformanceTest,
//       ::testing::Values(TransportFactoryParam{"InProcess",
//                                               MakeInProcessTransports}),
//       TransportParamName);
//   INSTANTIATE_TEST_SUITE_P(
//       InProcess, PsConformanceTest,
//       ::testing::Values(PsClientFactoryParam{"InProcess",
//                                             MakeInProcessPsClients}),
//       PsParamName);
//
// The suite builds at most 8 endpoints at a time and uses deadlines of a few
// hundred milliseconds for failure cases, so factories must be able to build
// groups quickly (e.g. OS-chosen ports for a network transport).
#ifndef LOCKSTEP_COMMON_COLLECTIVE_COLLECTIVE_CONFORMANCE_H_
#define LOCKSTEP_COMMON_COLLECTIVE_COLLECTIVE_CONFORMANCE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "common/collective/ps_aggregator.h"
#include "common/collective/transport.h"

namespace lockstep {

// Forwards every call to `inner` and keeps `owner` (e.g. the servers the
// endpoints talk through) alive until after `inner` is destroyed, so a
// factory can return endpoints that own their whole group.
class OwningTransport : public Transport {
 public:
  OwningTransport(std::shared_ptr<void> owner, std::unique_ptr<Transport> inner)
      : owner_(std::move(owner)), inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  int64_t max_message_bytes() const override { return inner_->max_message_bytes(); }
  absl::Status Send(int to, const MessageKey& key,
                    absl::Span<const uint8_t> data,
                    absl::Time deadline) override {
    return inner_->Send(to, key, data, deadline);
  }
  absl::Status SendBorrowed(int to, const MessageKey& key,
                            absl::Span<const uint8_t> data,
                            absl::Time deadline) override {
    return inner_->SendBorrowed(to, key, data, deadline);
  }
  absl::Status FlushSends(absl::Time deadline) override {
    return inner_->FlushSends(deadline);
  }
  absl::Status Recv(int from, const MessageKey& key, absl::Span<uint8_t> out,
                    absl::Time deadline) override {
    return inner_->Recv(from, key, out, deadline);
  }

 private:
  std::shared_ptr<void> owner_;  // declared first: destroyed last
  std::unique_ptr<Transport> inner_;
};

// The same for a PsClient: forwards every call to `inner` and keeps `owner`
// (e.g. the server the client talks to) alive as long as itself.
class OwningPsClient : public PsClient {
 public:
  OwningPsClient(std::shared_ptr<void> owner, std::unique_ptr<PsClient> inner)
      : owner_(std::move(owner)), inner_(std::move(inner)) {}
  absl::Status Push(uint64_t job, int64_t step, int worker, absl::Span<const float> g,
                    int64_t count, absl::Time deadline) override {
    return inner_->Push(job, step, worker, g, count, deadline);
  }
  absl::Status Pull(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                    int64_t* count, absl::Time deadline) override {
    return inner_->Pull(job, step, worker, out, count, deadline);
  }
  absl::Status StartRound(uint64_t job, int64_t step, int worker, absl::Span<const float> g,
                          int64_t count, absl::Time deadline, WireFormat wire) override {
    return inner_->StartRound(job, step, worker, g, count, deadline, wire);
  }
  absl::Status FinishRound(uint64_t job, int64_t step, int worker, absl::Span<float> out,
                           int64_t* count, absl::Time deadline, WireFormat wire) override {
    return inner_->FinishRound(job, step, worker, out, count, deadline, wire);
  }
  void Cancel() override { inner_->Cancel(); }

 private:
  std::shared_ptr<void> owner_;  // declared first: destroyed last
  std::unique_ptr<PsClient> inner_;
};

// Returns world_size fresh, connected endpoints with endpoints[r]->rank() ==
// r. The endpoints own (or share ownership of) everything they use.
using TransportFactory =
    std::function<std::vector<std::unique_ptr<Transport>>(int world_size)>;

struct TransportFactoryParam {
  std::string name;  // test-name suffix, [A-Za-z0-9_]
  TransportFactory make;
};

// Returns num_shards clients; client s talks to a fresh shard s covering
// ShardBounds(n, num_shards, s) and aggregating num_workers pushes. Clients
// are thread-safe and shared by all workers; they own what they use.
using PsClientFactory = std::function<std::vector<std::unique_ptr<PsClient>>(
    int num_workers, int num_shards, int64_t n)>;

struct PsClientFactoryParam {
  std::string name;
  PsClientFactory make;
};

class TransportConformanceTest
    : public ::testing::TestWithParam<TransportFactoryParam> {};

class PsConformanceTest
    : public ::testing::TestWithParam<PsClientFactoryParam> {};

// gtest printers (print the name).
void PrintTo(const TransportFactoryParam& p, std::ostream* os);
void PrintTo(const PsClientFactoryParam& p, std::ostream* os);

// Name generators for INSTANTIATE_TEST_SUITE_P.
std::string TransportParamName(
    const ::testing::TestParamInfo<TransportFactoryParam>& info);
std::string PsParamName(
    const ::testing::TestParamInfo<PsClientFactoryParam>& info);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_COLLECTIVE_COLLECTIVE_CONFORMANCE_H_
