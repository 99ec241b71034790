#include "common/tensor.h"

#include "absl/strings/str_join.h"

namespace lockstep {

int64_t Shape::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

std::string Shape::ToString() const {
  return "[" + absl::StrJoin(dims_, ",") + "]";
}

void Tensor::Resize(Shape shape) {
  shape_ = std::move(shape);
  data_.resize(shape_.num_elements());
}

}  // namespace lockstep
