// The coordinator commands of the `lockstep` client: see client_commands.h.
#include "client/client_commands.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "client/npy.h"
#include "client/resume_command.h"
#include "common/grpcutil/grpc_status.h"
#include "common/train/job_flags.h"
#include "google/protobuf/util/json_util.h"
#include "proto/coordinator.grpc.pb.h"

namespace lockstep {
namespace {

using v1::JobState;

int Fail(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "lockstep %s: %s: %s\n", what.c_str(),
               absl::StatusCodeToString(s.code()).c_str(), std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ||
                 s.code() == absl::StatusCode::kNotFound ||
                 s.code() == absl::StatusCode::kFailedPrecondition ||
                 s.code() == absl::StatusCode::kResourceExhausted
             ? 2
             : 1;
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

std::string StateName(JobState s) { return v1::JobState_Name(s); }

bool Terminal(JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

std::string Duration(double seconds) {
  if (!(seconds >= 0) || std::isinf(seconds)) return "--:--";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  return s >= 3600 ? absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60)
                   : absl::StrFormat("%d:%02d", s / 60, s % 60);
}

std::string SyncMark(const v1::JobStatus& j) {
  if (j.out_of_sync()) return "OUT OF SYNC";
  return j.checked_steps() > 0 ? "in sync" : "unchecked";
}

// The follow's last sync line. Never claims "in sync at every step" for
// steps that did not run.
std::string SyncSummary(const v1::JobStatus& j, const v1::SyncHistory& sync) {
  const long long checked = sync.checked_steps();
  if (checked == 0) return "sync: no step completed, so no replica hashes were compared";
  std::string line = absl::StrFormat("sync: %lld of %lld steps checked, ", checked,
                                     static_cast<long long>(j.total_steps()));
  if (sync.mismatched_steps() != 0) {
    return line + absl::StrFormat("%d mismatched (first at step %d)", sync.mismatched_steps(),
                                  sync.first_mismatch_step());
  }
  return line + (checked < j.total_steps() ? "all replicas in sync at every checked step"
                                           : "all replicas in sync at every step");
}

// "ring/tcp", "ring/grpc", "ring/shm", "ps/tcp" or "ps/grpc": how the job
// combines gradients and over which data plane (as the worker logs it).
std::string ModeName(const v1::JobSpec& spec) {
  if (spec.sync_mode() == v1::PS) return absl::StrCat("ps/", PeerTransportName(spec.ps_transport()));
  return absl::StrCat("ring/", PeerTransportName(spec.peer_transport()));
}

std::string ProgressLine(const v1::JobStatus& j) {
  const int64_t total = j.total_steps();
  const double frac = total > 0 ? static_cast<double>(j.step()) / total : 0.0;
  const int width = 24;
  const int filled = static_cast<int>(frac * width);
  std::string bar = std::string(filled, '#') + std::string(width - filled, '.');
  const double eta = j.examples_per_second() > 0 && total > 0
                         ? (total - j.step()) * static_cast<double>(j.spec().global_batch()) /
                               j.examples_per_second()
                         : -1;
  return absl::StrFormat("job %d %-9s [%s] step %d/%d %3.0f%% epoch %d loss %.4f %.0f ex/s ETA %s %s",
                         j.job_id(), StateName(j.state()), bar, j.step(), total, 100 * frac,
                         j.epoch(), j.loss(), j.examples_per_second(), Duration(eta), SyncMark(j));
}

void PrintStatus(const v1::JobStatus& j) {
  std::printf("job %llu  %s%s%s\n", static_cast<unsigned long long>(j.job_id()),
              StateName(j.state()).c_str(), j.reason().empty() ? "" : ": ", j.reason().c_str());
  std::printf("  model %s  dataset %s  %s  workers %d  batch %lld\n", j.spec().model().c_str(),
              j.spec().data().dataset().empty() ? "fashion-mnist" : j.spec().data().dataset().c_str(),
              ModeName(j.spec()).c_str(), j.spec().num_workers(),
              static_cast<long long>(j.spec().global_batch()));
  // No accuracy where there is none (a job that has not evaluated yet).
  const std::string accuracy =
      j.evaluated() ? absl::StrFormat("test_accuracy %.4f", j.test_accuracy())
                    : std::string("test_accuracy -");
  std::printf("  step %lld/%lld  epoch %lld  loss %.4f  %s  %.0f ex/s\n",
              static_cast<long long>(j.step()), static_cast<long long>(j.total_steps()),
              static_cast<long long>(j.epoch()), j.loss(), accuracy.c_str(),
              j.examples_per_second());
  std::printf("  sync: %s, %lld steps checked, %lld mismatched\n", SyncMark(j).c_str(),
              static_cast<long long>(j.checked_steps()),
              static_cast<long long>(j.mismatched_steps()));
  if (j.skipped_steps() > 0) {
    std::string ranks;
    for (int32_t r : j.last_nonfinite_ranks()) absl::StrAppend(&ranks, ranks.empty() ? "" : ",", r);
    // No rank named: every rank's own values were finite, their sum was not.
    std::printf("  non-finite gradients: %lld step(s) skipped, the last at step %lld (%s%s)\n",
                static_cast<long long>(j.skipped_steps()),
                static_cast<long long>(j.last_skipped_step()),
                ranks.empty() ? "sum overflowed" : "rank(s) ", ranks.c_str());
  }
  // Membership (on_worker_lost=shrink / wait, late joiners): each change of
  // the group, one line.
  for (const v1::MembershipEvent& e : j.membership_events()) {
    const long long step = static_cast<long long>(e.step());
    const long long gen = static_cast<long long>(e.generation());
    if (e.kind() == "wait") {
      std::printf("  wait: rank %d lost (generation %lld), %s; %s\n", e.rank(), gen,
                  e.step() >= 0 ? absl::StrFormat("replaced, continued at step %lld", step).c_str()
                                : "waiting for a worker to replace it",
                  e.reason().c_str());
    } else if (e.kind() == "replace" || e.kind() == "join") {
      std::printf("  %s: %s as rank %d, %d -> %d workers (generation %lld), %s; %s\n",
                  e.kind().c_str(), e.worker_id().c_str(), e.rank(), e.world_before(),
                  e.world_after(), gen,
                  e.step() >= 0 ? absl::StrFormat("joined at step %lld", step).c_str()
                                : "regrouping",
                  e.reason().c_str());
    } else if (e.kind() == "restart") {
      std::printf("  restart: coordinator restarted, %s %d ranks%s (generation %lld); %s\n",
                  e.step() >= 0 ? "regrouped" : "regrouping", e.world_after(),
                  e.step() >= 0 ? absl::StrFormat(" at step %lld", step).c_str() : "", gen,
                  e.reason().c_str());
    } else {
      std::printf("  %s: %d -> %d workers (generation %lld), %s at step %lld; %s\n",
                  e.kind().c_str(), e.world_before(), e.world_after(), gen,
                  e.step() >= 0 ? "continued" : "regrouping, to continue", step,
                  e.reason().c_str());
    }
  }
  if (j.waiting_for_ranks_size() > 0) {
    std::string ranks;
    for (int32_t r : j.waiting_for_ranks()) absl::StrAppend(&ranks, ranks.empty() ? "" : ",", r);
    const double left = j.wait_deadline_unix_s() - absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
    std::printf("  waiting for a worker to take rank(s) %s: FAILED in %.0f s unless one registers\n",
                ranks.c_str(), left > 0 ? left : 0.0);
  }
  if (j.ranks_size() > 0) {
    // A tcp ring job's peers talk over their data addresses: list those too.
    const bool tcp = j.spec().sync_mode() != v1::PS && j.spec().peer_transport() == v1::TCP;
    std::printf("  %-4s %-6s %-22s %s%-12s %8s  %-32s %-8s %s\n", "rank", "worker", "address",
                tcp ? absl::StrFormat("%-22s ", "data address").c_str() : "", "host", "step",
                "last hash", "in sync", "heartbeat");
    for (const v1::RankStatus& r : j.ranks()) {
      std::printf("  %-4d %-6s %-22s %s%-12s %8lld  %-32s %-8s %.1fs ago\n", r.rank(),
                  r.worker_id().c_str(), r.address().c_str(),
                  tcp ? absl::StrFormat("%-22s ", r.data_address()).c_str() : "",
                  r.hostname().c_str(), static_cast<long long>(r.step()),
                  r.last_hash().c_str(), r.in_sync() ? "yes" : "NO", r.last_heartbeat_age_s());
    }
    // A combine that has waited for a second or more: which peer or shard
    // holds this rank up (a straggler, a cut link, an unreachable shard).
    for (const v1::RankStatus& r : j.ranks()) {
      if (r.waiting_s() < 1.0) continue;
      const std::string what =
          r.waiting_for_shard() > 0
              ? absl::StrCat("ps shard ", r.waiting_for_shard() - 1)
              : absl::StrCat("rank ", r.waiting_for_peer() - 1);
      std::printf("  rank %d waits for %s: %.1f s at its last heartbeat\n", r.rank(),
                  what.c_str(), r.waiting_s());
    }
    // Medians over each rank's last 64 steps (worker/step_observer.h): a
    // step is compute + exposed communication + waiting on the coordinator;
    // communication (in flight) may overlap compute.
    bool timed = false;
    for (const v1::RankStatus& r : j.ranks()) {
      timed = timed || r.median_step_seconds() > 0 || r.resident_bytes() > 0;
    }
    if (timed) {
      std::printf("  %-4s %9s %9s %9s %9s %9s %10s   (ms: medians of the last 64 steps)\n",
                  "rank", "step", "compute", "exposed", "comm", "peer wait", "RSS");
      for (const v1::RankStatus& r : j.ranks()) {
        std::printf("  %-4d %9.3f %9.3f %9.3f %9.3f %9.3f %6.1f MiB\n", r.rank(),
                    1e3 * r.median_step_seconds(), 1e3 * r.median_compute_seconds(),
                    1e3 * r.median_exposed_seconds(), 1e3 * r.median_communication_seconds(),
                    1e3 * r.median_peer_wait_seconds(),
                    static_cast<double>(r.resident_bytes()) / (1 << 20));
      }
    }
  }
}

}  // namespace

class ClientCommands::Impl {
 public:
  Impl(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials,
       ClientCommandOptions options)
      : o_(std::move(options)),
        rpc_(address, std::max(absl::Seconds(1), o_.rpc_timeout), std::move(credentials)) {}

