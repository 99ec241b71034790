// --help for every lockstep binary. Abseil's default --help lists only the
// flags defined in a file named like the binary (lockstep-worker.cc,
// lockstep-worker_main.cc, ...), which none of ours is: `lockstep-worker
// --help` printed "No flags matched." and `lockstep --help` missed the job
// flags defined in common/train/job_flags.cc.
//
// Every main calls ConfigureFlagsUsage() first and parses with
// ParseFlagsOrExit() instead of absl::ParseCommandLine().
#ifndef LOCKSTEP_COMMON_FLAGS_USAGE_H_
#define LOCKSTEP_COMMON_FLAGS_USAGE_H_

#include <vector>

#include "absl/strings/string_view.h"

namespace lockstep {

// True for a source file of this project: a path (as __FILE__ records it,
// e.g. "worker/worker_main.cc", or an absolute path to the work tree) under
// client/, common/, server/ or worker/.
bool IsLockstepSourceFile(absl::string_view file);

// Sets the program's usage message and Abseil's usage configuration so that
// --help, --helpshort and --helppackage list every flag defined in a
// lockstep source file that the binary links (its own flags, the shared job
// flags, the logging flags), grouped by file; --helpfull adds Abseil's own
// flags. Call once, first thing in main, before any parsing.
void ConfigureFlagsUsage(absl::string_view usage_message);

// absl::ParseCommandLine(argc, argv), except that after a usage flag
// (--help, --helpshort, --helpfull, --helppackage, --helpon=, --helpmatch=,
// --version, --only_check_args) it prints the output to stdout and exits 0.
// (Abseil 20220623's ParseCommandLine exits 1 after --help; later Abseil
// releases exit 0, which is what a user and scripts expect.) Undefined or
// malformed flags behave as in ParseCommandLine (message on stderr, exit 1).
// Returns the positional arguments, argv[0] first.
std::vector<char*> ParseFlagsOrExit(int argc, char** argv);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_FLAGS_USAGE_H_
