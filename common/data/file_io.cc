#include "common/data/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace lockstep {

std::string FileBytes::Where(int64_t offset) const {
  return absl::StrFormat("file %s: %soffset %d", path,
                         gzipped ? "decompressed " : "", offset);
}

bool LooksGzipped(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

namespace {

absl::StatusOr<std::string> ReadRaw(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return absl::ErrnoToStatus(err, absl::StrFormat("file %s: cannot open: %s",
                                                    path, std::strerror(err)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
    const int err = S_ISDIR(st.st_mode) ? EISDIR : errno;
    ::close(fd);
    return absl::ErrnoToStatus(
        err, absl::StrFormat("file %s: expected a regular file: %s", path,
                             std::strerror(err)));
  }
  std::string out;
  // Regular files: one read of the known size. Others (pipes): grow.
  out.resize(S_ISREG(st.st_mode) && st.st_size > 0
                 ? static_cast<size_t>(st.st_size) + 1
                 : size_t{1} << 16);
  size_t pos = 0;
  for (;;) {
    if (pos == out.size()) out.resize(out.size() * 2);
    const ssize_t got = ::read(fd, &out[pos], out.size() - pos);
    if (got == 0) break;
    if (got < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      ::close(fd);
      return absl::ErrnoToStatus(
          err, absl::StrFormat("file %s: read error at offset %d: %s", path,
                               pos, std::strerror(err)));
    }
    pos += static_cast<size_t>(got);
  }
  ::close(fd);
  out.resize(pos);
  return out;
}

}  // namespace

absl::StatusOr<std::string> GunzipBytes(std::string_view compressed,
                                        std::string_view name) {
  // Output buffer left uninitialised (no zero-fill of memory that inflate
  // overwrites anyway); grown by doubling.
  // Initial size: ISIZE (last 4 bytes, little-endian) is the uncompressed
  // size mod 2^32 of the last member, exact for the usual single-member
  // file. A truncated or corrupt file has garbage there, so the guess is
  // capped by deflate's maximum ratio (~1032:1) and by 1 GiB.
  size_t cap = compressed.size() * 4 + 64;
  if (compressed.size() >= 18) {
    const unsigned char* t = reinterpret_cast<const unsigned char*>(
        compressed.data() + compressed.size() - 4);
    const uint32_t isize =
        t[0] | (t[1] << 8) | (t[2] << 16) | (static_cast<uint32_t>(t[3]) << 24);
    const size_t plausible =
        std::min<size_t>(compressed.size() * 1032 + 1024, size_t{1} << 30);
    if (isize > 0 && isize < plausible) cap = static_cast<size_t>(isize) + 1;
  }
  std::unique_ptr<char[]> out(new char[cap]);

  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  if (inflateInit2(&zs, 15 + 16) != Z_OK) {
    return absl::InternalError(
        absl::StrFormat("file %s: zlib inflateInit2 failed", name));
  }
  const unsigned char* in =
      reinterpret_cast<const unsigned char*>(compressed.data());
  size_t in_pos = 0;   // consumed compressed bytes
  size_t out_pos = 0;  // produced bytes
  constexpr size_t kMaxChunk = std::numeric_limits<uInt>::max() / 2;
  absl::Status status;
  for (;;) {
    if (out_pos == cap) {
      std::unique_ptr<char[]> bigger(new char[cap * 2]);
      std::memcpy(bigger.get(), out.get(), out_pos);
      out = std::move(bigger);
      cap *= 2;
    }
    const size_t in_avail = std::min(compressed.size() - in_pos, kMaxChunk);
    const size_t out_avail = std::min(cap - out_pos, kMaxChunk);
    zs.next_in = const_cast<Bytef*>(in + in_pos);
    zs.avail_in = static_cast<uInt>(in_avail);
    zs.next_out = reinterpret_cast<Bytef*>(out.get() + out_pos);
    zs.avail_out = static_cast<uInt>(out_avail);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    in_pos += in_avail - zs.avail_in;
    out_pos += out_avail - zs.avail_out;
    if (rc == Z_STREAM_END) {
      if (in_pos == compressed.size()) break;
      if (!LooksGzipped(compressed.substr(in_pos))) {
        status = absl::DataLossError(absl::StrFormat(
            "file %s: compressed offset %d: expected end of file or another "
            "gzip member (1f 8b), found %d trailing bytes",
            name, in_pos, compressed.size() - in_pos));
        break;
      }
      inflateReset(&zs);
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR) {
      // No progress possible: either out of output space (grown above) or
      // out of input in the middle of a member.
      if (out_pos < cap && in_pos == compressed.size()) {
        status = absl::DataLossError(absl::StrFormat(
            "file %s: compressed offset %d: gzip stream truncated (expected "
            "more compressed data, file has %d bytes)",
            name, in_pos, compressed.size()));
        break;
      }
      if (out_pos < cap && in_avail == zs.avail_in) {  // defensive
        status = absl::DataLossError(absl::StrFormat(
            "file %s: compressed offset %d: gzip decoder made no progress",
            name, in_pos));
        break;
      }
      continue;
    }
    status = absl::DataLossError(absl::StrFormat(
        "file %s: compressed offset %d: corrupt gzip data: %s", name, in_pos,
        zs.msg != nullptr ? zs.msg : "zlib error"));
    break;
  }
  inflateEnd(&zs);
  if (!status.ok()) return status;
  return std::string(out.get(), out_pos);
}

absl::StatusOr<FileBytes> ReadFileBytes(const std::string& path) {
  absl::StatusOr<std::string> raw = ReadRaw(path);
  if (!raw.ok()) return raw.status();
  FileBytes fb;
  fb.path = path;
  if (LooksGzipped(*raw)) {
    absl::StatusOr<std::string> plain = GunzipBytes(*raw, path);
    if (!plain.ok()) return plain.status();
    fb.gzipped = true;
    fb.data = *std::move(plain);
  } else {
    fb.data = *std::move(raw);
  }
  return fb;
}

}  // namespace lockstep
