#include "server/coordinator.h"

#include <algorithm>
#include <cctype>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/train/job_spec_convert.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

bool IsHex32(const std::string& s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

double UnixSeconds(absl::Time t) {
  return t == absl::InfinitePast() ? 0.0 : absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

std::string NotFound(uint64_t job_id) { return absl::StrCat("job ", job_id, " not found"); }

// The most common hash (ties: the one held by the lowest rank) and the ranks
// whose hash differs from it.
std::pair<std::string, std::vector<int32_t>> Majority(const std::vector<std::string>& hashes) {
  std::map<std::string, int> counts;
  for (const std::string& h : hashes) ++counts[h];
  std::string best = hashes.empty() ? std::string() : hashes[0];
  for (const std::string& h : hashes) {
    if (counts[h] > counts[best]) best = h;
  }
  std::vector<int32_t> differing;
  for (size_t r = 0; r < hashes.size(); ++r) {
    if (hashes[r] != best) differing.push_back(static_cast<int32_t>(r));
  }
  return {best, differing};
}

// Median of `v` (mean of the two middle values for an even count; 0 when
// empty). Reorders v.
double Median(std::vector<double>& v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + mid);
  return (lower + upper) / 2;
}

}  // namespace

bool IsTerminalJobState(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

v1::WeightsChunk MakeWeightsChunk(const FinalWeights& w, int64_t offset, int64_t max_floats) {
  v1::WeightsChunk chunk;
  chunk.set_job_id(w.job_id);
  chunk.set_offset(offset);
  chunk.set_total(w.total);
  const int64_t n = std::max<int64_t>(0, std::min(max_floats, w.total - offset));
  chunk.set_data(w.data.substr(static_cast<size_t>(offset) * 4, static_cast<size_t>(n) * 4));
  if (offset == 0) {
    for (const std::string& name : w.block_names) chunk.add_block_names(name);
    for (int64_t d : w.block_shapes) chunk.add_block_shapes(d);
  }
  return chunk;
}

Coordinator::Coordinator(CoordinatorOptions options, Clock* clock)
    : options_(std::move(options)), clock_(clock),
      log_(LoggerOrStderr(options_.logger, "coordinator")) {
  // Milliseconds since 2023-11-14 (unix 1.7e9 s): a later start gets a
  // larger incarnation; 43 bits last 278 years. A clock before that (tests'
  // fake clocks) gives 1.
  constexpr uint64_t kMaxIncarnation = (uint64_t{1} << 43) - 1;
  incarnation_ = options_.incarnation & kMaxIncarnation;
  if (incarnation_ == 0) {
    const int64_t ms = absl::ToUnixMillis(clock_->Now()) - int64_t{1700000000} * 1000;
    incarnation_ = static_cast<uint64_t>(
        std::clamp<int64_t>(ms, 1, static_cast<int64_t>(kMaxIncarnation)));
  }
  absl::MutexLock lock(&mu_);
  advertise_ = options_.advertise_address;
}

void Coordinator::SetAdvertiseAddress(std::string address) {
  absl::MutexLock lock(&mu_);
  advertise_ = std::move(address);
}

// ---- helpers ----------------------------------------------------------------

Coordinator::Worker* Coordinator::FindWorkerLocked(const std::string& id) {
  int64_t seq = 0;
  if (id.size() < 3 || id.compare(0, 2, "w-") != 0 ||
      !absl::SimpleAtoi(absl::string_view(id).substr(2), &seq)) {
    return nullptr;
  }
  auto it = workers_.find(seq);
  if (it == workers_.end() || it->second.id != id) return nullptr;
  return &it->second;
}

Coordinator::Job* Coordinator::FindJobLocked(uint64_t id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

absl::StatusOr<Coordinator::Job*> Coordinator::JobOrNotFoundLocked(uint64_t id) {
  Job* job = FindJobLocked(id);
  if (job == nullptr) return absl::NotFoundError(NotFound(id));
  return job;
}

absl::StatusOr<Coordinator::Job*> Coordinator::ReportingJobLocked(
    uint64_t job_id, const std::string& worker_id, int rank) {
  absl::StatusOr<Job*> found = JobOrNotFoundLocked(job_id);
  if (!found.ok()) return found.status();
  const Job& job = **found;
  if (rank < 0 || rank >= job.k) {
    return absl::InvalidArgumentError(absl::StrCat("rank: expected in [0, ", job.k,
                                                   ") for job ", job.id, ", got ", rank));
  }
  if (job.ranks.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", worker_id, " cannot report as rank ", rank, " of job ", job.id,
        ": the job never started (", v1::JobState_Name(job.state), ")"));
  }
  const Rank& r = job.ranks[rank];
  if (r.worker_id != worker_id) {
    return absl::FailedPreconditionError(absl::StrCat("worker ", worker_id, " is not rank ",
                                                      rank, " of job ", job.id, " (rank ",
                                                      rank, " is ", r.worker_id, ")"));
  }
  return *found;
}

void Coordinator::BumpLocked(Job* job) { job->version = ++version_; }

