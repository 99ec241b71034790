// Fifo<T>: a first-in first-out queue in a ring buffer that keeps its
// capacity. Once it has grown to its peak length, push_back / pop_front
// allocate nothing (std::deque frees a block as its front empties and
// allocates a new one as its back fills, i.e. every few elements of a
// steady stream: an allocation on every step of a training loop).
//
// The capacity doubles when a push finds the buffer full; it never
// shrinks. pop_front() resets the slot to T() so resources an element owns
// (a shared_ptr, a buffer) are released at once, not when the slot is
// overwritten.
//
// Thread-compatible (like std::deque): callers synchronise.
#ifndef LOCKSTEP_COMMON_FIFO_H_
#define LOCKSTEP_COMMON_FIFO_H_

#include <cstddef>
#include <utility>
#include <vector>

#include "absl/base/internal/raw_logging.h"

namespace lockstep {

template <typename T>
class Fifo {
 public:
  Fifo() = default;

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  size_t capacity() const { return slots_.size(); }

  // The i-th element from the front (0 = front). Requires i < size().
  T& operator[](size_t i) {
    ABSL_RAW_CHECK(i < size_, "Fifo: index out of range");
    return slots_[Wrap(head_ + i)];
  }
  const T& operator[](size_t i) const {
    ABSL_RAW_CHECK(i < size_, "Fifo: index out of range");
    return slots_[Wrap(head_ + i)];
  }
  T& front() { return (*this)[0]; }
  const T& front() const { return (*this)[0]; }
  T& back() { return (*this)[size_ - 1]; }

  void push_back(T value) {
    if (size_ == slots_.size()) Grow();
    slots_[Wrap(head_ + size_)] = std::move(value);
    ++size_;
  }

  // Requires !empty().
  void pop_front() {
    ABSL_RAW_CHECK(size_ > 0, "Fifo: pop_front on an empty queue");
    slots_[head_] = T();
    head_ = Wrap(head_ + 1);
    --size_;
  }

  // Removes every element (each slot reset to T()); keeps the capacity.
  void clear() {
    while (!empty()) pop_front();
    head_ = 0;
  }

 private:
  size_t Wrap(size_t i) const { return i >= slots_.size() ? i - slots_.size() : i; }

  void Grow() {
    std::vector<T> bigger(slots_.empty() ? 8 : 2 * slots_.size());
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move(slots_[Wrap(head_ + i)]);
    slots_ = std::move(bigger);
    head_ = 0;
  }

  std::vector<T> slots_;
  size_t head_ = 0;  // index of the front in slots_
  size_t size_ = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_FIFO_H_
