#include "client/npy.h"

#include <zlib.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

void PutU16(std::string* s, uint16_t v) {
  s->push_back(static_cast<char>(v & 0xff));
  s->push_back(static_cast<char>(v >> 8));
}
void PutU32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

absl::Status WriteAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot create ", tmp));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(path, ": cannot rename ", tmp));
  }
  return absl::OkStatus();
}

}  // namespace

std::string NpyBytes(const std::vector<int64_t>& shape, absl::Span<const float> data) {
  std::string dims = absl::StrJoin(shape, ", ");
  if (shape.size() == 1) dims += ",";
  std::string header =
      absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", dims, "), }");
  // magic(6) + version(2) + len(2) + header + '\n' is a multiple of 64.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  PutU16(&out, static_cast<uint16_t>(header.size()));
  out += header;
  out.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float));
  return out;
}

absl::Status WriteNpy(const std::string& path, const NpyArray& array) {
  return WriteAtomically(path, NpyBytes(array.shape, array.data));
}

absl::Status WriteNpz(const std::string& path, const std::vector<NpyArray>& arrays) {
  std::string zip, central;
  for (const NpyArray& a : arrays) {
    const std::string name = a.name + ".npy";
    const std::string body = NpyBytes(a.shape, a.data);
    if (body.size() >= 0xffffffffu || zip.size() >= 0xffffffffu) {
      return absl::OutOfRangeError(absl::StrCat(path, ": array ", a.name,
                                                " too large for a non-ZIP64 .npz"));
    }
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
    const uint32_t offset = static_cast<uint32_t>(zip.size());
    // Local file header: stored (method 0), no data descriptor.
    PutU32(&zip, 0x04034b50);
    PutU16(&zip, 20);  // version needed
    PutU16(&zip, 0);   // flags
    PutU16(&zip, 0);   // method: stored
    PutU16(&zip, 0);   // time
    PutU16(&zip, 0x21);  // date: 1980-01-01
    PutU32(&zip, crc);
    PutU32(&zip, static_cast<uint32_t>(body.size()));
    PutU32(&zip, static_cast<uint32_t>(body.size()));
    PutU16(&zip, static_cast<uint16_t>(name.size()));
    PutU16(&zip, 0);  // extra length
    zip += name;
    zip += body;
    // Central directory entry.
    PutU32(&central, 0x02014b50);
    PutU16(&central, 20);  // version made by
    PutU16(&central, 20);  // version needed
    PutU16(&central, 0);
    PutU16(&central, 0);
    PutU16(&central, 0);
    PutU16(&central, 0x21);
    PutU32(&central, crc);
    PutU32(&central, static_cast<uint32_t>(body.size()));
    PutU32(&central, static_cast<uint32_t>(body.size()));
    PutU16(&central, static_cast<uint16_t>(name.size()));
    PutU16(&central, 0);  // extra
    PutU16(&central, 0);  // comment
    PutU16(&central, 0);  // disk
    PutU16(&central, 0);  // internal attributes
    PutU32(&central, 0);  // external attributes
    PutU32(&central, offset);
    central += name;
  }
  const uint32_t central_offset = static_cast<uint32_t>(zip.size());
  zip += central;
  PutU32(&zip, 0x06054b50);  // end of central directory
  PutU16(&zip, 0);
  PutU16(&zip, 0);
  PutU16(&zip, static_cast<uint16_t>(arrays.size()));
  PutU16(&zip, static_cast<uint16_t>(arrays.size()));
  PutU32(&zip, static_cast<uint32_t>(central.size()));
  PutU32(&zip, central_offset);
  PutU16(&zip, 0);
  return WriteAtomically(path, zip);
}

}  // namespace lockstep
