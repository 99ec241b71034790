// Coordinator: worker registration (RegisterWorker: addresses, the
// repeat of one process, an address taken back) and worker tokens
// (WorkerToken, CheckWorkerToken). Contracts: coordinator.h.
#include "server/coordinator.h"

#include <algorithm>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/net/data_auth.h"

namespace lockstep {
namespace {

// Hex of HMAC-SHA256(key; domain, message): the worker token and the
// instance digest.
std::string HexMac(const std::string& key, absl::string_view domain,
                   const std::string& message) {
  const dataauth::Mac mac =
      dataauth::HelloMac(key, domain, reinterpret_cast<const uint8_t*>(message.data()),
                         message.size(), dataauth::Nonce{});
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()));
}

}  // namespace

absl::StatusOr<v1::RegisterWorkerReply> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& request, const std::string& caller_host,
    const std::string& token) {
  if (request.address().empty()) {
    return absl::InvalidArgumentError(
        "address: expected the worker's peer service host:port, got \"\"");
  }
  // ":port": the worker listens on a wildcard address and leaves its host to
  // us: the address its call comes from is one its peers can reach.
  auto fill = [&](const std::string& field,
                  const std::string& address) -> absl::StatusOr<std::string> {
    if (address.empty() || address[0] != ':') return address;
    if (caller_host.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": \"", address,
          "\" has no host and the coordinator cannot see the caller's IP address; start the "
          "worker with --advertise=HOST"));
    }
    return absl::StrCat(caller_host, address);
  };
  absl::StatusOr<std::string> address = fill("address", request.address());
  if (!address.ok()) return address.status();
  absl::StatusOr<std::string> data_address = fill("data_address", request.data_address());
  if (!data_address.ok()) return data_address.status();
  if (request.instance_secret().size() > 64) {
    return absl::InvalidArgumentError(absl::StrCat("instance_secret: ",
                                                   request.instance_secret().size(),
                                                   " bytes, expected at most 64"));
  }
  if (request.blas_core().size() > 64 || request.blas_advice().size() > 512) {
    const bool core = request.blas_core().size() > 64;
    return absl::InvalidArgumentError(absl::StrCat(
        core ? "blas_core" : "blas_advice", ": ",
        core ? request.blas_core().size() : request.blas_advice().size(),
        " bytes, expected at most ", core ? 64 : 512));
  }

  const absl::Time now = clock_->Now();
  Locked lock(this);  // writes this call's log lines after unlocking
  if (draining_) return absl::UnavailableError("coordinator is shutting down");
  const std::string digest = request.instance_secret().empty()
                                 ? std::string()
                                 : InstanceDigest(data_plane_key_, request.instance_secret());
  // The same process asking again (its reply was lost, or its call timed
  // out after we answered): it gets the registration it has, and nothing
  // changes. A new registration here would leave the first one, perhaps
  // already given a job, without a process until it is LOST.
  if (!digest.empty()) {
    for (const Worker* old : workers_.LiveAt(*address)) {
      if (!SameProcess(*old, request.hostname(), request.pid()) ||
          old->data_address != *data_address || !dataauth::SecretEqual(digest, old->instance_digest)) {
        continue;
      }
      workers_.Seen(workers_.Find(old->id), now);  // live: only last_seen moves
      LogLocked(LogLevel::kInfo, "worker registration repeated",
                {{"worker", old->id}, {"address", *address}, {"pid", request.pid()}});
      return RegistrationReplyLocked(*old);
    }
  }
  // The process whose LOST registration a live one displaced (it came back
  // from a partition, or a stall, to find its address taken) proves it with
  // its secret and takes the address back: two processes cannot listen at
  // one address, and the one that held it first is still there. Without
  // this any worker-role caller could keep a LOST worker's address.
  const Worker* reclaimed_from = nullptr;
  if (!digest.empty()) {
    for (const Worker* live : workers_.LiveAt(*address)) {
      if (dataauth::SecretEqual(digest, live->displaced_digest)) reclaimed_from = live;
    }
  }
  if (reclaimed_from == nullptr) {
    if (absl::Status s =
            workers_.CheckAddress(*address, request.hostname(), request.pid(), now);
        !s.ok()) {
      return s;
    }
    // Replacing a live registration (it fails that worker's job) needs its
    // token: the process itself has it, a caller that only knows the
    // address, host and pid does not (a restarted process waits until the
    // old registration is LOST).
    for (const Worker* old : workers_.LiveAt(*address)) {
      if (!dataauth::SecretEqual(token, WorkerToken(data_plane_key_, *old))) {
        return absl::AlreadyExistsError(absl::StrFormat(
            "address %s is registered by live worker %s (host %s, pid %d, last heartbeat %.1f s "
            "ago) and this registration %s its worker token; a restarted worker is accepted "
            "once %s is LOST (%.1f s without heartbeats)",
            *address, old->id, old->hostname, old->pid,
            absl::ToDoubleSeconds(now - old->last_seen),
            token.empty() ? "does not carry" : "carries another than", old->id,
            absl::ToDoubleSeconds(options_.lost_after)));
      }
    }
  }
  const int64_t seq = workers_.NextSeq();
  const std::string id = absl::StrCat("w-", seq);
  const std::string reclaimed_id = reclaimed_from != nullptr ? reclaimed_from->id : "";
  // Who may take the address back from this registration: the process that
  // held it first. A LOST record that had itself displaced someone passes
  // that right on (its own process was the usurper), unless the one
  // registering now is that first holder, back after the usurper went LOST.
  std::string displaced;
  for (const Worker& old : workers_.RemoveAtAddress(*address)) {
    ForgetWorkerLocked(old.seq);
    if (old.state == v1::LOST) {
      const std::string& first =
          old.displaced_digest.empty() ? old.instance_digest : old.displaced_digest;
      if (!first.empty() && first != digest) displaced = first;
    }
    if (old.job_id == 0) continue;
    Job* job = jobs_.Find(old.job_id);
    // Its process restarted (or the address went back to the process that
    // held it first): the old worker is gone from its job as a lost one is,
    // and the job's on_worker_lost decides (shrink, wait, or fail). Under
    // "wait" the new registration may take the vacant rank at once.
    if (job != nullptr && job->state == v1::RUNNING) {
      LoseWorkerLocked(job, old,
                       old.id == reclaimed_id
                           ? absl::StrFormat(
                                 "%s lost its address to %s, the process that held it "
                                 "before %s did (it proved so)",
                                 WorkerInJob(old), id, old.id)
                           : absl::StrFormat(
                                 "%s re-registered as %s: it restarted and lost its part "
                                 "of the job",
                                 WorkerInJob(old), id));
    }
  }
  if (!reclaimed_id.empty()) {
    LogLocked(LogLevel::kWarn, "worker address taken back",
              {{"worker", id}, {"address", *address}, {"from", reclaimed_id}});
  }
  Worker w;
  w.seq = seq;
  w.id = id;
  w.address = *address;
  w.data_address = *data_address;
  w.hostname = request.hostname();
  w.pid = request.pid();
  w.max_job_memory_bytes = std::max<int64_t>(0, request.max_job_memory_bytes());
  w.blas_core = request.blas_core();
  w.blas_advice = request.blas_advice();
  w.instance_digest = digest;
  w.displaced_digest = displaced;
  w.state = v1::IDLE;
  w.last_seen = now;
  const Worker* added = workers_.Add(std::move(w));
  PersistWorkerLocked(*added);

  v1::RegisterWorkerReply reply = RegistrationReplyLocked(*added);
  std::vector<LogField> fields = {{"worker", id},
                                  {"address", *address},
                                  {"data_address", *data_address},
                                  {"hostname", request.hostname()},
                                  {"pid", request.pid()}};
  if (!request.blas_core().empty()) fields.push_back({"blas_core", request.blas_core()});
  LogLocked(LogLevel::kInfo, "worker registered", std::move(fields));
  ScheduleLocked();
  return reply;
}

