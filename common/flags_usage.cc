#include "common/flags_usage.h"

#include <cstdlib>
#include <iostream>

#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace lockstep {

bool IsLockstepSourceFile(absl::string_view file) {
  for (absl::string_view dir : {"client/", "common/", "server/", "worker/"}) {
    if (absl::StartsWith(file, dir)) return true;
    // An absolute or otherwise prefixed path: ".../lockstep/worker/x.cc".
    const size_t at = file.find(dir);
    if (at != absl::string_view::npos && at > 0 && file[at - 1] == '/') return true;
  }
  return false;
}

void ConfigureFlagsUsage(absl::string_view usage_message) {
  absl::SetProgramUsageMessage(usage_message);
  absl::FlagsUsageConfig config;
  config.contains_help_flags = IsLockstepSourceFile;
  config.contains_helpshort_flags = IsLockstepSourceFile;
  config.contains_helppackage_flags = IsLockstepSourceFile;
  absl::SetFlagsUsageConfig(config);
}

std::vector<char*> ParseFlagsOrExit(int argc, char** argv) {
  // ParseCommandLine = ParseCommandLineImpl(..., kHandleUsage, ...), which
  // calls std::exit(1) after --help in this Abseil version. Same parse, then
  // the same usage handling with our exit code.
  std::vector<char*> positional = absl::flags_internal::ParseCommandLineImpl(
      argc, argv, absl::flags_internal::ArgvListAction::kRemoveParsedArgs,
      absl::flags_internal::UsageFlagsAction::kIgnoreUsage,
      absl::flags_internal::OnUndefinedFlag::kAbortIfUndefined);
  const int handled =
      absl::flags_internal::HandleUsageFlags(std::cout, absl::ProgramUsageMessage());
  if (handled >= 0) {
    std::cout.flush();
    std::exit(0);
  }
  return positional;
}

}  // namespace lockstep