void Coordinator::StateChangedLocked(Job* job) {
  BumpLocked(job);
  job->state_events.emplace_back(job->version, StatusLocked(*job, clock_->Now()));
}

void Coordinator::EndJobLocked(Job* job, v1::JobState state, std::string reason) {
  if (job->state == v1::PENDING) {
    pending_.erase(std::remove(pending_.begin(), pending_.end(), job->id), pending_.end());
  }
  job->state = state;
  job->reason = std::move(reason);
  job->finished = clock_->Now();
  job->pending_steps.clear();
  job->upload.reset();
  if (state != v1::SUCCEEDED && job->weights != nullptr) {
    job->weights.reset();
    weights_order_.erase(std::remove(weights_order_.begin(), weights_order_.end(), job->id),
                         weights_order_.end());
  }
  if (state == v1::SUCCEEDED) {
    LogLocked(LogLevel::kInfo, "job succeeded",
              {{"job", job->id}, {"steps", job->steps_done}, {"final_hash", job->final_hash},
               {"test_accuracy", job->test_accuracy}});
  } else {
    LogLocked(state == v1::FAILED ? LogLevel::kError : LogLevel::kInfo,
              state == v1::FAILED ? "job failed" : "job cancelled",
              {{"job", job->id}, {"steps", job->steps_done}, {"reason", job->reason}});
  }
  StateChangedLocked(job);
}

void Coordinator::FailJobLocked(Job* job, std::string reason) {
  EndJobLocked(job, v1::FAILED, std::move(reason));
}

std::vector<Coordinator::Worker*> Coordinator::IdleWorkersLocked() {
  std::vector<Worker*> idle;
  for (auto& [seq, w] : workers_) {
    if (w.state == v1::IDLE) idle.push_back(&w);
  }
  return idle;
}

std::vector<std::string> Coordinator::PsAddressesLocked() const {
  if (!options_.ps_addresses.empty()) return options_.ps_addresses;
  if (!advertise_.empty()) return {advertise_};
  return {};
}

void Coordinator::ScheduleLocked() {
  if (draining_) return;
  while (!pending_.empty()) {
    Job* job = FindJobLocked(pending_.front());
    if (job == nullptr || job->state != v1::PENDING) {
      pending_.pop_front();
      continue;
    }
    std::vector<Worker*> idle = IdleWorkersLocked();
    if (static_cast<int>(idle.size()) < job->k) return;  // strict FIFO
    if (job->spec.sync_mode() == v1::PS) {
      std::vector<std::string> ps = PsAddressesLocked();
      const int shards = PsShards(job->spec);
      if (static_cast<int>(ps.size()) < shards) {
        FailJobLocked(job, absl::StrCat("spec.ps_shards: job needs ", shards,
                                        " parameter-server shards, ", ps.size(),
                                        " addresses are configured"));
        continue;
      }
      ps.resize(shards);
      job->ps_addresses = std::move(ps);
    } else if (job->spec.peer_transport() == v1::TCP) {
      // Every rank dials its peers' raw-TCP hubs: a worker that registered
      // no data address (an older lockstep-worker) cannot take part.
      std::vector<std::string> missing;
      for (int r = 0; r < job->k; ++r) {
        if (idle[r]->data_address.empty()) {
          missing.push_back(absl::StrCat(idle[r]->id, " (", idle[r]->address, ")"));
        }
      }
      if (!missing.empty()) {
        const bool one = missing.size() == 1;
        FailJobLocked(job, absl::StrCat("spec.peer_transport: TCP needs every worker's data "
                                        "address; worker", one ? " " : "s ",
                                        absl::StrJoin(missing, ", "), one ? " has" : " have",
                                        " none (a lockstep-worker without a TCP data port; "
                                        "upgrade it or submit with --peer_transport=grpc)"));
        continue;
      }
    }
    pending_.pop_front();
    job->ranks.assign(job->k, Rank());
    for (int r = 0; r < job->k; ++r) {
      Worker* w = idle[r];
      w->state = v1::BUSY;
      w->job_id = job->id;
      w->rank = r;
      Rank& rank = job->ranks[r];
      rank.worker_id = w->id;
      rank.address = w->address;
      rank.data_address = w->data_address;
      rank.hostname = w->hostname;
      rank.last_heartbeat = w->last_seen;
    }
    job->state = v1::RUNNING;
    job->started = clock_->Now();
    StateChangedLocked(job);
    std::vector<std::string> ids;
    for (const Rank& r : job->ranks) ids.push_back(r.worker_id);
    std::vector<LogField> fields = {{"job", job->id},
                                    {"mode", ModeName(job->spec)},
                                    {"workers", absl::StrJoin(ids, ",")}};
    if (!job->ps_addresses.empty()) {
      fields.emplace_back("ps", absl::StrJoin(job->ps_addresses, ","));
    }
    LogLocked(LogLevel::kInfo, "job started", std::move(fields));
  }
}

