// //bench:allreduce's in-process probes of the machine, beside the
// collectives it times: the raw loopback TCP bandwidth (what the kernel
// gives one connection, the ceiling for any transport) and how malloc
// serves a 64 MiB block (fresh pages or the heap's). Called from the
// bench's main thread (RawLoopbackBandwidth starts and joins its own).
#ifndef LOCKSTEP_BENCH_ALLREDUCE_PROBES_H_
#define LOCKSTEP_BENCH_ALLREDUCE_PROBES_H_

#include <cstdint>

namespace lockstep::allreduce_bench {

// Per-direction bandwidth (bytes/s) of one loopback TCP connection carrying
// `messages` messages of `bytes` in each direction at the same time, written
// and read in 256 KiB system calls. sock_buf > 0 fixes SO_SNDBUF/SO_RCVBUF
// (the kernel caps it at net.core.{w,r}mem_max); 0 keeps autotuning.
// 0 when a socket call fails (printed on stderr).
double RawLoopbackBandwidth(int64_t bytes, int messages, int sock_buf);

// --malloc_probe: mallocs, touches and frees 64 MiB twice and prints
// "mmap|heap kept|returned <ms to touch the second block>" on stdout.
// Returns the process's exit code (0, or 1 if the memory read back wrong).
int RunMallocProbe();

}  // namespace lockstep::allreduce_bench

#endif  // LOCKSTEP_BENCH_ALLREDUCE_PROBES_H_
