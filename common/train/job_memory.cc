#include "common/train/job_memory.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/model.h"

namespace lockstep {
namespace {

bool Mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool Add(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

}  // namespace

std::string HumanBytes(int64_t bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1000.0 && u < 6) {
    v /= 1000.0;
    ++u;
  }
  if (u == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.1f %s", v, units[u]);
}

std::string JobMemoryNeed::Describe() const {
  return absl::StrCat(HumanBytes(total), " (", num_params, " parameters: parameters ",
                      HumanBytes(parameters), ", gradient ", HumanBytes(gradient),
                      ", optimizer state ", HumanBytes(optimizer), ", combine buffer ",
                      HumanBytes(combine), ", activations ", HumanBytes(activations), ")");
}

absl::StatusOr<JobMemoryNeed> ComputeJobMemoryNeed(const TrainSpec& spec, int64_t input_dim,
                                                   int num_classes, int world) {
  // The layout only: CreateModel allocates nothing sized by the model.
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(spec.model, input_dim, num_classes);
  if (!model.ok()) return model.status();
  const int64_t p = (*model)->num_params();
  int slots = 0;
  if (spec.optimizer.kind == "adam" || spec.optimizer.kind == "adamw") {
    slots = 2;
  } else if (spec.optimizer.momentum != 0) {
    slots = 1;
  }
  const int64_t k = world < 1 ? 1 : world;
  const int64_t b = spec.global_batch <= 0 ? 0 : (spec.global_batch + k - 1) / k;
  int64_t widths = 0;
  const std::vector<int64_t>& dims = (*model)->dims();
  for (size_t i = 1; i < dims.size(); ++i) {
    if (!Add(widths, dims[i], &widths)) widths = -1;
  }
  JobMemoryNeed n;
  n.num_params = p;
  bool ok = widths >= 0 && Mul(p, 4, &n.parameters) && Mul(p + 1, 4, &n.gradient) &&
            Mul(n.parameters, slots, &n.optimizer) && Mul(p + 1, 4, &n.combine) &&
            Mul(b, widths, &n.activations) && Mul(n.activations, 8, &n.activations);
  ok = ok && Add(n.parameters, n.gradient, &n.total) && Add(n.total, n.optimizer, &n.total) &&
       Add(n.total, n.combine, &n.total) && Add(n.total, n.activations, &n.total);
  if (!ok) {
    return absl::OutOfRangeError(absl::StrCat("spec.model: \"", spec.model, "\" with ",
                                              input_dim, " input features needs more than ",
                                              "2^63 bytes of memory per worker"));
  }
  return n;
}

int64_t DefaultMaxJobMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return int64_t{4} << 30;
  return static_cast<int64_t>(pages) / 4 * 3 * page;
}

absl::Status CheckJobMemory(const JobMemoryNeed& need, int64_t limit_bytes,
                            absl::string_view who, absl::string_view limit_name) {
  if (limit_bytes <= 0 || need.total <= limit_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      who, ": job needs ", need.total, " bytes of memory per worker (", need.Describe(),
      ") but the limit is ", limit_bytes, " bytes (", HumanBytes(limit_bytes), ", ", limit_name,
      ")"));
}

}  // namespace lockstep