  absl::StatusOr<v1::JobStatus> Get(uint64_t id) { return rpc_.GetJob(id); }

  absl::StatusOr<v1::SyncHistory> Sync(uint64_t id, int64_t max) {
    return rpc_.GetSyncHistory(id, max);
  }

  int Submit(const std::set<std::string>& given) {
    auto spec = JobSpecFromFlags(given);
    if (!spec.ok()) return Fail("submit", spec.status());
    v1::SubmitJobRequest req;
    *req.mutable_spec() = *spec;
    req.set_no_wait(o_.no_wait);
    absl::StatusOr<v1::SubmitJobReply> submitted = rpc_.Submit(req);
    if (!submitted.ok()) return Fail("submit", submitted.status());
    return Submitted(*submitted);
  }

  // `lockstep resume JOB` (client/resume_command.h).
  int Resume(uint64_t job) {
    auto submitted = SubmitResume(&rpc_, job, o_.from_step,
                                  o_.no_wait);
    if (!submitted.ok()) return Fail("resume", submitted.status());
    return Submitted(*submitted);
  }

  // Prints a submitted job's id, or follows it with --follow.
  int Submitted(const v1::SubmitJobReply& reply) {
    const bool json = o_.json;
    if (!o_.follow) {
      if (json) {
        std::printf("%s\n", Json(reply).c_str());
      } else {
        std::printf("%llu\n", static_cast<unsigned long long>(reply.job_id()));
      }
      return 0;
    }
    if (!json) {
      std::printf("submitted job %llu (%s)\n", static_cast<unsigned long long>(reply.job_id()),
                  StateName(reply.state()).c_str());
    }
    return Follow(reply.job_id());
  }