v1::Assignment Coordinator::AssignmentLocked(const Job& job, int rank) const {
  v1::Assignment a;
  a.set_job_id(job.id);
  // 43 + 20 bits: bit 63 stays clear for the workers' shape-agreement key.
  // Job ids past 2^20 in one coordinator's life wrap onto jobs a million
  // submissions old, long forgotten by workers (1024) and ps servers (8).
  a.set_group_key((incarnation_ << 20) | (job.id & 0xfffffu));
  *a.mutable_spec() = job.spec;
  a.set_rank(rank);
  for (const Rank& r : job.ranks) a.add_peer_addresses(r.address);
  for (const Rank& r : job.ranks) a.add_data_addresses(r.data_address);
  for (const std::string& p : job.ps_addresses) a.add_ps_addresses(p);
  return a;
}

// ---- worker-facing ----------------------------------------------------------

absl::StatusOr<v1::RegisterWorkerReply> Coordinator::RegisterWorker(
    const v1::RegisterWorkerRequest& request, const std::string& caller_host) {
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

  const absl::Time now = clock_->Now();
  Locked lock(this);  // writes this call's log lines after unlocking
  if (draining_) return absl::UnavailableError("coordinator is shutting down");
  for (const auto& [seq, old] : workers_) {
    if (old.address != *address || old.state == v1::LOST) continue;
    if (old.hostname == request.hostname() && old.pid == request.pid()) continue;
    return absl::AlreadyExistsError(absl::StrFormat(
        "address %s is already registered by live worker %s (host %s, pid %d, last heartbeat "
        "%.1f s ago); refusing the worker on host %s, pid %d that claims it too. Give each "
        "worker its own address (--advertise=HOST, or leave --advertise unset on a wildcard "
        "--listen so the coordinator uses the caller's IP address); a restarted worker is "
        "accepted once the old one is LOST",
        *address, old.id, old.hostname, old.pid, absl::ToDoubleSeconds(now - old.last_seen),
        request.hostname(), request.pid()));
  }
  const int64_t seq = next_worker_seq_++;
  const std::string id = absl::StrCat("w-", seq);
  for (auto it = workers_.begin(); it != workers_.end();) {
    Worker& old = it->second;
    if (old.address != *address) {
      ++it;
      continue;
    }
    if (old.job_id != 0) {
      Job* job = FindJobLocked(old.job_id);
      if (job != nullptr && job->state == v1::RUNNING) {
        FailJobLocked(job, absl::StrFormat(
                               "worker %s (rank %d, %s) re-registered as %s: it restarted "
                               "and lost its part of the job",
                               old.id, old.rank, old.address, id));
      }
    }
    it = workers_.erase(it);
  }
  Worker w;
  w.seq = seq;
  w.id = id;
  w.address = *address;
  w.data_address = *data_address;
  w.hostname = request.hostname();
  w.pid = request.pid();
  w.state = v1::IDLE;
  w.last_seen = now;
  workers_.emplace(seq, std::move(w));

  v1::RegisterWorkerReply reply;
  reply.set_worker_id(id);
  reply.set_heartbeat_interval_ms(absl::ToInt64Milliseconds(options_.heartbeat_interval));
  reply.set_address(*address);
  reply.set_data_address(*data_address);
  LogLocked(LogLevel::kInfo, "worker registered",
            {{"worker", id},
             {"address", *address},
             {"data_address", *data_address},
             {"hostname", request.hostname()},
             {"pid", request.pid()}});
  ScheduleLocked();
  return reply;
}

absl::StatusOr<v1::HeartbeatReply> Coordinator::Heartbeat(const v1::HeartbeatRequest& request) {
  const absl::Time now = clock_->Now();
  Locked lock(this);  // writes this call's log lines after unlocking
  v1::HeartbeatReply reply;
  Worker* w = FindWorkerLocked(request.worker_id());
  if (w == nullptr) {
    reply.set_reregister(true);
    return reply;
  }
  w->last_seen = now;
  Job* bound = w->job_id != 0 ? FindJobLocked(w->job_id) : nullptr;
  Rank* rank = nullptr;
  if (bound != nullptr && w->rank >= 0 && w->rank < static_cast<int>(bound->ranks.size()) &&
      bound->ranks[w->rank].worker_id == w->id) {
    rank = &bound->ranks[w->rank];
    rank->last_heartbeat = now;
  }
  if (w->state == v1::LOST) {
    w->state = w->job_id != 0 ? v1::BUSY : v1::IDLE;
    LogLocked(LogLevel::kInfo, "worker back",
              {{"worker", w->id}, {"address", w->address}, {"job", w->job_id}});
  }

  if (request.job_id() != 0) {
    if (rank != nullptr && request.job_id() == bound->id && bound->state == v1::RUNNING) {
      rank->acknowledged = true;
    } else {
      reply.set_stop_job(true);
    }
    if (w->state == v1::IDLE) ScheduleLocked();
    return reply;
  }

  // job_id == 0: the worker runs nothing.
  if (bound != nullptr && rank != nullptr && bound->state == v1::RUNNING &&
      rank->acknowledged && !rank->done) {
    FailJobLocked(bound, absl::StrFormat(
                             "rank %d (%s, %s) abandoned the job: it reported no job "
                             "before sending ReportDone",
                             w->rank, w->id, w->address));
  }
  if (w->job_id != 0 && (bound == nullptr || bound->state != v1::RUNNING)) {
    w->job_id = 0;
    w->rank = -1;
    w->state = v1::IDLE;
  }
  ScheduleLocked();
  if (w->job_id != 0) {
    Job* job = FindJobLocked(w->job_id);
    if (job != nullptr && job->state == v1::RUNNING &&
        !job->ranks[w->rank].acknowledged) {
      *reply.mutable_assignment() = AssignmentLocked(*job, w->rank);
    }
  }
  return reply;
}

