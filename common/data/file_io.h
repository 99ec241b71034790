// Whole-file reading with transparent gzip decompression, shared by the
// IDX, CSV and LIBSVM loaders.
#ifndef LOCKSTEP_COMMON_DATA_FILE_IO_H_
#define LOCKSTEP_COMMON_DATA_FILE_IO_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace lockstep {

// The bytes of one file, already gunzipped when the file began with the gzip
// magic 1f 8b. Value type; owns its bytes.
struct FileBytes {
  std::string path;      // as given to ReadFileBytes
  bool gzipped = false;  // true if `data` is the decompressed content
  std::string data;      // whole (decompressed) content

  // "file <path>: offset <o>" for plain files, and
  // "file <path>: decompressed offset <o>" for gzip files, so that error
  // messages always say which byte stream an offset refers to.
  std::string Where(int64_t offset) const;
};

// Reads the whole file in one go. If it starts with 1f 8b it is inflated with
// zlib (concatenated gzip members are supported).
// Errors:
//   NotFoundError         the file does not exist,
//   PermissionDeniedError / other errno-derived codes: open/read failed,
//   DataLossError         corrupt or truncated gzip stream, or trailing
//                         non-gzip bytes after the last member (the message
//                         names the file and the compressed byte offset).
// An empty file is returned as empty data (callers decide if that is an
// error). Thread-compatible (no shared state).
absl::StatusOr<FileBytes> ReadFileBytes(const std::string& path);

// Inflates a complete gzip stream (one or more members). `name` is used only
// in error messages. Same DataLossError contract as ReadFileBytes.
absl::StatusOr<std::string> GunzipBytes(std::string_view compressed,
                                        std::string_view name);

// True if `bytes` starts with the gzip magic 1f 8b.
bool LooksGzipped(std::string_view bytes);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_DATA_FILE_IO_H_