  // Streams WatchJob events, drawing a progress bar, until the job ends.
  int Follow(uint64_t id) {
    const bool json = o_.json;
    const bool tty = isatty(fileno(stderr));
    v1::JobStatus last;
    bool have = false;
    absl::Time last_print = absl::InfinitePast();
    // Reconnects if the stream breaks before the job ended.
    for (int attempt = 0; attempt < 5 && !(have && Terminal(last.state())); ++attempt) {
      grpc::ClientContext ctx;
      v1::JobRef ref;
      ref.set_job_id(id);
      auto reader = rpc_.stub()->WatchJob(&ctx, ref);
      v1::JobEvent ev;
      while (reader->Read(&ev)) {
        last = ev.status();
        have = true;
        const absl::Time now = absl::Now();
        if (!json && (tty || now - last_print >= absl::Seconds(2) || Terminal(last.state()))) {
          std::fprintf(stderr, tty ? "\r%s\033[K" : "%s\n", ProgressLine(last).c_str());
          last_print = now;
        }
      }
      absl::Status s = FromGrpcStatus(reader->Finish());
      if (!s.ok() && s.code() != absl::StatusCode::kUnavailable) return Fail("follow", s);
    }
    if (tty && !json) std::fprintf(stderr, "\n");
    auto final_status = Get(id);
    if (!final_status.ok()) return Fail("follow", final_status.status());
    // The counts come with any number of entries: fetch one, never the
    // whole (possibly huge) history.
    auto sync = Sync(id, 1);
    if (!sync.ok()) return Fail("follow", sync.status());
    const v1::JobStatus& j = *final_status;
    if (json) {
      std::printf("%s\n", Json(j).c_str());
    } else {
      std::printf("job %llu %s%s%s\n", static_cast<unsigned long long>(id),
                  StateName(j.state()).c_str(), j.reason().empty() ? "" : ": ",
                  j.reason().c_str());
      // No accuracy where there is none (a job that never evaluated).
      if (j.evaluated()) {
        std::printf("final test accuracy: %.4f (test loss %.4f) after %lld steps, %.0f ex/s\n",
                    j.test_accuracy(), j.test_loss(), static_cast<long long>(j.step()),
                    j.examples_per_second());
      } else {
        std::printf("no test evaluation; %lld steps, %.0f ex/s\n",
                    static_cast<long long>(j.step()), j.examples_per_second());
      }
      std::printf("%s\n", SyncSummary(j, *sync).c_str());
      if (!j.final_hash().empty()) std::printf("final weights hash: %s\n", j.final_hash().c_str());
    }
    switch (j.state()) {
      case v1::SUCCEEDED: return 0;
      case v1::CANCELLED: return 4;
      default: return 3;
    }
  }

