// Record framing shared by the stateful fuzz targets (coordinator_fuzz,
// ps_service_fuzz) and the seed generator (make_seeds.cc): the input is a
// sequence of records
//   u8 op | u16 len (little-endian) | len bytes (usually a serialized proto)
// read until the input ends (a truncated last record is dropped).
#ifndef LOCKSTEP_TESTS_FUZZ_FUZZ_RECORDS_H_
#define LOCKSTEP_TESTS_FUZZ_FUZZ_RECORDS_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep {
namespace fuzz {

struct Record {
  uint8_t op = 0;
  const uint8_t* data = nullptr;
  size_t size = 0;
};

class RecordReader {
 public:
  RecordReader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool Next(Record* r) {
    if (end_ - p_ < 3) return false;
    r->op = p_[0];
    const size_t len = static_cast<size_t>(p_[1]) | static_cast<size_t>(p_[2]) << 8;
    p_ += 3;
    if (static_cast<size_t>(end_ - p_) < len) return false;
    r->data = p_;
    r->size = len;
    p_ += len;
    return true;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

inline void AppendRecord(std::string* out, uint8_t op, const std::string& bytes) {
  out->push_back(static_cast<char>(op));
  out->push_back(static_cast<char>(bytes.size() & 0xff));
  out->push_back(static_cast<char>((bytes.size() >> 8) & 0xff));
  out->append(bytes);
}

}  // namespace fuzz
}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_FUZZ_FUZZ_RECORDS_H_
