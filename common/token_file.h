// Small secret files named by flags: bearer tokens (--token_file,
// --http_token_file) and the PEM files of common/grpcutil/tls.h, and the
// constant-time comparison the tokens are checked with. No gRPC.
// Errors name the flag and the file; any thread.
#ifndef LOCKSTEP_COMMON_TOKEN_FILE_H_
#define LOCKSTEP_COMMON_TOKEN_FILE_H_

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

// The whole file. INVALID_ARGUMENT "<flag>: cannot read <path> ..." when it
// cannot be read, "<flag>: <path> is N bytes, expected at most <limit>".
absl::StatusOr<std::string> ReadSmallFile(absl::string_view flag, const std::string& path,
                                          size_t limit);

// True iff a == b, in time that depends only on the lengths (every byte
// of `a` is compared, against b's cyclically when the lengths differ): a
// guessed token `a` against the real one `b`.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// Reads a bearer token file: its content without surrounding white space.
// INVALID_ARGUMENT naming `flag` and the file when it cannot be read, is
// empty, holds anything but one token of printable ASCII, or more than
// 4 KiB.
absl::StatusOr<std::string> ReadTokenFile(absl::string_view flag, const std::string& path);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TOKEN_FILE_H_