absl::StatusOr<v1::ReportStepReply> Coordinator::ReportStep(
    const v1::ReportStepRequest& request) {
  Locked lock(this);  // writes this call's log lines after unlocking
  absl::StatusOr<Job*> found =
      ReportingJobLocked(request.job_id(), request.worker_id(), request.rank());
  if (!found.ok()) return found.status();
  Job* job = *found;
  v1::ReportStepReply reply;
  auto stop_reply = [&]() {
    reply.set_stop(true);
    reply.set_reason(absl::StrCat("job ", job->id, " is ", v1::JobState_Name(job->state),
                                  job->reason.empty() ? "" : ": ", job->reason));
    return reply;
  };
  if (job->state != v1::RUNNING) return stop_reply();
  if (request.step() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: expected >= 0, got ", request.step()));
  }
  if (!IsHex32(request.weights_hash())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "weights_hash: expected 32 hex digits, got \"", request.weights_hash(), "\""));
  }
  Rank& rank = job->ranks[request.rank()];
  rank.acknowledged = true;
  if (request.step() <= rank.last_step) return reply;  // duplicate or stale
  rank.last_step = request.step();
  rank.last_hash = absl::AsciiStrToLower(request.weights_hash());
  StepTimes times;
  times.step = request.step_seconds();
  times.compute = request.compute_seconds();
  times.communication = request.communication_seconds();
  times.exposed = request.exposed_seconds();
  times.peer_wait = request.peer_wait_seconds();
  if (rank.times.size() < static_cast<size_t>(kTimingWindow)) {
    rank.times.push_back(times);
  } else {
    rank.times[rank.times_next] = times;
  }
  rank.times_next = (rank.times_next + 1) % kTimingWindow;
  if (request.resident_bytes() > 0) rank.resident_bytes = request.resident_bytes();
  if (job->spec.steps() == 0 && request.total_steps() > job->total_steps) {
    job->total_steps = request.total_steps();
  }
  PendingStep& pending = job->pending_steps[request.step()];
  if (pending.reports.empty()) pending.reports.resize(job->k);
  StepReport report;
  report.hash = rank.last_hash;
  report.loss = request.loss();
  report.examples = request.examples();
  report.epoch = request.epoch();
  pending.reports[request.rank()] = std::move(report);
  ++pending.count;
  BumpLocked(job);
  if (pending.count == job->k) {
    PendingStep complete = std::move(pending);
    job->pending_steps.erase(request.step());
    CompleteStepLocked(job, request.step(), complete);
  }
  // A step at or below every rank's last step can no longer complete (each
  // rank's steps arrive in increasing order): drop it.
  int64_t min_last = job->ranks[0].last_step;
  for (const Rank& r : job->ranks) min_last = std::min(min_last, r.last_step);
  while (!job->pending_steps.empty() && job->pending_steps.begin()->first <= min_last) {
    job->pending_steps.erase(job->pending_steps.begin());
  }
  if (job->state != v1::RUNNING) return stop_reply();
  return reply;
}

