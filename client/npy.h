// Writing NumPy .npy and .npz files (the format every Python user opens).
//
// .npy: magic "\x93NUMPY", version 1.0, a little-endian uint16 header
// length, a Python-literal header dict padded with spaces to a multiple of
// 64 bytes and ending in '\n', then the raw little-endian float32 data.
// .npz: a ZIP archive of .npy members, stored uncompressed (CRC-32 from
// zlib), as numpy.savez writes it.
#ifndef LOCKSTEP_CLIENT_NPY_H_
#define LOCKSTEP_CLIENT_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace lockstep {

struct NpyArray {
  std::string name;             // member name in an .npz ("W0" -> "W0.npy")
  std::vector<int64_t> shape;   // C order
  absl::Span<const float> data; // product(shape) floats, not owned
};

// The bytes of one float32 .npy file.
std::string NpyBytes(const std::vector<int64_t>& shape, absl::Span<const float> data);

// Writes `path` atomically (temp file + rename): .npz with one member per
// array. Errors name the path.
absl::Status WriteNpz(const std::string& path, const std::vector<NpyArray>& arrays);
absl::Status WriteNpy(const std::string& path, const NpyArray& array);

}  // namespace lockstep

#endif  // LOCKSTEP_CLIENT_NPY_H_