  int Status(uint64_t id) {
    auto st = Get(id);
    if (!st.ok()) return Fail("status", st.status());
    if (o_.json) {
      std::printf("%s\n", Json(*st).c_str());
    } else {
      PrintStatus(*st);
    }
    return 0;
  }

  int SyncCmd(uint64_t id) {
    const bool all = o_.all;
    const int64_t max = o_.max_entries;
    // --all: pages of at most 1000 checks, never the whole history at once.
    auto h = all ? rpc_.GetSyncHistoryPage(id, 0, 1000) : Sync(id, max);
    if (!h.ok()) return Fail("sync", h.status());
    if (o_.json) {
      // --all: one JSON object per page, one per line.
      std::printf("%s\n", Json(*h).c_str());
      for (int64_t next = h->next_step(); all && next >= 0;) {
        auto page = rpc_.GetSyncHistoryPage(id, next, 1000);
        if (!page.ok()) return Fail("sync", page.status());
        std::printf("%s\n", Json(*page).c_str());
        if (page->checks_size() == 0) break;
        next = page->next_step();
      }
      return 0;
    }
    std::printf("job %llu: %lld steps checked, %lld mismatched%s\n",
                static_cast<unsigned long long>(id), static_cast<long long>(h->checked_steps()),
                static_cast<long long>(h->mismatched_steps()),
                h->first_mismatch_step() >= 0
                    ? absl::StrCat(" (first at step ", h->first_mismatch_step(), ")").c_str()
                    : "");
    auto print = [](const v1::SyncHistory& page) {
      // Older steps memory summarised (no per-step detail kept): say so,
      // then the runs of matching steps; the kept mismatches follow.
      if (!page.summary().empty()) std::printf("  [%s]\n", page.summary().c_str());
      for (const v1::SyncRun& r : page.runs()) {
        std::printf("  steps %lld-%lld  all ranks matched in %lld checked step(s) (summarised)  "
                    "%s\n",
                    static_cast<long long>(r.first_step()), static_cast<long long>(r.last_step()),
                    static_cast<long long>(r.checks()), r.last_majority_hash().c_str());
      }
      for (const v1::SyncCheck& c : page.checks()) {
        // What the coordinator made of it (divergence, awaiting repair,
        // repaired), when anything.
        const std::string note = c.note().empty() ? "" : absl::StrCat("  [", c.note(), "]");
        const std::string block = c.first_differing_block().empty()
                                      ? ""
                                      : absl::StrCat(" in block ", c.first_differing_block());
        if (c.all_match()) {
          std::printf("  step %6lld  all %d ranks match  %s%s\n", static_cast<long long>(c.step()),
                      c.rank_hashes_size(), c.majority_hash().c_str(), note.c_str());
        } else if (c.no_majority()) {
          std::printf("  step %6lld  MISMATCH: ranks %s differ, no majority%s%s\n",
                      static_cast<long long>(c.step()),
                      absl::StrJoin(c.differing_ranks(), " and ").c_str(), block.c_str(),
                      note.c_str());
        } else {
          std::printf("  step %6lld  MISMATCH: rank(s) %s differ from %s%s%s\n",
                      static_cast<long long>(c.step()),
                      absl::StrJoin(c.differing_ranks(), ", ").c_str(),
                      c.majority_hash().c_str(), block.c_str(), note.c_str());
        }
      }
    };
    print(*h);
    for (int64_t next = h->next_step(); all && next >= 0;) {
      auto page = rpc_.GetSyncHistoryPage(id, next, 1000);
      if (!page.ok()) return Fail("sync", page.status());
      print(*page);
      if (page->checks_size() == 0) break;
      next = page->next_step();
    }
    return 0;
  }

