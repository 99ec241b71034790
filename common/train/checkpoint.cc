#include "common/train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "xxhash.h"

namespace lockstep {
namespace {

static_assert(sizeof(float) == 4, "float32 expected");
constexpr size_t kHeaderBytes = 112;
constexpr size_t kTrailerBytes = 8;

void PutU32(std::string* out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(b, 4);
}
void PutU64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out->append(b, 8);
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string Errno(const char* call, const std::string& path) {
  return absl::StrCat(path, ": ", call, ": ", std::strerror(errno));
}

absl::Status FsyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(Errno("open", path));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  if (rc != 0) return absl::UnavailableError(Errno("fsync", path));
  return absl::OkStatus();
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// A size field that must equal `want` (>= 0) or lie in [0, max].
absl::Status CheckCount(absl::string_view origin, const char* field, int64_t got, int64_t want,
                        int64_t max) {
  if (want >= 0 && got != want) {
    return absl::FailedPreconditionError(
        absl::StrCat(origin, ": ", field, ": expected ", want, ", got ", got));
  }
  if (got < 0 || got > max) {
    return absl::FailedPreconditionError(
        absl::StrCat(origin, ": ", field, ": expected 0 to ", max, ", got ", got));
  }
  return absl::OkStatus();
}

}  // namespace

std::string EncodeCheckpoint(const TrainingState& s) {
  std::string out;
  out.reserve(kHeaderBytes + s.job_spec.size() +
              4 * (s.params.size() + s.optimizer.slots.size()) + kTrailerBytes);
  out.append(kCheckpointMagic, 8);
  PutU32(&out, kCheckpointVersion);
  PutU32(&out, s.sampler.drop_last ? 1u : 0u);
  PutU64(&out, s.job_id);
  PutU64(&out, s.seed);
  PutU64(&out, static_cast<uint64_t>(s.next_step));
  PutU64(&out, static_cast<uint64_t>(s.total_steps));
  PutU64(&out, static_cast<uint64_t>(s.sampler.num_examples));
  PutU64(&out, static_cast<uint64_t>(s.sampler.global_batch));
  PutU64(&out, s.weights_hash.hi);
  PutU64(&out, s.weights_hash.lo);
  PutU64(&out, s.params.size());
  PutU64(&out, static_cast<uint64_t>(s.optimizer.steps));
  PutU64(&out, s.optimizer.slots.size());
  PutU64(&out, s.job_spec.size());
  out.append(s.job_spec);
  // Float arrays: the build is little-endian IEEE-754 (hash.cc asserts it),
  // so the in-memory bytes are the file's bytes.
  out.append(reinterpret_cast<const char*>(s.params.data()), 4 * s.params.size());
  out.append(reinterpret_cast<const char*>(s.optimizer.slots.data()),
             4 * s.optimizer.slots.size());
  PutU64(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

absl::StatusOr<TrainingState> DecodeCheckpoint(absl::string_view bytes,
                                               const CheckpointLimits& limits,
                                               absl::string_view origin) {
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kCheckpointMagic, 8) != 0) {
    return absl::DataLossError(absl::StrCat(
        origin, ": magic: expected \"LKSTCKPT\" (a lockstep checkpoint), got ",
        bytes.size() < 8 ? absl::StrCat("a file of ", bytes.size(), " bytes")
                         : absl::StrCat("\"", absl::CHexEscape(bytes.substr(0, 8)), "\"")));
  }
  if (bytes.size() < kHeaderBytes + kTrailerBytes) {
    return absl::DataLossError(absl::StrCat(origin, ": truncated: ", bytes.size(),
                                            " bytes, shorter than the ",
                                            kHeaderBytes + kTrailerBytes,
                                            "-byte header and checksum"));
  }
  const char* p = bytes.data();
  const uint32_t version = GetU32(p + 8);
  if (version != kCheckpointVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        origin, ": version: expected ", kCheckpointVersion, ", got ", version));
  }
  TrainingState s;
  const uint32_t flags = GetU32(p + 12);
  s.sampler.drop_last = (flags & 1u) != 0;
  s.job_id = GetU64(p + 16);
  s.seed = GetU64(p + 24);
  s.next_step = static_cast<int64_t>(GetU64(p + 32));
  s.total_steps = static_cast<int64_t>(GetU64(p + 40));
  s.sampler.num_examples = static_cast<int64_t>(GetU64(p + 48));
  s.sampler.global_batch = static_cast<int64_t>(GetU64(p + 56));
  s.weights_hash.hi = GetU64(p + 64);
  s.weights_hash.lo = GetU64(p + 72);
  const int64_t num_params = static_cast<int64_t>(GetU64(p + 80));
  s.optimizer.steps = static_cast<int64_t>(GetU64(p + 88));
  const int64_t num_slots = static_cast<int64_t>(GetU64(p + 96));
  const int64_t spec_bytes = static_cast<int64_t>(GetU64(p + 104));
  // Sizes first, against what the caller expects, before any allocation.
  if (absl::Status st = CheckCount(origin, "num_params", num_params, limits.num_params,
                                   limits.max_floats);
      !st.ok()) {
    return st;
  }
  if (absl::Status st =
          CheckCount(origin, "num_slots", num_slots, limits.num_slots, limits.max_floats);
      !st.ok()) {
    return st;
  }
  if (absl::Status st =
          CheckCount(origin, "spec_bytes", spec_bytes, -1, limits.max_spec_bytes);
      !st.ok()) {
    return st;
  }
  const uint64_t want_size = kHeaderBytes + static_cast<uint64_t>(spec_bytes) +
                             4 * static_cast<uint64_t>(num_params + num_slots) + kTrailerBytes;
  if (bytes.size() != want_size) {
    return absl::DataLossError(absl::StrCat(
        origin, bytes.size() < want_size ? ": truncated: " : ": trailing bytes: ", "expected ",
        want_size, " bytes (", num_params, " weights, ", num_slots, " optimizer slots, ",
        spec_bytes, "-byte spec), got ", bytes.size()));
  }
  const uint64_t stored = GetU64(p + bytes.size() - kTrailerBytes);
  const uint64_t computed = XXH3_64bits(p, bytes.size() - kTrailerBytes);
  if (stored != computed) {
    return absl::DataLossError(absl::StrFormat(
        "%s: checksum: stored XXH3-64 %016x, contents hash to %016x (the file is corrupt)",
        origin, stored, computed));
  }
  if (s.next_step < 1 || s.total_steps < s.next_step) {
    return absl::DataLossError(absl::StrCat(origin, ": next_step: expected 1 to total_steps (",
                                            s.total_steps, "), got ", s.next_step));
  }
  if (s.optimizer.steps < 0) {
    return absl::DataLossError(
        absl::StrCat(origin, ": optimizer steps: expected >= 0, got ", s.optimizer.steps));
  }
  if (s.sampler.num_examples <= 0 || s.sampler.global_batch <= 0) {
    return absl::DataLossError(absl::StrCat(
        origin, ": sampler: expected examples and batch > 0, got ", s.sampler.num_examples,
        " and ", s.sampler.global_batch));
  }
  const char* q = p + kHeaderBytes;
  s.job_spec.assign(q, static_cast<size_t>(spec_bytes));
  q += spec_bytes;
  s.params.resize(static_cast<size_t>(num_params));
  std::memcpy(s.params.data(), q, 4 * static_cast<size_t>(num_params));
  q += 4 * num_params;
  s.optimizer.slots.resize(static_cast<size_t>(num_slots));
  std::memcpy(s.optimizer.slots.data(), q, 4 * static_cast<size_t>(num_slots));
  const WeightHash h = HashWeights(s.params);
  if (h != s.weights_hash) {
    return absl::DataLossError(absl::StrCat(origin, ": weights_hash: recorded ",
                                            s.weights_hash.ToHex(), ", weights hash to ",
                                            h.ToHex()));
  }
  return s;
}

