// Watch fan-out: versions that tell watchers a job changed, the snapshots
// taken at each state change, and what a coalesced watcher (WatchJob) is
// sent next.
//
// Versions: every change of a job stamps it with the next value of one
// counter shared by all jobs (WatchVersions::Bump; >= 1, increasing), so a
// watcher that has seen version v waits for "job version > v".
// State changes (PENDING, RUNNING, the end: at most 3 per job) also keep the
// snapshot taken when they happened (WatchVersions::StateChanged), so a
// watcher never misses one, however late it looks.
// Coalescing (NextEvents), for a watcher that has seen `seen` and last got
// events at Clock time last_sent (not_before = last_sent + interval):
//   * seen 0: the current snapshot, at once;
//   * every state change after `seen`: its snapshot, in order, never
//     coalesced away (the terminal one is always the last event);
//   * otherwise, once the job changed after `seen` and the Clock reads
//     >= not_before: the current snapshot.
// The blocking (absl::Mutex::AwaitWithDeadline on the Coordinator's mutex,
// real-time deadlines) stays in the Coordinator; this file decides.
//
// Not thread-safe: the Coordinator holds one WatchVersions and one JobWatch
// per job and calls them under its mutex.
#ifndef LOCKSTEP_SERVER_WATCH_FANOUT_H_
#define LOCKSTEP_SERVER_WATCH_FANOUT_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "proto/coordinator.pb.h"

namespace lockstep {

// One job's watch state.
struct JobWatch {
  uint64_t version = 0;  // 0: never stamped
  // Snapshot at each state change with the version it was taken at.
  std::vector<std::pair<uint64_t, lockstep::v1::JobStatus>> state_events;
};

// The global version counter.
class WatchVersions {
 public:
  // Stamps `w` with the next version.
  void Bump(JobWatch* w) { w->version = ++version_; }
  // Bump, and keep `snapshot` (taken after the change) as a state event.
  void StateChanged(JobWatch* w, lockstep::v1::JobStatus snapshot);
  uint64_t version() const { return version_; }

 private:
  uint64_t version_ = 0;
};

// What NextEvents returns (Coordinator::JobEvents).
struct JobEvents {
  std::vector<lockstep::v1::JobStatus> events;  // oldest first
  uint64_t version = 0;                         // the next seen_version
  absl::Time sent = absl::InfinitePast();       // the next last_sent
};

// Clock time before which no progress-only event is sent: last_sent +
// interval (InfinitePast when nothing was sent yet).
absl::Time WatchNotBefore(absl::Time last_sent, absl::Duration interval);

// True when a watcher that has seen `seen` has something to be sent at
// Clock time `now` (see the rules above).
bool WatchReady(const JobWatch& w, uint64_t seen, absl::Time now, absl::Time not_before);

// The events to send at Clock time `now` (call when WatchReady):
// the state changes after `seen`, then the current snapshot (`current()`,
// called at most once) when the job changed after them, has not ended and
// its interval is over (or no state change is sent). events is empty (and
// version == seen) when not ready.
JobEvents NextEvents(const JobWatch& w, uint64_t seen, absl::Time now, absl::Time not_before,
                     absl::FunctionRef<lockstep::v1::JobStatus()> current);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_WATCH_FANOUT_H_