  int Jobs() {
    absl::StatusOr<v1::JobList> listed = rpc_.ListJobs();
    if (!listed.ok()) return Fail("jobs", listed.status());
    v1::JobList& list = *listed;
    // --all: the older evicted jobs too, page by page (each page at most
    // 1000 jobs, about 1 MiB), merged in id order.
    for (uint64_t before = list.evicted_next_before(); o_.all && before > 0;) {
      absl::StatusOr<v1::JobList> page = rpc_.ListJobs(before);
      if (!page.ok()) return Fail("jobs", page.status());
      if (page->jobs_size() == 0 || page->evicted_next_before() >= before) break;
      list.set_evicted_listed(list.evicted_listed() + page->evicted_listed());
      for (v1::JobStatus& j : *page->mutable_jobs()) *list.add_jobs() = std::move(j);
      before = page->evicted_next_before();
      list.set_evicted_next_before(before);
    }
    std::sort(list.mutable_jobs()->begin(), list.mutable_jobs()->end(),
              [](const v1::JobStatus& a, const v1::JobStatus& b) { return a.job_id() < b.job_id(); });
    if (o_.json) {
      std::printf("%s\n", Json(list).c_str());
      return 0;
    }
    std::printf("%-5s %-10s %-9s %-3s %-14s %-12s %9s %9s %s\n", "job", "state", "mode", "K",
                "model", "step", "loss", "test_acc", "sync");
    for (const v1::JobStatus& j : list.jobs()) {
      const std::string accuracy =
          j.evaluated() ? absl::StrFormat("%.4f", j.test_accuracy()) : std::string("-");
      std::printf("%-5llu %-10s %-9s %-3d %-14s %-12s %9.4f %9s %s\n",
                  static_cast<unsigned long long>(j.job_id()), StateName(j.state()).c_str(),
                  ModeName(j.spec()).c_str(), j.spec().num_workers(),
                  j.spec().model().c_str(),
                  absl::StrCat(j.step(), "/", j.total_steps()).c_str(), j.loss(),
                  accuracy.c_str(), SyncMark(j).c_str());
    }
    if (list.evicted_jobs() > list.evicted_listed()) {
      // Finished jobs the coordinator dropped from memory (it keeps the
      // newest max_finished_jobs_in_memory) and did not list from its
      // state database.
      std::printf("(%lld older finished job(s) not listed: the coordinator keeps the newest %lld "
                  "in memory; %s)\n",
                  static_cast<long long>(list.evicted_jobs() - list.evicted_listed()),
                  static_cast<long long>(list.max_finished_jobs_in_memory()),
                  !list.state_db_has_evicted() ? "they are forgotten (no --state_dir)"
                  : list.evicted_next_before() > 0
                      ? "`lockstep jobs --all` lists them from its state database"
                      : "`lockstep status|sync ID` reads them from its state database");
    }
    return 0;
  }

