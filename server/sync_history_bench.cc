// Memory a job's sync history holds in the coordinator, and the time per
// completed check: K ranks report S steps (32-hex hashes, 4 block hashes,
// an optimizer hash, as real reports carry) into one SyncChecker with the
// default limits (the Coordinator's for a running job), with Judge called on every check.
//
//   bazel run -c opt //server:sync_history_bench -- [steps=26000] [k=4]
//
// Heap bytes are glibc's mallinfo2().uordblks after minus before (the
// checker's own allocations: pending reports are drained at the end).
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_format.h"
#include "server/sync_checker.h"

namespace {

std::string Hex(uint64_t x) { return absl::StrFormat("%016x%016x", x, x * 31 + 7); }

}  // namespace

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 26000;
  const int k = argc > 2 ? std::atoi(argv[2]) : 4;
  const size_t before = mallinfo2().uordblks;
  auto t0 = std::chrono::steady_clock::now();
  {
    auto* checker = new lockstep::SyncChecker(k);
    for (int64_t s = 0; s < steps; ++s) {
      for (int r = 0; r < k; ++r) {
        lockstep::StepReport rep;
        rep.hash = Hex(static_cast<uint64_t>(s) + 1);
        rep.optimizer_hash = Hex(static_cast<uint64_t>(s) + 99);
        rep.loss = 0.5;
        rep.examples = 8;
        rep.blocks = {1, 2, 3, static_cast<uint64_t>(s)};
        auto done = checker->Add(r, s, std::move(rep));
        if (done.has_value()) checker->Judge(*done, lockstep::DivergencePolicy::kRepair, steps);
      }
    }
    auto t1 = std::chrono::steady_clock::now();
    const size_t after = mallinfo2().uordblks;
    const double us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    std::printf("steps %lld  K %d  checked %lld  history heap %.1f KiB (%.1f bytes/step)  "
                "%.2f us per completed check (K adds + judge)\n",
                static_cast<long long>(steps), k, static_cast<long long>(checker->checked()),
                (after - before) / 1024.0, static_cast<double>(after - before) / steps,
                us / steps);
    // The job ends: the Coordinator shrinks a finished job's history to
    // JobStoreLimits::finished_history (128 checks, 32 events, 32 runs).
    checker->FinishHistory({128, 32, 32});
    const size_t finished = mallinfo2().uordblks;
    std::printf("after the job finished: history heap %.1f KiB (SpaceUsed %.1f KiB)\n",
                (finished - before) / 1024.0, checker->history().SpaceUsed() / 1024.0);
    delete checker;
  }
  return 0;
}
