// Process-wide settings for lockstep's daemons, called first thing in main.
//
// * glibc malloc: keep freed memory in the heap (large trim threshold),
//   serve blocks up to 32 MiB from it, one arena. Fresh memory is slow on
//   these machines (first touch costs 10-20 us per 4 KiB page), and gRPC
//   allocates and frees message buffers on every call: without this a
//   16 MiB all-reduce at K=2 took ~286 ms instead of ~30 ms.
// * Abseil's mutex deadlock detection (on in Debian's build) costs a graph
//   update per lock acquisition: switched off.
#ifndef LOCKSTEP_COMMON_PROCESS_TUNING_H_
#define LOCKSTEP_COMMON_PROCESS_TUNING_H_

namespace lockstep {

void TuneProcessForThroughput();

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_PROCESS_TUNING_H_