  int Workers() {
    absl::StatusOr<v1::WorkerList> listed = rpc_.ListWorkers();
    if (!listed.ok()) return Fail("workers", listed.status());
    const v1::WorkerList& list = *listed;
    if (o_.json) {
      std::printf("%s\n", Json(list).c_str());
      return 0;
    }
    std::printf("%-6s %-22s %-22s %-14s %-6s %-5s %-10s %s\n", "worker", "address",
                "data address", "host", "state", "job", "blas", "heartbeat");
    std::vector<std::string> advice;  // one line per distinct advice
    for (const v1::WorkerInfo& w : list.workers()) {
      const std::string blas = w.blas_core().empty()          ? "-"
                               : w.blas_advice().empty()      ? w.blas_core()
                                                              : w.blas_core() + "*";
      std::printf("%-6s %-22s %-22s %-14s %-6s %-5s %-10s %.1fs ago\n", w.worker_id().c_str(),
                  w.address().c_str(),
                  w.data_address().empty() ? "-" : w.data_address().c_str(),
                  w.hostname().c_str(),
                  v1::WorkerState_Name(w.state()).c_str(),
                  w.job_id() ? absl::StrCat(w.job_id()).c_str() : "-", blas.c_str(),
                  w.last_heartbeat_age_s());
      if (!w.blas_advice().empty() &&
          std::find(advice.begin(), advice.end(), w.blas_advice()) == advice.end()) {
        advice.push_back(w.blas_advice());
      }
    }
    for (const std::string& a : advice) std::printf("* %s\n", a.c_str());
    return 0;
  }

  int Cancel(uint64_t id) {
    absl::StatusOr<v1::JobStatus> cancelled = rpc_.Cancel(id);
    if (!cancelled.ok()) return Fail("cancel", cancelled.status());
    const v1::JobStatus& st = *cancelled;
    if (o_.json) {
      std::printf("%s\n", Json(st).c_str());
    } else {
      std::printf("job %llu %s\n", static_cast<unsigned long long>(id), StateName(st.state()).c_str());
    }
    return 0;
  }