void Coordinator::CompleteStepLocked(Job* job, int64_t step, const PendingStep& pending) {
  std::vector<std::string> hashes;
  double loss_weighted = 0, loss_plain = 0;
  int64_t examples = 0, epoch = 0;
  for (const std::optional<StepReport>& r : pending.reports) {
    hashes.push_back(r->hash);
    loss_weighted += r->loss * static_cast<double>(r->examples);
    loss_plain += r->loss;
    examples += r->examples;
    epoch = std::max(epoch, r->epoch);
  }
  auto [majority, differing] = Majority(hashes);
  for (int r = 0; r < job->k; ++r) job->ranks[r].in_sync = hashes[r] == majority;

  ++job->checked;
  StoredCheck check;
  check.step = step;
  check.majority = majority;
  check.differing = differing;
  if (!differing.empty()) {
    ++job->mismatched;
    if (job->first_mismatch < 0) job->first_mismatch = step;
    check.rank_hashes = hashes;
  }
  job->history.push_back(std::move(check));
  while (static_cast<int64_t>(job->history.size()) > std::max<int64_t>(1, options_.max_sync_history)) {
    job->history.pop_front();
  }

  const double step_loss = examples > 0 ? loss_weighted / static_cast<double>(examples)
                                         : loss_plain / static_cast<double>(job->k);
  if (step + 1 > job->steps_done) {
    job->steps_done = step + 1;
    job->epoch = epoch;
    job->loss = step_loss;
  }
  job->examples += examples;
  const absl::Time now = clock_->Now();
  if (job->first_step_time == absl::InfinitePast()) {
    job->first_step_time = now;
    job->first_step_examples = job->examples;
  }
  const double since_first = absl::ToDoubleSeconds(now - job->first_step_time);
  const double since_start = absl::ToDoubleSeconds(now - job->started);
  if (since_first > 0 && job->examples > job->first_step_examples) {
    job->examples_per_second =
        static_cast<double>(job->examples - job->first_step_examples) / since_first;
  } else {
    job->examples_per_second =
        since_start > 0 ? static_cast<double>(job->examples) / since_start : 0.0;
  }
  job->series.AddCheck(step, differing.empty());
  job->series.AddStep(
      LossPoint{step, step_loss, job->examples_per_second, since_start, job->examples});

  if (!differing.empty()) {
    job->out_of_sync = true;
    LogMismatchLocked(*job, "hash mismatch", step, differing, majority);
    FailJobLocked(job, absl::StrCat("replicas diverged at step ", step, ": rank(s) ",
                                    absl::StrJoin(differing, ", "),
                                    " differ from the majority hash ", majority));
    return;
  }
  BumpLocked(job);
}

absl::Status Coordinator::ReportEval(const v1::ReportEvalRequest& request) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found =
      ReportingJobLocked(request.job_id(), request.worker_id(), request.rank());
  if (!found.ok()) return found.status();
  Job* job = *found;
  if (job->state != v1::RUNNING) return absl::OkStatus();
  job->test_accuracy = request.test_accuracy();
  job->test_loss = request.test_loss();
  job->series.AddEval(EvalPoint{request.step(), request.test_accuracy(), request.test_loss()});
  BumpLocked(job);
  return absl::OkStatus();
}

absl::Status Coordinator::ReportDone(const v1::ReportDoneRequest& request) {
  Locked lock(this);  // writes this call's log lines after unlocking
  absl::StatusOr<Job*> found =
      ReportingJobLocked(request.job_id(), request.worker_id(), request.rank());
  if (!found.ok()) return found.status();
  Job* job = *found;
  if (job->state != v1::RUNNING) return absl::OkStatus();
  Rank& rank = job->ranks[request.rank()];
  rank.acknowledged = true;
  if (!request.ok()) {
    FailJobLocked(job, absl::StrCat("rank ", request.rank(), " (", request.worker_id(), "): ",
                                    request.error().empty() ? "failed without an error message"
                                                            : request.error()));
    return absl::OkStatus();
  }
  rank.done = true;
  rank.done_hash = absl::AsciiStrToLower(request.weights_hash());
  rank.done_test_accuracy = request.test_accuracy();
  rank.done_test_loss = request.test_loss();
  if (job->spec.steps() == 0 && request.steps() > job->total_steps) {
    job->total_steps = request.steps();
  }
  bool all_done = true;
  std::vector<std::string> hashes;
  for (const Rank& r : job->ranks) {
    all_done = all_done && r.done;
    hashes.push_back(r.done_hash);
  }
  if (!all_done) {
    BumpLocked(job);
    return absl::OkStatus();
  }
  auto [majority, differing] = Majority(hashes);
  if (!differing.empty()) {
    job->out_of_sync = true;
    LogMismatchLocked(*job, "final hash mismatch", job->steps_done, differing, majority);
    FailJobLocked(job, absl::StrCat("replicas finished with different weights: rank(s) ",
                                    absl::StrJoin(differing, ", "),
                                    " differ from the majority hash ", majority));
    return absl::OkStatus();
  }
  job->final_hash = majority;
  job->test_accuracy = job->ranks[0].done_test_accuracy;
  job->test_loss = job->ranks[0].done_test_loss;
  EndJobLocked(job, v1::SUCCEEDED, "");
  return absl::OkStatus();
}

