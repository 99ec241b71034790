// Tests only: a small, seeded 3-class dataset ("blobs", 6 features) that
// the job-runner tests train on. Header-only, deterministic.
#ifndef LOCKSTEP_WORKER_BLOBS_FOR_TEST_H_
#define LOCKSTEP_WORKER_BLOBS_FOR_TEST_H_

#include <cstdint>

#include "common/rng.h"
#include "worker/job_data.h"

namespace lockstep {

// n_train / n_test examples; class c has features c and c+3 raised by 1.5,
// plus uniform noise in [-0.5, 0.5). Train uses seed 1, test seed 2.
inline TrainTest Blobs(int64_t n_train, int64_t n_test) {
  TrainTest data;
  for (Dataset* d : {&data.train, &data.test}) {
    const int64_t n = d == &data.train ? n_train : n_test;
    SplitMix64 r(d == &data.train ? 1 : 2);
    d->name = "blobs";
    d->num_examples = n;
    d->dim = 6;
    d->num_classes = 3;
    for (int64_t i = 0; i < n; ++i) {
      const int c = static_cast<int>(r.Next() % 3);
      for (int j = 0; j < 6; ++j) d->x.push_back((j % 3 == c ? 1.5f : 0.0f) + r.NextFloat() - 0.5f);
      d->y.push_back(static_cast<float>(c));
    }
  }
  return data;
}

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_BLOBS_FOR_TEST_H_
