#include "common/data/idx.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace lockstep {
namespace {

inline uint32_t LoadBe32(const unsigned char* p) {
  return (static_cast<uint32_t>(p[0]) << 24) |
         (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | static_cast<uint32_t>(p[3]);
}

inline uint64_t LoadBe64(const unsigned char* p) {
  return (static_cast<uint64_t>(LoadBe32(p)) << 32) | LoadBe32(p + 4);
}

bool KnownType(uint32_t code) {
  return code < 32 && ((kIdxAllTypes >> code) & 1u) != 0;
}

std::string DescribeMagic(uint32_t magic) {
  const uint32_t type = (magic >> 8) & 0xff;
  const uint32_t dims = magic & 0xff;
  if ((magic >> 16) != 0 || !KnownType(type)) return "not an IDX header";
  return absl::StrFormat("%s, %d dims", IdxTypeName(static_cast<IdxType>(type)),
                         dims);
}

std::string AcceptedTypes(uint32_t mask) {
  std::string out;
  for (uint32_t code : {0x08u, 0x09u, 0x0Bu, 0x0Cu, 0x0Du, 0x0Eu}) {
    if ((mask >> code) & 1u) {
      if (!out.empty()) out += "/";
      out += IdxTypeName(static_cast<IdxType>(code));
    }
  }
  return out;
}

// Converts `count` big-endian elements at `p` to float.
void DecodeValues(IdxType type, const unsigned char* p, int64_t count,
                  float* out) {
  switch (type) {
    case IdxType::kUint8:
      for (int64_t i = 0; i < count; ++i) out[i] = static_cast<float>(p[i]);
      return;
    case IdxType::kInt8:
      for (int64_t i = 0; i < count; ++i)
        out[i] = static_cast<float>(static_cast<int8_t>(p[i]));
      return;
    case IdxType::kInt16:
      for (int64_t i = 0; i < count; ++i) {
        const uint16_t u =
            static_cast<uint16_t>((p[2 * i] << 8) | p[2 * i + 1]);
        out[i] = static_cast<float>(static_cast<int16_t>(u));
      }
      return;
    case IdxType::kInt32:
      for (int64_t i = 0; i < count; ++i)
        out[i] = static_cast<float>(static_cast<int32_t>(LoadBe32(p + 4 * i)));
      return;
    case IdxType::kFloat32:
      for (int64_t i = 0; i < count; ++i) {
        const uint32_t u = LoadBe32(p + 4 * i);
        std::memcpy(&out[i], &u, 4);
      }
      return;
    case IdxType::kFloat64:
      for (int64_t i = 0; i < count; ++i) {
        const uint64_t u = LoadBe64(p + 8 * i);
        double d;
        std::memcpy(&d, &u, 8);
        out[i] = static_cast<float>(d);
      }
      return;
  }
}

}  // namespace

int IdxTypeSize(IdxType type) {
  switch (type) {
    case IdxType::kUint8:
    case IdxType::kInt8:
      return 1;
    case IdxType::kInt16:
      return 2;
    case IdxType::kInt32:
    case IdxType::kFloat32:
      return 4;
    case IdxType::kFloat64:
      return 8;
  }
  return 0;
}

const char* IdxTypeName(IdxType type) {
  switch (type) {
    case IdxType::kUint8:
      return "uint8";
    case IdxType::kInt8:
      return "int8";
    case IdxType::kInt16:
      return "int16";
    case IdxType::kInt32:
      return "int32";
    case IdxType::kFloat32:
      return "float32";
    case IdxType::kFloat64:
      return "float64";
  }
  return "?";
}

absl::StatusOr<IdxArray> DecodeIdx(const FileBytes& file,
                                   const IdxExpect& expect) {
  const std::string& b = file.data;
  const int64_t size = static_cast<int64_t>(b.size());
  const unsigned char* p = reinterpret_cast<const unsigned char*>(b.data());
  if (size == 0) {
    return absl::DataLossError(absl::StrFormat(
        "%s: file is empty, expected an IDX header (4-byte magic 0x%08x "
        "(%s))",
        file.Where(0), expect.canonical_magic, expect.canonical));
  }
  if (size < 4) {
    return absl::DataLossError(absl::StrFormat(
        "%s: truncated: expected 4 bytes of IDX magic at offset 0, file has "
        "%d",
        file.Where(0), size));
  }
  const uint32_t magic = LoadBe32(p);
  const uint32_t type_code = (magic >> 8) & 0xff;
  const int num_dims = static_cast<int>(magic & 0xff);
  const bool ok_magic = (magic >> 16) == 0 && KnownType(type_code) &&
                        ((expect.type_mask >> type_code) & 1u) != 0 &&
                        num_dims >= expect.min_dims &&
                        num_dims <= expect.max_dims;
  if (!ok_magic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: expected IDX magic 0x%08x (%s) [accepted: 0x0000TTDD with type "
        "%s and %d..%d dims], got 0x%08x (%s)",
        file.Where(0), expect.canonical_magic, expect.canonical,
        AcceptedTypes(expect.type_mask), expect.min_dims, expect.max_dims,
        magic, DescribeMagic(magic)));
  }
  IdxArray arr;
  arr.type = static_cast<IdxType>(type_code);
  const int64_t dims_end = 4 + 4 * static_cast<int64_t>(num_dims);
  if (size < dims_end) {
    return absl::DataLossError(absl::StrFormat(
        "%s: truncated: expected %d bytes of dimension sizes (%d dims x 4 "
        "bytes) at offset 4, file has %d bytes",
        file.Where(4), 4 * num_dims, num_dims, size));
  }
  // Each dim < 2^32 and there can be 3 of them: the product may overflow
  // int64, so it is computed with overflow checks (a zero dim wins).
  const int elem = IdxTypeSize(arr.type);
  bool any_zero = false;
  for (int d = 0; d < num_dims; ++d) {
    arr.dims.push_back(static_cast<int64_t>(LoadBe32(p + 4 + 4 * d)));
    if (arr.dims.back() == 0) any_zero = true;
  }
  int64_t count = any_zero ? 0 : 1;
  bool too_big = false;
  for (int d = 0; d < num_dims && count > 0 && !too_big; ++d) {
    if (__builtin_mul_overflow(count, arr.dims[d], &count) || count > size) {
      too_big = true;
    }
  }
  arr.header_bytes = dims_end;
  const int64_t available = size - dims_end;
  if (too_big || count * elem > available) {
    std::string dims_str;
    for (int64_t n : arr.dims) {
      dims_str += (dims_str.empty() ? "" : "x") + std::to_string(n);
    }
    if (too_big) {
      return absl::DataLossError(absl::StrFormat(
          "%s: truncated: expected %s %s elements of data at offset %d, file "
          "has %d bytes",
          file.Where(dims_end), dims_str, IdxTypeName(arr.type), dims_end,
          size));
    }
    return absl::DataLossError(absl::StrFormat(
        "%s: truncated: expected %d bytes of data (%s %s) at offset %d, file "
        "has %d bytes (%d after the header)",
        file.Where(dims_end), count * elem, dims_str, IdxTypeName(arr.type),
        dims_end, size, available));
  }
  if (count * elem < available) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: expected end of file after %d bytes of data, found %d trailing "
        "bytes (file has %d bytes)",
        file.Where(dims_end + count * elem), count * elem,
        available - count * elem, size));
  }
  arr.values.resize(count);
  DecodeValues(arr.type, p + dims_end, count, arr.values.data());
  return arr;
}

