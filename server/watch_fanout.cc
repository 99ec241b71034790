#include "server/watch_fanout.h"

#include <utility>

namespace lockstep {

namespace {

bool Terminal(v1::JobState s) {
  return s == v1::SUCCEEDED || s == v1::FAILED || s == v1::CANCELLED;
}

}  // namespace

void WatchVersions::StateChanged(JobWatch* w, v1::JobStatus snapshot) {
  Bump(w);
  w->state_events.emplace_back(w->version, std::move(snapshot));
}

absl::Time WatchNotBefore(absl::Time last_sent, absl::Duration interval) {
  return last_sent == absl::InfinitePast() ? absl::InfinitePast() : last_sent + interval;
}

bool WatchReady(const JobWatch& w, uint64_t seen, absl::Time now, absl::Time not_before) {
  if (seen == 0) return true;
  if (!w.state_events.empty() && w.state_events.back().first > seen) return true;
  return w.version > seen && now >= not_before;
}

JobEvents NextEvents(const JobWatch& w, uint64_t seen, absl::Time now, absl::Time not_before,
                     absl::FunctionRef<v1::JobStatus()> current) {
  JobEvents out;
  out.version = seen;
  if (!WatchReady(w, seen, now, not_before)) return out;
  out.sent = now;
  if (seen != 0) {
    for (const auto& [version, status] : w.state_events) {
      if (version <= seen) continue;
      out.events.push_back(status);
      out.version = version;
    }
  }
  const bool terminal = !out.events.empty() && Terminal(out.events.back().state());
  if (!terminal && w.version > out.version && (out.events.empty() || now >= not_before)) {
    out.events.push_back(current());
    out.version = w.version;
  }
  return out;
}

}  // namespace lockstep