  int Export(uint64_t id) {
    const std::string out = o_.out;
    if (out.empty()) {
      return Fail("export", absl::InvalidArgumentError("--out: expected a .npz or .npy path"));
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::WeightsRequest req;
    req.set_job_id(id);
    auto reader = rpc_.stub()->GetWeights(&ctx, req);
    v1::WeightsChunk chunk;
    std::vector<float> w;
    std::vector<std::string> names;
    std::vector<int64_t> shapes;
    while (reader->Read(&chunk)) {
      if (chunk.offset() == 0) {
        w.assign(chunk.total(), 0.0f);
        names.assign(chunk.block_names().begin(), chunk.block_names().end());
        shapes.assign(chunk.block_shapes().begin(), chunk.block_shapes().end());
      }
      const int64_t n = static_cast<int64_t>(chunk.data().size() / sizeof(float));
      if (chunk.offset() < 0 || chunk.offset() + n > static_cast<int64_t>(w.size())) {
        return Fail("export", absl::DataLossError(absl::StrCat(
                                  "chunk at offset ", chunk.offset(), " outside ", w.size())));
      }
      std::memcpy(w.data() + chunk.offset(), chunk.data().data(), chunk.data().size());
    }
    absl::Status s = FromGrpcStatus(reader->Finish());
    if (!s.ok()) return Fail("export", s);
    std::vector<NpyArray> arrays;
    size_t b = 0;
    int64_t offset = 0;
    for (const std::string& name : names) {
      NpyArray a;
      a.name = name;
      int64_t n = 1;
      while (b < shapes.size() && shapes[b] >= 0) {
        a.shape.push_back(shapes[b]);
        n *= shapes[b++];
      }
      ++b;  // the -1 separator
      if (offset + n > static_cast<int64_t>(w.size())) {
        return Fail("export", absl::DataLossError("layout larger than the weights"));
      }
      a.data = absl::MakeConstSpan(w.data() + offset, n);
      offset += n;
      arrays.push_back(a);
    }
    const bool npy = out.size() > 4 && out.substr(out.size() - 4) == ".npy";
    s = npy ? WriteNpy(out, NpyArray{"weights", {static_cast<int64_t>(w.size())}, w})
            : WriteNpz(out, arrays);
    if (!s.ok()) return Fail("export", s);
    if (o_.json) {
      std::printf("{\"job_id\": %llu, \"file\": \"%s\", \"floats\": %zu, \"arrays\": %zu}\n",
                  static_cast<unsigned long long>(id), out.c_str(), w.size(),
                  npy ? size_t{1} : arrays.size());
    } else {
      std::printf("wrote %zu floats (%s) to %s\n", w.size(),
                  npy ? "one flat array" : absl::StrJoin(names, ", ").c_str(), out.c_str());
    }
    return 0;
  }

 private:
  const ClientCommandOptions o_;
  CoordinatorClient rpc_;
};

ClientCommands::ClientCommands(const std::string& address,
                               std::shared_ptr<grpc::ChannelCredentials> credentials,
                               ClientCommandOptions options)
    : impl_(std::make_unique<Impl>(address, std::move(credentials), std::move(options))) {}
ClientCommands::~ClientCommands() = default;

int ClientCommands::Submit(const std::set<std::string>& given) { return impl_->Submit(given); }
int ClientCommands::Resume(uint64_t job) { return impl_->Resume(job); }
int ClientCommands::Follow(uint64_t job) { return impl_->Follow(job); }
int ClientCommands::Status(uint64_t job) { return impl_->Status(job); }
int ClientCommands::Sync(uint64_t job) { return impl_->SyncCmd(job); }
int ClientCommands::Jobs() { return impl_->Jobs(); }
int ClientCommands::Workers() { return impl_->Workers(); }
int ClientCommands::Cancel(uint64_t job) { return impl_->Cancel(job); }
int ClientCommands::Export(uint64_t job) { return impl_->Export(job); }

}  // namespace lockstep
