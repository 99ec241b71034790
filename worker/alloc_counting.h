// Counting, per group of threads, the heap allocations, threads started and
// minor page faults of a test's hot path (worker/hot_path_test).
//
// Linking this library (testonly, alwayslink, into a linkstatic test)
// replaces malloc, calloc, realloc, memalign, aligned_alloc,
// posix_memalign, valloc and pvalloc (operator new calls malloc) with
// wrappers that count and then call glibc's __libc_* functions, and wraps
// pthread_create so that a new thread inherits its creator's group. Under
// AddressSanitizer or ThreadSanitizer (which own malloc) nothing is
// replaced, LOCKSTEP_COUNT_ALLOCATIONS is left undefined and only the
// constants below are declared.
//
// Groups are 1 .. kMaxGroups - 1 (0 = not counted). Every function may be
// called from any thread; the counters are relaxed atomics, exact once the
// threads that count into them have been joined. Nothing here allocates,
// so calling it on a measured path does not disturb the count.
#ifndef LOCKSTEP_WORKER_ALLOC_COUNTING_H_
#define LOCKSTEP_WORKER_ALLOC_COUNTING_H_

#include <cstdint>

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define LOCKSTEP_COUNT_ALLOCATIONS 1
#endif

namespace lockstep {
namespace alloc_counting {

inline constexpr int kMaxGroups = 8;
inline constexpr int kMaxThreadsPerGroup = 16;  // tids kept per group

#ifdef LOCKSTEP_COUNT_ALLOCATIONS
// Zeroes every group's counters and thread list; tracing off.
void ResetGroups();
// The calling thread counts for `group` from now on (and is the group's
// next thread: its first, index 0, is the job thread by convention).
void JoinGroup(int group);
// The calling thread stops counting for its group.
void LeaveGroup();
// The calling thread's group (0 = none).
int CurrentGroup();
// Allocations the calling thread made, whatever its group.
int64_t ThreadAllocations();
// Allocations made by the group's threads so far.
int64_t GroupAllocations(int group);
// Threads that joined the group or were started from one of its threads.
int64_t GroupThreads(int group);
// Minor page faults of the group's threads (from /proc/self/task/TID/stat),
// summed; per thread (index = order of joining) into
// by_thread[0, kMaxThreadsPerGroup) when non-null. A thread that ended
// counts 0.
int64_t GroupMinorFaults(int group, int64_t* by_thread = nullptr);
// While on, every allocation the group makes prints its stack to stderr.
void TraceGroup(int group, bool on);
#endif  // LOCKSTEP_COUNT_ALLOCATIONS

}  // namespace alloc_counting
}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_ALLOC_COUNTING_H_
