// Reader for the IDX format (MNIST / Fashion-MNIST), plain or gzipped.
//
// Layout: a 4-byte big-endian magic 0x0000TTDD (two zero bytes, a type code
// TT, the number of dimensions DD), then DD big-endian uint32 sizes, then the
// elements in row-major order, big-endian. Supported type codes:
//   0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64
// and 1..3 dimensions. The file must contain exactly header + data bytes.
//
// Error codes (every message names the file, the byte offset -- for gzip
// files the offset into the decompressed stream, said so -- and what was
// expected):
//   NotFoundError        file missing (other open/read failures keep their
//                        errno-derived code),
//   DataLossError        empty file, truncated header or data, corrupt gzip,
//   InvalidArgumentError wrong magic / type / dims, trailing bytes, image and
//                        label counts differing, labels out of range or not
//                        integers, zero examples.
// Nothing is returned on error (no partial load). All functions are
// thread-compatible (no shared state).
#ifndef LOCKSTEP_COMMON_DATA_IDX_H_
#define LOCKSTEP_COMMON_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/data/dataset.h"
#include "common/data/file_io.h"

namespace lockstep {

enum class IdxType : uint8_t {
  kUint8 = 0x08,
  kInt8 = 0x09,
  kInt16 = 0x0B,
  kInt32 = 0x0C,
  kFloat32 = 0x0D,
  kFloat64 = 0x0E,
};

// Size in bytes of one element of `type`.
int IdxTypeSize(IdxType type);
// "uint8", "int8", ... for messages.
const char* IdxTypeName(IdxType type);
// The magic number of a header with this type and number of dims.
constexpr uint32_t IdxMagic(IdxType type, int num_dims) {
  return (static_cast<uint32_t>(type) << 8) | static_cast<uint32_t>(num_dims);
}

// What a caller accepts; used to validate the header and to phrase the
// "expected ..." part of a wrong-magic error.
struct IdxExpect {
  uint32_t canonical_magic;  // quoted in errors, e.g. 0x00000803
  const char* canonical;     // e.g. "uint8, 3 dims"
  uint32_t type_mask;        // bit (1 << type code) for each accepted type
  int min_dims;
  int max_dims;
};

constexpr uint32_t kIdxAllTypes = (1u << 0x08) | (1u << 0x09) | (1u << 0x0B) |
                                  (1u << 0x0C) | (1u << 0x0D) | (1u << 0x0E);
constexpr uint32_t kIdxIntegerTypes =
    (1u << 0x08) | (1u << 0x09) | (1u << 0x0B) | (1u << 0x0C);

// Any supported type, 1..3 dims.
constexpr IdxExpect kIdxAny{0x00000803, "uint8, 3 dims", kIdxAllTypes, 1, 3};
// Examples: [n], [n, features] or [n, rows, cols]; any supported type.
constexpr IdxExpect kIdxImages{0x00000803, "uint8, 3 dims", kIdxAllTypes, 1, 3};
// Labels: [n] of an integer type.
constexpr IdxExpect kIdxLabels{0x00000801, "uint8, 1 dim", kIdxIntegerTypes, 1,
                               1};

// A decoded IDX array. Values are converted to float (exact for uint8, int8,
// int16 and float32; int32 beyond 2^24 and float64 are rounded).
struct IdxArray {
  IdxType type = IdxType::kUint8;
  std::vector<int64_t> dims;  // 1..3 entries
  int64_t header_bytes = 0;   // offset of the first element
  std::vector<float> values;  // product(dims) values, row-major
};

// Reads and decodes a whole IDX file (gzip detected by its magic 1f 8b).
absl::StatusOr<IdxArray> ReadIdx(const std::string& path,
                                 const IdxExpect& expect = kIdxAny);

// Decodes IDX bytes already in memory (file.path and file.gzipped are used
// only in error messages).
absl::StatusOr<IdxArray> DecodeIdx(const FileBytes& file,
                                   const IdxExpect& expect = kIdxAny);

// Loads an images file ([n, ...] any supported type) and a labels file ([n]
// integer type) into a classification Dataset named `images_path`, with
// dim = product of the non-leading image dims.
//   num_classes == 0: inferred as max label + 1 (labels must be >= 0 and
//                     < 2^24).
//   num_classes  > 0: every label must be in [0, num_classes).
// `normalize` is applied with statistics of THIS dataset (kScale255 needs
// none); to normalise a test split with train statistics load with kNone and
// use NormalizeTrainTest (LoadDataset in fashion_mnist.h does this).
absl::StatusOr<Dataset> LoadIdxPair(const std::string& images_path,
                                    const std::string& labels_path,
                                    Normalize normalize = Normalize::kNone,
                                    int num_classes = 0);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_DATA_IDX_H_