std::string JobCheckpointDir(absl::string_view root, uint64_t job) {
  std::string r(root);
  while (r.size() > 1 && r.back() == '/') r.pop_back();
  return absl::StrCat(r, "/job-", job);
}

std::string CheckpointFileName(int64_t next_step) {
  return absl::StrFormat("step-%012d.ckpt", next_step);
}

absl::Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("checkpoint directory: empty path");
  struct stat st;
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(dir, ": exists and is not a directory"));
  }
  const std::string parent = DirOf(dir);
  if (parent != dir) {
    if (absl::Status s = MakeDirs(parent); !s.ok()) return s;
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::PermissionDeniedError(Errno("mkdir", dir));
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes) {
  uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof(nonce), 0) != static_cast<ssize_t>(sizeof(nonce))) {
    return absl::UnavailableError(Errno("getrandom", path));
  }
  const std::string tmp = absl::StrFormat("%s.%016x.tmp", path, nonce);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::UnavailableError(Errno("open", tmp));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string e = Errno("write", tmp);
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::UnavailableError(e);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const std::string e = Errno("fsync", tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return absl::UnavailableError(e);
  }
  if (::close(fd) != 0) {
    const std::string e = Errno("close", tmp);
    ::unlink(tmp.c_str());
    return absl::UnavailableError(e);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string e = Errno("rename", tmp);
    ::unlink(tmp.c_str());
    return absl::UnavailableError(e);
  }
  return FsyncPath(DirOf(path), O_RDONLY | O_DIRECTORY);
}

absl::StatusOr<std::vector<std::pair<int64_t, std::string>>> ListCheckpoints(
    const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(dir, ": no such checkpoint directory"));
    }
    return absl::UnavailableError(Errno("opendir", dir));
  }
  std::vector<std::pair<int64_t, std::string>> files;
  while (struct dirent* e = ::readdir(d)) {
    absl::string_view name = e->d_name;
    int64_t step = 0;
    if (name.size() == CheckpointFileName(0).size() && absl::ConsumePrefix(&name, "step-") &&
        absl::ConsumeSuffix(&name, ".ckpt") && absl::SimpleAtoi(name, &step) && step >= 0) {
      files.emplace_back(step, absl::StrCat(dir, "/", e->d_name));
    }
  }
  ::closedir(d);
  std::sort(files.begin(), files.end());
  return files;
}

