// PsControl (server/ps_control.h) over the ps service's Control RPC
// (proto/ps.proto), for the coordinator's --ps_addresses shards.
//
// One lane per shard address (a queue and a thread, started when the
// address is first named; at most kMaxLanes): each lane sends, in order,
// what the coordinator queued for its shard over one cached channel (the
// channel factory gives the coordinator's certificate and expects a
// ps-server one), with a 5 s deadline per call and up to 4 tries 0.2, 0.4
// and 0.8 s apart. So a shard that does not answer delays only its own
// messages, never another shard's. A message holds at most
// PsService::kMaxControlEntries (256) entries of a kind; longer lists go in
// several calls. Bounded: at most kMaxQueued messages wait per lane; one
// more drops the lane's oldest forget first (the shard's idle eviction
// frees those keys later), else its oldest message, and logs it. A message
// that could not be delivered is logged with the shard and the error ("ps
// control failed"); a message for an address beyond kMaxLanes is dropped
// and logged.
//
// Threading: StartKeys and Forget may be called from any thread, under
// any lock of the caller (they take only this object's own mutex, start a
// lane's thread at most, and never block on I/O); the destructor stops the
// threads (a call in flight ends by its deadline) and drops what is still
// queued.
#ifndef LOCKSTEP_SERVER_GRPC_PS_CONTROL_H_
#define LOCKSTEP_SERVER_GRPC_PS_CONTROL_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/log.h"
#include "proto/ps.grpc.pb.h"
#include "server/ps_control.h"

namespace lockstep {

class GrpcPsControl final : public PsControl {
 public:
  using ChannelFactory =
      std::function<std::shared_ptr<grpc::Channel>(const std::string& address)>;
  static constexpr size_t kMaxQueued = 1024;  // per lane
  static constexpr size_t kMaxLanes = 256;
  static constexpr int kTries = 4;
  static constexpr absl::Duration kCallDeadline = absl::Seconds(5);

  // `log` is not owned (nullptr: no log lines).
  GrpcPsControl(ChannelFactory channels, const Logger* log);
  ~GrpcPsControl() override;
  GrpcPsControl(const GrpcPsControl&) = delete;
  GrpcPsControl& operator=(const GrpcPsControl&) = delete;

  void StartKeys(const std::vector<std::string>& shards, std::vector<PsKeyStart> keys) override;
  void Forget(const std::vector<std::string>& shards, std::vector<uint64_t> jobs) override;

  // For tests: true once nothing is queued or in flight, false at `deadline`.
  bool WaitIdle(absl::Time deadline);
  // Messages delivered to a shard / given up on / dropped (a full lane, or
  // an address beyond kMaxLanes).
  int64_t delivered() const;
  int64_t failed() const;
  int64_t dropped() const;

 private:
  struct Message {
    v1::PsControlRequest request;
    bool forget_only = false;
  };
  // One shard's queue and sender thread.
  struct Lane {
    std::string address;
    std::deque<Message> queue;  // guarded by the object's mu_
    bool busy = false;          // guarded by mu_: a message in flight
    std::thread thread;
  };
  // Queues `request` for each of `shards`.
  void Enqueue(const std::vector<std::string>& shards, const v1::PsControlRequest& request,
               bool forget_only);
  void Loop(Lane* lane);
  // Sends `request` with retries over `stub`; the final status.
  grpc::Status Send(v1::ParameterServer::Stub* stub, const v1::PsControlRequest& request);

  const ChannelFactory channels_;
  const Logger* const log_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Lane>> lanes_ ABSL_GUARDED_BY(mu_);
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  int64_t delivered_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_GRPC_PS_CONTROL_H_
