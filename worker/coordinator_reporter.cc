#include "worker/coordinator_reporter.h"

#include "absl/strings/match.h"

namespace lockstep {

bool CoordinatorDown(const absl::Status& s) {
  if (s.code() != absl::StatusCode::kUnavailable) return false;
  for (absl::string_view sign : {"onnection refused", "Socket closed", "reset by peer",
                                 "Broken pipe", "GOAWAY"}) {
    if (absl::StrContains(s.message(), sign)) return true;
  }
  return false;
}
}  // namespace lockstep
