// Contiguous float32 tensors.
//
// TensorView is a non-owning (pointer, shape) pair over row-major float32
// data; Tensor owns its buffer. Models keep all parameters in one flat
// vector and hand out TensorViews into it, so the whole replica can be
// all-reduced, hashed and checkpointed as a single span.
//
// Thread safety: plain values; concurrent reads are fine, writes need
// external synchronisation.
#ifndef LOCKSTEP_COMMON_TENSOR_H_
#define LOCKSTEP_COMMON_TENSOR_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"

namespace lockstep {

// A shape is a list of non-negative dimensions; its element count is their
// product (1 for a scalar, i.e. an empty shape). Up to 4 dimensions are
// stored inline, so making a Shape (e.g. Tensor::Resize(Shape{n, m}) on a
// training step) does not allocate.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(const std::vector<int64_t>& dims) : dims_(dims.begin(), dims.end()) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t dim(int i) const { return dims_[i]; }
  absl::Span<const int64_t> dims() const { return dims_; }
  int64_t num_elements() const;
  std::string ToString() const;  // e.g. "[784,256]"

  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }

 private:
  absl::InlinedVector<int64_t, 4> dims_;
};

// Non-owning view; the caller keeps the data alive for the view's lifetime.
class TensorView {
 public:
  TensorView() = default;
  TensorView(float* data, Shape shape) : data_(data), shape_(std::move(shape)) {}

  float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t size() const { return shape_.num_elements(); }
  absl::Span<float> span() const { return absl::MakeSpan(data_, size()); }
  // Row-major element access for rank-2 views.
  float& at(int64_t r, int64_t c) const { return data_[r * shape_.dim(1) + c]; }

 private:
  float* data_ = nullptr;
  Shape shape_;
};

// Owning, zero-initialised tensor.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape)
      : shape_(std::move(shape)), data_(shape_.num_elements(), 0.0f) {}

  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  const Shape& shape() const { return shape_; }
  int64_t size() const { return static_cast<int64_t>(data_.size()); }
  TensorView view() { return TensorView(data_.data(), shape_); }
  absl::Span<float> span() { return absl::MakeSpan(data_); }
  absl::Span<const float> span() const { return absl::MakeConstSpan(data_); }

  // Changes the shape, reusing the buffer's capacity (no reallocation when
  // shrinking or regrowing within capacity). Contents are unspecified.
  void Resize(Shape shape);

 private:
  Shape shape_;
  std::vector<float> data_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_TENSOR_H_
