#include "server/weights_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {

v1::WeightsChunk MakeWeightsChunk(const FinalWeights& w, int64_t offset, int64_t max_floats) {
  v1::WeightsChunk chunk;
  chunk.set_job_id(w.job_id);
  chunk.set_offset(offset);
  chunk.set_total(w.total);
  const int64_t n = std::max<int64_t>(0, std::min(max_floats, w.total - offset));
  chunk.set_data(w.data.substr(static_cast<size_t>(offset) * 4, static_cast<size_t>(n) * 4));
  if (offset == 0) {
    for (const std::string& name : w.block_names) chunk.add_block_names(name);
    for (int64_t d : w.block_shapes) chunk.add_block_shapes(d);
  }
  return chunk;
}

WeightsStore::WeightsStore(int max_jobs) : max_jobs_(std::max(0, max_jobs)) {}

absl::StatusOr<std::vector<uint64_t>> WeightsStore::AddChunk(const v1::WeightsChunk& chunk) {
  const uint64_t job_id = chunk.job_id();
  if (chunk.data().size() % 4 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data: expected a multiple of 4 bytes (float32), got ", chunk.data().size()));
  }
  const int64_t n = static_cast<int64_t>(chunk.data().size() / 4);
  auto it = uploads_.find(job_id);
  if (chunk.offset() == 0) {
    if (chunk.total() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("total: expected >= 1 floats, got ", chunk.total()));
    }
    Upload up;
    up.worker_id = chunk.worker_id();
    up.total = chunk.total();
    up.weights = std::make_shared<FinalWeights>();
    up.weights->job_id = job_id;
    up.weights->total = chunk.total();
    up.weights->block_names.assign(chunk.block_names().begin(), chunk.block_names().end());
    up.weights->block_shapes.assign(chunk.block_shapes().begin(), chunk.block_shapes().end());
    it = uploads_.insert_or_assign(job_id, std::move(up)).first;
  } else {
    if (it == uploads_.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "offset: expected 0 (the first chunk of an upload) for job ", job_id, ", got ",
          chunk.offset()));
    }
    if (chunk.offset() != it->second.received) {
      return absl::FailedPreconditionError(
          absl::StrCat("offset: expected ", it->second.received, " (chunks in order) for job ",
                       job_id, ", got ", chunk.offset()));
    }
    if (chunk.total() != it->second.total) {
      return absl::InvalidArgumentError(absl::StrCat("total: expected ", it->second.total,
                                                     " (as in the first chunk), got ",
                                                     chunk.total()));
    }
  }
  Upload& up = it->second;
  if (up.received + n > up.total) {
    const int64_t total = up.total;
    uploads_.erase(it);
    return absl::InvalidArgumentError(absl::StrCat("data: chunk at offset ", chunk.offset(),
                                                   " with ", n, " floats runs past total ",
                                                   total));
  }
  up.weights->data.append(chunk.data());
  up.received += n;
  std::vector<uint64_t> changed;
  if (up.received == up.total) {
    std::shared_ptr<const FinalWeights> done = std::move(up.weights);
    uploads_.erase(it);
    Publish(job_id, std::move(done), &changed);
  }
  return changed;
}

absl::Status WeightsStore::FinishUpload(const std::string& worker_id, uint64_t job_id) {
  auto it = uploads_.find(job_id);
  if (it != uploads_.end() && it->second.worker_id == worker_id) {
    const int64_t received = it->second.received, total = it->second.total;
    uploads_.erase(it);
    return absl::FailedPreconditionError(absl::StrCat("job ", job_id,
                                                      ": weights upload incomplete: received ",
                                                      received, " of ", total, " floats"));
  }
  return absl::OkStatus();
}

void WeightsStore::AbortUpload(uint64_t job_id) { uploads_.erase(job_id); }

bool WeightsStore::Drop(uint64_t job_id) {
  if (published_.erase(job_id) == 0) return false;
  order_.erase(std::remove(order_.begin(), order_.end(), job_id), order_.end());
  return true;
}

std::shared_ptr<const FinalWeights> WeightsStore::Get(uint64_t job_id) const {
  auto it = published_.find(job_id);
  return it == published_.end() ? nullptr : it->second;
}

void WeightsStore::Publish(uint64_t job_id, std::shared_ptr<const FinalWeights> w,
                           std::vector<uint64_t>* changed) {
  order_.erase(std::remove(order_.begin(), order_.end(), job_id), order_.end());
  published_[job_id] = std::move(w);
  order_.push_back(job_id);
  changed->push_back(job_id);
  while (static_cast<int>(order_.size()) > max_jobs_) {
    const uint64_t old = order_.front();
    order_.pop_front();
    published_.erase(old);
    changed->push_back(old);
  }
}

}  // namespace lockstep
