// Cheap process/thread resource figures read from the kernel, for the
// per-step report (resident memory) and the hot-path test (page faults).
//
// Every function here is allocation-free: it may be called on a training
// step's hot path. They read /proc or getrusage and never block on anything
// but that system call.
#ifndef LOCKSTEP_COMMON_PROCESS_STATS_H_
#define LOCKSTEP_COMMON_PROCESS_STATS_H_

#include <cstdint>

namespace lockstep {

// The calling process's resident set size in bytes (VmRSS: the second field
// of /proc/self/statm times the page size). Returns 0 when it cannot be read
// (no /proc), which proto3 readers see as "not reported".
int64_t ResidentBytes();

// Minor (no I/O) page faults taken by the calling thread so far
// (getrusage(RUSAGE_THREAD).ru_minflt); -1 if the call fails.
int64_t ThreadMinorPageFaults();

// Major page faults taken by the calling thread so far; -1 if the call fails.
int64_t ThreadMajorPageFaults();

// Parses the contents of a /proc/<pid>/statm file: the resident page count
// (second field) times page_size. Returns 0 for malformed text. Exposed for
// the test; ResidentBytes() uses it.
int64_t ResidentBytesFromStatm(const char* text, int64_t page_size);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_PROCESS_STATS_H_