absl::StatusOr<IdxArray> ReadIdx(const std::string& path,
                                 const IdxExpect& expect) {
  absl::StatusOr<FileBytes> file = ReadFileBytes(path);
  if (!file.ok()) return file.status();
  return DecodeIdx(*file, expect);
}

absl::StatusOr<Dataset> LoadIdxPair(const std::string& images_path,
                                    const std::string& labels_path,
                                    Normalize normalize, int num_classes) {
  if (num_classes < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "LoadIdxPair(%s, %s): num_classes is %d, expected >= 0 (0 = infer)",
        images_path, labels_path, num_classes));
  }
  absl::StatusOr<FileBytes> img_file = ReadFileBytes(images_path);
  if (!img_file.ok()) return img_file.status();
  absl::StatusOr<IdxArray> images = DecodeIdx(*img_file, kIdxImages);
  if (!images.ok()) return images.status();
  img_file->data = std::string();  // free the raw bytes early

  absl::StatusOr<FileBytes> lbl_file = ReadFileBytes(labels_path);
  if (!lbl_file.ok()) return lbl_file.status();
  absl::StatusOr<IdxArray> labels = DecodeIdx(*lbl_file, kIdxLabels);
  if (!labels.ok()) return labels.status();

  const int64_t n = images->dims[0];
  if (labels->dims[0] != n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "image file %s has %d examples but label file %s has %d labels "
        "(expected equal counts)",
        images_path, n, labels_path, labels->dims[0]));
  }
  if (n == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "image file %s and label file %s have 0 examples, expected at least "
        "1",
        images_path, labels_path));
  }
  int64_t dim = 1;
  for (size_t d = 1; d < images->dims.size(); ++d) dim *= images->dims[d];
  if (dim == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: image dims give 0 features per example, expected at least 1",
        img_file->Where(4)));
  }

  constexpr float kMaxLabel = 16777216.0f;  // 2^24: floats exact below
  const int elem = IdxTypeSize(labels->type);
  float max_label = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = labels->values[i];
    const bool bad = num_classes > 0 ? !(v >= 0 && v < num_classes)
                                     : !(v >= 0 && v < kMaxLabel);
    if (bad) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s (label %d): label %g out of range, expected [0, %s)",
          lbl_file->Where(labels->header_bytes + i * elem), i, v,
          num_classes > 0 ? std::to_string(num_classes) : std::string("2^24")));
    }
    if (v > max_label) max_label = v;
  }

  Dataset ds;
  ds.name = images_path;
  ds.num_examples = n;
  ds.dim = dim;
  ds.x = std::move(images->values);
  ds.y = std::move(labels->values);
  ds.num_classes =
      num_classes > 0 ? num_classes : static_cast<int>(max_label) + 1;
  if (normalize != Normalize::kNone) {
    absl::Status s = NormalizeTrainTest(normalize, &ds, nullptr);
    if (!s.ok()) return s;
  }
  return ds;
}

}  // namespace lockstep
