// Fuzz target: the dataset file readers (common/data/: IDX, CSV, LIBSVM,
// and the gzip layer under all three).
// Input: byte 0 picks the reader and its options, the rest is the file's
// content. Checks that no input crashes, overflows, leaks or allocates
// beyond libFuzzer's malloc limit: every bad file must come back as a
// Status (the readers' contract), and a loaded Dataset must be consistent
// (x has n * dim values, y has n).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/data/csv.h"
#include "common/data/file_io.h"
#include "common/data/idx.h"
#include "common/data/libsvm.h"

namespace {

void CheckDataset(const absl::StatusOr<lockstep::Dataset>& ds) {
  if (!ds.ok()) return;
  const int64_t n = static_cast<int64_t>(ds->y.size());
  if (static_cast<int64_t>(ds->x.size()) != n * ds->dim) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t sel = data[0];
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (sel % 3) {
    case 0: {  // IDX (gzip detected like ReadFileBytes does)
      lockstep::FileBytes file;
      file.path = "fuzz.idx";
      if (lockstep::LooksGzipped(body)) {
        auto raw = lockstep::GunzipBytes(body, file.path);
        if (!raw.ok()) return 0;
        file.gzipped = true;
        file.data = *std::move(raw);
      } else {
        file.data = std::string(body);
      }
      const lockstep::IdxExpect& expect =
          (sel >> 2) % 3 == 0   ? lockstep::kIdxAny
          : (sel >> 2) % 3 == 1 ? lockstep::kIdxImages
                                : lockstep::kIdxLabels;
      auto arr = lockstep::DecodeIdx(file, expect);
      if (arr.ok()) {
        // product(dims) without overflow: a zero dim makes it 0 whatever
        // the others are (dims of 2^31 x 2^31 x 0 are a valid empty array).
        bool zero = false;
        for (int64_t d : arr->dims) zero |= d == 0;
        int64_t count = zero ? 0 : 1;
        for (int64_t d : arr->dims) {
          if (!zero && __builtin_mul_overflow(count, d, &count)) std::abort();
        }
        if (static_cast<int64_t>(arr->values.size()) != count) std::abort();
      }
      break;
    }
    case 1: {  // CSV
      lockstep::CsvOptions opt;
      const int h = (sel >> 2) % 3;
      opt.header = h == 0 ? lockstep::CsvHeader::kAuto
                   : h == 1 ? lockstep::CsvHeader::kYes
                            : lockstep::CsvHeader::kNo;
      opt.regression = (sel >> 4) & 1;
      opt.label_column = (sel >> 5) & 1 ? -1 : 0;
      opt.delimiter = (sel >> 6) & 1 ? '\t' : ',';
      opt.num_classes = (sel >> 7) & 1 ? 3 : 0;
      if (opt.regression) opt.num_classes = 0;
      CheckDataset(lockstep::ParseCsv(body, "fuzz.csv", opt));
      break;
    }
    default: {  // LIBSVM
      lockstep::LibsvmOptions opt;
      const int l = (sel >> 2) % 4;
      opt.labels = l == 0   ? lockstep::LibsvmLabels::kAuto
                   : l == 1 ? lockstep::LibsvmLabels::kSigned
                   : l == 2 ? lockstep::LibsvmLabels::kClassIndex
                            : lockstep::LibsvmLabels::kRegression;
      opt.dim = (sel >> 4) & 1 ? 8 : 0;
      opt.num_classes = (sel >> 5) & 1 ? 2 : 0;
      lockstep::LibsvmLabels resolved;
      CheckDataset(lockstep::ParseLibsvm(body, "fuzz.libsvm", opt, &resolved));
      break;
    }
  }
  return 0;
}