absl::Status Coordinator::UploadWeightsChunk(const v1::WeightsChunk& chunk) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found = JobOrNotFoundLocked(chunk.job_id());
  if (!found.ok()) return found.status();
  Job* job = *found;
  if (job->ranks.empty() || job->ranks[0].worker_id != chunk.worker_id()) {
    return absl::FailedPreconditionError(
        absl::StrCat("worker ", chunk.worker_id(), " is not rank 0 of job ", job->id,
                     "; only rank 0 uploads the final weights"));
  }
  if (job->state != v1::RUNNING && job->state != v1::SUCCEEDED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job->id, " is ", v1::JobState_Name(job->state), ": weights not accepted"));
  }
  if (chunk.data().size() % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data: expected a multiple of 4 bytes (float32), got ", chunk.data().size()));
  }
  const int64_t n = static_cast<int64_t>(chunk.data().size() / 4);
  if (chunk.offset() == 0) {
    if (chunk.total() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("total: expected >= 1 floats, got ", chunk.total()));
    }
    Upload up;
    up.worker_id = chunk.worker_id();
    up.total = chunk.total();
    up.weights = std::make_shared<FinalWeights>();
    up.weights->job_id = job->id;
    up.weights->total = chunk.total();
    up.weights->block_names.assign(chunk.block_names().begin(), chunk.block_names().end());
    up.weights->block_shapes.assign(chunk.block_shapes().begin(), chunk.block_shapes().end());
    job->upload = std::move(up);
  } else {
    if (!job->upload.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "offset: expected 0 (the first chunk of an upload) for job ", job->id, ", got ",
          chunk.offset()));
    }
    if (chunk.offset() != job->upload->received) {
      return absl::FailedPreconditionError(
          absl::StrCat("offset: expected ", job->upload->received,
                       " (chunks in order) for job ", job->id, ", got ", chunk.offset()));
    }
    if (chunk.total() != job->upload->total) {
      return absl::InvalidArgumentError(absl::StrCat("total: expected ", job->upload->total,
                                                     " (as in the first chunk), got ",
                                                     chunk.total()));
    }
  }
  Upload& up = *job->upload;
  if (up.received + n > up.total) {
    const int64_t total = up.total;
    job->upload.reset();
    return absl::InvalidArgumentError(absl::StrCat("data: chunk at offset ", chunk.offset(),
                                                   " with ", n, " floats runs past total ",
                                                   total));
  }
  up.weights->data.append(chunk.data());
  up.received += n;
  if (up.received == up.total) {
    std::shared_ptr<const FinalWeights> done = std::move(up.weights);
    job->upload.reset();
    PublishWeightsLocked(job, std::move(done));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::FinishWeightsUpload(const std::string& worker_id, uint64_t job_id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found = JobOrNotFoundLocked(job_id);
  if (!found.ok()) return found.status();
  Job* job = *found;
  if (job->upload.has_value() && job->upload->worker_id == worker_id) {
    const int64_t received = job->upload->received, total = job->upload->total;
    job->upload.reset();
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id,
                                                      ": weights upload incomplete: received ",
                                                      received, " of ", total, " floats"));
  }
  return absl::OkStatus();
}

void Coordinator::PublishWeightsLocked(Job* job, std::shared_ptr<const FinalWeights> w) {
  weights_order_.erase(std::remove(weights_order_.begin(), weights_order_.end(), job->id),
                       weights_order_.end());
  job->weights = std::move(w);
  weights_order_.push_back(job->id);
  BumpLocked(job);
  while (static_cast<int>(weights_order_.size()) > std::max(0, options_.max_jobs_with_weights)) {
    Job* old = FindJobLocked(weights_order_.front());
    weights_order_.pop_front();
    if (old != nullptr) {
      old->weights.reset();
      BumpLocked(old);
    }
  }
}

Coordinator::Counters Coordinator::counters() {
  absl::MutexLock lock(&mu_);
  return counters_;
}

void Coordinator::Tick() {
  const absl::Time now = clock_->Now();
  Locked lock(this);  // writes this call's log lines after unlocking
  for (auto& [seq, w] : workers_) {
    if (w.state == v1::LOST) continue;
    const absl::Duration silent = now - w.last_seen;
    if (silent <= options_.lost_after) continue;
    w.state = v1::LOST;
    ++counters_.workers_lost;
    LogLocked(LogLevel::kWarn, "worker lost",
              {{"worker", w.id},
               {"address", w.address},
               {"silent_s", absl::ToDoubleSeconds(silent)},
               {"job", w.job_id}});
    if (w.job_id == 0) continue;
    Job* job = FindJobLocked(w.job_id);
    if (job != nullptr && job->state == v1::RUNNING) {
      FailJobLocked(job, absl::StrFormat("worker %s (rank %d, %s) lost: no heartbeat for %.1fs",
                                         w.id, w.rank, w.address,
                                         absl::ToDoubleSeconds(silent)));
    }
  }
  ScheduleLocked();
}

// ---- user-facing ------------------------------------------------------------