v1::RegisterWorkerReply Coordinator::RegistrationReplyLocked(const Worker& w) const {
  v1::RegisterWorkerReply reply;
  reply.set_worker_id(w.id);
  reply.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  reply.set_lost_after_ms(absl::ToInt64Milliseconds(options_.lost_after));
  reply.set_address(w.address);
  reply.set_data_address(w.data_address);
  reply.set_worker_token(WorkerToken(data_plane_key_, w));
  return reply;
}

std::string Coordinator::InstanceDigest(const std::string& key, const std::string& secret) {
  return HexMac(key, "lockstep worker instance v1", secret);
}

std::string Coordinator::WorkerToken(const std::string& key, const Worker& w) {
  // The registration, not only the id: should a crash before the state
  // database committed a registration let a restarted coordinator give its
  // id again, the other process's token differs.
  const std::string message =
      absl::StrCat(w.id, std::string(1, '\0'), w.address, std::string(1, '\0'), w.hostname,
                   std::string(1, '\0'), w.pid);
  return HexMac(key, "lockstep worker token v1", message);
}

absl::Status Coordinator::CheckWorkerToken(const std::string& worker_id,
                                           const std::string& token) {
  std::string key;
  Worker registration;
  bool known = false;
  {
    absl::MutexLock l(&mu_);
    if (const Worker* w = workers_.Find(worker_id); w != nullptr) {
      known = true;
      registration.id = w->id;
      registration.address = w->address;
      registration.hostname = w->hostname;
      registration.pid = w->pid;
      key = data_plane_key_;
    }
  }
  if (!known) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker ", worker_id,
        ": not registered with this coordinator (a worker token is valid for a registered "
        "worker only; the worker registers again)"));
  }
  const std::string want = WorkerToken(key, registration);  // outside the lock
  if (token.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker ", worker_id,
        ": the call carries no worker token (lockstep-worker-token metadata, from "
        "RegisterWorker's reply): a worker of an older build must be restarted"));
  }
  if (!dataauth::SecretEqual(token, want)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "worker ", worker_id, ": the call's worker token is not the one this coordinator gave ",
        worker_id,
        " when it registered (another process using its id, or a coordinator restarted "
        "without --state_dir)"));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