absl::StatusOr<std::string> WriteCheckpoint(const std::string& dir, const TrainingState& state,
                                            int keep) {
  if (keep < 1) keep = 1;
  if (absl::Status s = MakeDirs(dir); !s.ok()) return s;
  const std::string path = absl::StrCat(dir, "/", CheckpointFileName(state.next_step));
  if (absl::Status s = WriteFileAtomically(path, EncodeCheckpoint(state)); !s.ok()) return s;
  // Prune: the oldest files beyond `keep`, and .tmp leftovers of a crash
  // (an hour old: a younger one may be another writer's, in progress).
  auto files = ListCheckpoints(dir);
  if (!files.ok()) return files.status();
  for (size_t i = 0; i + keep < files->size(); ++i) {
    if (::unlink((*files)[i].second.c_str()) != 0 && errno != ENOENT) {
      return absl::UnavailableError(Errno("unlink", (*files)[i].second));
    }
  }
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> stale;
    while (struct dirent* e = ::readdir(d)) {
      absl::string_view name = e->d_name;
      if (absl::StartsWith(name, "step-") && absl::EndsWith(name, ".tmp") &&
          absl::StrContains(name, ".ckpt.")) {
        stale.push_back(absl::StrCat(dir, "/", name));
      }
    }
    ::closedir(d);
    const int64_t now = static_cast<int64_t>(::time(nullptr));
    for (const std::string& s : stale) {
      struct stat st;
      if (::stat(s.c_str(), &st) == 0 &&
          now - static_cast<int64_t>(st.st_mtime) >= kStaleTempFileSeconds) {
        ::unlink(s.c_str());
      }
    }
  }
  return path;
}

namespace {

// Reads `path` whole, refusing a file larger than `max_bytes` before
// allocating.
absl::StatusOr<std::string> ReadBounded(const std::string& path, uint64_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, ": no such checkpoint"));
    return absl::UnavailableError(Errno("open", path));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const std::string e = Errno("fstat", path);
    ::close(fd);
    return absl::UnavailableError(e);
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": size: expected at most ", max_bytes,
                     " bytes for this job's model, got ", st.st_size));
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, &bytes[done], bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string e = Errno("read", path);
      ::close(fd);
      return absl::UnavailableError(e);
    }
    if (n == 0) break;  // shrank under us: the decoder reports the truncation
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  bytes.resize(done);
  return bytes;
}

uint64_t MaxFileBytes(const CheckpointLimits& limits) {
  const uint64_t p = limits.num_params >= 0 ? limits.num_params : limits.max_floats;
  const uint64_t q = limits.num_slots >= 0 ? limits.num_slots : limits.max_floats;
  return kHeaderBytes + static_cast<uint64_t>(limits.max_spec_bytes) + 4 * (p + q) +
         kTrailerBytes;
}

absl::StatusOr<TrainingState> LoadFile(const std::string& path,
                                       const CheckpointLimits& limits) {
  auto bytes = ReadBounded(path, MaxFileBytes(limits));
  if (!bytes.ok()) return bytes.status();
  return DecodeCheckpoint(*bytes, limits, path);
}

}  // namespace

uint64_t MaxCheckpointFileBytes(const CheckpointLimits& limits) { return MaxFileBytes(limits); }

absl::StatusOr<std::string> ReadCheckpointFile(const std::string& path,
                                               const CheckpointLimits& limits) {
  return ReadBounded(path, MaxFileBytes(limits));
}

absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& dir, int64_t step,
                                                const CheckpointLimits& limits) {
  LoadedCheckpoint out;
  if (step > 0) {
    out.path = absl::StrCat(dir, "/", CheckpointFileName(step));
    auto state = LoadFile(out.path, limits);
    if (!state.ok()) return state.status();
    out.state = *std::move(state);
    return out;
  }
  auto files = ListCheckpoints(dir);
  if (!files.ok()) return files.status();
  if (files->empty()) {
    return absl::NotFoundError(absl::StrCat(dir, ": holds no checkpoint (step-*.ckpt)"));
  }
  absl::Status first_error;
  for (auto it = files->rbegin(); it != files->rend(); ++it) {
    auto state = LoadFile(it->second, limits);
    if (state.ok()) {
      out.path = it->second;
      out.state = *std::move(state);
      return out;
    }
    if (first_error.ok()) first_error = state.status();
    out.skipped.push_back(std::string(state.status().message()));
  }
  std::string all;
  for (size_t i = 1; i < out.skipped.size(); ++i) absl::StrAppend(&all, "; ", out.skipped[i]);
  return absl::Status(first_error.code(),
                      absl::StrCat("no valid checkpoint in ", dir, ": ",
                                   first_error.message(), all));
}

}  // namespace lockstep