absl::StatusOr<v1::SubmitJobReply> Coordinator::SubmitJob(const v1::SubmitJobRequest& request) {
  const v1::JobSpec& spec = request.spec();
  if (absl::Status s = ValidateJobSpec(spec); !s.ok()) return s;
  const absl::Time now = clock_->Now();
  Locked lock(this);  // writes this call's log lines after unlocking
  if (draining_) return absl::UnavailableError("coordinator is shutting down");
  if (spec.sync_mode() == v1::PS) {
    const std::vector<std::string> ps = PsAddressesLocked();
    const int shards = PsShards(spec);
    if (shards > static_cast<int>(ps.size())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "spec.ps_shards: job needs ", shards, " parameter-server shard(s), ", ps.size(),
          " address(es) are configured (", absl::StrJoin(ps, ", "), ")"));
    }
  }
  const int k = spec.num_workers();
  if (request.no_wait()) {
    std::vector<Worker*> idle = IdleWorkersLocked();
    if (static_cast<int>(idle.size()) < k || !pending_.empty()) {
      std::vector<std::string> ids;
      for (const Worker* w : idle) ids.push_back(w->id);
      std::string msg = absl::StrCat("job needs ", k, " idle worker", k == 1 ? "" : "s", ", ",
                                     idle.size(), idle.size() == 1 ? " is" : " are", " idle");
      if (!ids.empty()) absl::StrAppend(&msg, " (", absl::StrJoin(ids, ", "), ")");
      if (!pending_.empty()) {
        absl::StrAppend(&msg, "; ", pending_.size(), " earlier job(s) are pending");
      }
      return absl::ResourceExhaustedError(msg);
    }
  }
  auto job = std::make_unique<Job>();
  job->id = next_job_id_++;
  job->spec = spec;
  job->k = k;
  job->submitted = now;
  job->total_steps = spec.steps();
  Job* j = job.get();
  jobs_.emplace(j->id, std::move(job));
  StateChangedLocked(j);
  pending_.push_back(j->id);
  LogLocked(LogLevel::kInfo, "job submitted",
            {{"job", j->id},
             {"model", spec.model()},
             {"mode", ModeName(spec)},
             {"workers", k},
             {"batch", spec.global_batch()},
             {"name", spec.name()}});
  ScheduleLocked();
  v1::SubmitJobReply reply;
  reply.set_job_id(j->id);
  reply.set_state(j->state);
  return reply;
}

v1::JobStatus Coordinator::StatusLocked(const Job& job, absl::Time now) const {
  v1::JobStatus s;
  s.set_job_id(job.id);
  *s.mutable_spec() = job.spec;
  s.set_state(job.state);
  s.set_reason(job.reason);
  s.set_step(job.steps_done);
  s.set_total_steps(job.total_steps);
  s.set_epoch(job.epoch);
  s.set_loss(job.loss);
  s.set_test_accuracy(job.test_accuracy);
  s.set_test_loss(job.test_loss);
  s.set_examples_per_second(job.examples_per_second);
  s.set_out_of_sync(job.out_of_sync);
  s.set_checked_steps(job.checked);
  s.set_mismatched_steps(job.mismatched);
  for (size_t r = 0; r < job.ranks.size(); ++r) {
    const Rank& rank = job.ranks[r];
    v1::RankStatus* rs = s.add_ranks();
    rs->set_rank(static_cast<int32_t>(r));
    rs->set_worker_id(rank.worker_id);
    rs->set_address(rank.address);
    rs->set_data_address(rank.data_address);
    rs->set_hostname(rank.hostname);
    rs->set_step(rank.last_step + 1);
    rs->set_last_hash(rank.last_hash);
    rs->set_in_sync(rank.in_sync);
    rs->set_last_heartbeat_age_s(absl::ToDoubleSeconds(now - rank.last_heartbeat));
    std::vector<double> v;
    v.reserve(rank.times.size());
    auto median = [&](double StepTimes::*part) {
      v.clear();
      for (const StepTimes& t : rank.times) v.push_back(t.*part);
      return Median(v);
    };
    rs->set_median_step_seconds(median(&StepTimes::step));
    rs->set_median_compute_seconds(median(&StepTimes::compute));
    rs->set_median_communication_seconds(median(&StepTimes::communication));
    rs->set_median_exposed_seconds(median(&StepTimes::exposed));
    rs->set_median_peer_wait_seconds(median(&StepTimes::peer_wait));
    rs->set_resident_bytes(rank.resident_bytes);
  }
  s.set_submitted_unix_s(UnixSeconds(job.submitted));
  s.set_started_unix_s(UnixSeconds(job.started));
  s.set_finished_unix_s(UnixSeconds(job.finished));
  s.set_final_hash(job.final_hash);
  s.set_has_weights(job.weights != nullptr);
  return s;
}

absl::StatusOr<v1::JobStatus> Coordinator::GetJob(uint64_t job_id) {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> job = JobOrNotFoundLocked(job_id);
  if (!job.ok()) return job.status();
  return StatusLocked(**job, now);
}

v1::JobList Coordinator::ListJobs() {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  v1::JobList list;
  for (const auto& [id, job] : jobs_) *list.add_jobs() = StatusLocked(*job, now);
  return list;
}

v1::WorkerList Coordinator::ListWorkers() {
  const absl::Time now = clock_->Now();
  absl::MutexLock lock(&mu_);
  v1::WorkerList list;
  for (const auto& [seq, w] : workers_) {
    v1::WorkerInfo* info = list.add_workers();
    info->set_worker_id(w.id);
    info->set_address(w.address);
    info->set_data_address(w.data_address);
    info->set_hostname(w.hostname);
    info->set_state(w.state);
    info->set_job_id(w.job_id);
    info->set_last_heartbeat_age_s(absl::ToDoubleSeconds(now - w.last_seen));
  }
  return list;
}

