// The daemons' logging flags, shared by lockstep-coordinator,
// lockstep-worker and lockstep-server:
//   --log_format=text|json   (default text; see common/log.h)
//   --log_level=debug|info|warn|error   (default info)
#ifndef LOCKSTEP_COMMON_LOG_FLAGS_H_
#define LOCKSTEP_COMMON_LOG_FLAGS_H_

#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "common/log.h"

ABSL_DECLARE_FLAG(std::string, log_format);
ABSL_DECLARE_FLAG(std::string, log_level);

namespace lockstep {

// The options the two flags ask for, or INVALID_ARGUMENT naming the flag and
// the values it takes (--log_format: expected text or json, got "xml");
// mains exit 2 on it.
absl::StatusOr<LogOptions> LogOptionsFromFlags();

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_LOG_FLAGS_H_