absl::StatusOr<v1::JobStatus> Coordinator::CancelJob(uint64_t job_id) {
  const absl::Time now = clock_->Now();
  Locked lock(this);  // writes this call's log lines after unlocking
  absl::StatusOr<Job*> found = JobOrNotFoundLocked(job_id);
  if (!found.ok()) return found.status();
  Job* job = *found;
  if (!IsTerminalJobState(job->state)) {
    EndJobLocked(job, v1::CANCELLED, "cancelled by user");
    ScheduleLocked();
  }
  return StatusLocked(*job, now);
}

absl::StatusOr<v1::SyncHistory> Coordinator::GetSyncHistory(uint64_t job_id,
                                                            int64_t max_entries) {
  if (max_entries < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_entries: expected >= 0 (0 = all), got ", max_entries));
  }
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found = JobOrNotFoundLocked(job_id);
  if (!found.ok()) return found.status();
  const Job& job = **found;
  v1::SyncHistory h;
  h.set_job_id(job.id);
  h.set_checked_steps(job.checked);
  h.set_mismatched_steps(job.mismatched);
  h.set_first_mismatch_step(job.first_mismatch);
  const size_t n = job.history.size();
  const size_t first =
      max_entries == 0 || static_cast<size_t>(max_entries) >= n ? 0 : n - max_entries;
  for (size_t i = first; i < n; ++i) {
    const StoredCheck& c = job.history[i];
    v1::SyncCheck* out = h.add_checks();
    out->set_step(c.step);
    out->set_all_match(c.differing.empty());
    out->set_majority_hash(c.majority);
    for (int32_t r : c.differing) out->add_differing_ranks(r);
    if (c.rank_hashes.empty()) {
      for (int r = 0; r < job.k; ++r) out->add_rank_hashes(c.majority);
    } else {
      for (const std::string& hash : c.rank_hashes) out->add_rank_hashes(hash);
    }
  }
  return h;
}

absl::StatusOr<std::shared_ptr<const FinalWeights>> Coordinator::GetWeights(uint64_t job_id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found = JobOrNotFoundLocked(job_id);
  if (!found.ok()) return found.status();
  if ((*found)->weights == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " has no final weights (not uploaded yet, or evicted: only the last ",
        options_.max_jobs_with_weights, " jobs' weights are kept)"));
  }
  return (*found)->weights;
}

absl::StatusOr<JobSeriesSnapshot> Coordinator::GetJobSeries(uint64_t job_id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found = JobOrNotFoundLocked(job_id);
  if (!found.ok()) return found.status();
  return (*found)->series.Snapshot();
}

absl::StatusOr<std::pair<v1::JobStatus, uint64_t>> Coordinator::WaitForJobChange(
    uint64_t job_id, uint64_t seen_version, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found = JobOrNotFoundLocked(job_id);
  if (!found.ok()) return found.status();
  const Job* job = *found;
  auto changed = [job, seen_version]() { return job->version > seen_version; };
  mu_.AwaitWithDeadline(absl::Condition(&changed), deadline);
  return std::make_pair(StatusLocked(*job, clock_->Now()), job->version);
}

absl::StatusOr<Coordinator::JobEvents> Coordinator::NextJobEvents(uint64_t job_id,
                                                                  uint64_t seen_version,
                                                                  absl::Time last_sent,
                                                                  absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Job*> found = JobOrNotFoundLocked(job_id);
  if (!found.ok()) return found.status();
  const Job* job = *found;
  const absl::Time not_before = last_sent == absl::InfinitePast()
                                    ? absl::InfinitePast()
                                    : last_sent + options_.watch_interval;
  auto state_changed = [job, seen_version] {
    return !job->state_events.empty() && job->state_events.back().first > seen_version;
  };
  // Evaluated by absl::Mutex on every release of mu_ while waiting: cheap,
  // and nothing is serialised until it holds.
  auto ready = [&] {
    if (seen_version == 0 || state_changed()) return true;
    return job->version > seen_version && clock_->Now() >= not_before;
  };
  while (!ready()) {
    absl::Time wake = deadline;
    if (job->version > seen_version) {
      // Changed, but too soon after the last event: look again when the
      // interval is over (Clock time, mapped onto real time).
      wake = std::min(wake, absl::Now() + (not_before - clock_->Now()));
    }
    if (absl::Now() >= deadline) break;
    mu_.AwaitWithDeadline(absl::Condition(&ready), wake);
  }
  JobEvents out;
  out.version = seen_version;
  if (!ready()) return out;  // deadline: nothing to send
  const absl::Time now = clock_->Now();
  out.sent = now;
  if (seen_version != 0) {
    for (const auto& [version, status] : job->state_events) {
      if (version <= seen_version) continue;
      out.events.push_back(status);
      out.version = version;
    }
  }
  // The current snapshot when it is newer than the state changes sent, the
  // job has not ended (the terminal snapshot is the last event), and its
  // interval is over (or no state change is being sent).
  const bool terminal = !out.events.empty() && IsTerminalJobState(out.events.back().state());
  if (!terminal && job->version > out.version &&
      (out.events.empty() || now >= not_before)) {
    out.events.push_back(StatusLocked(*job, now));
    out.version = job->version;
  }
  return out;
}

}  // namespace lockstep
