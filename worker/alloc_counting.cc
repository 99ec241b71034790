// See alloc_counting.h. Everything here runs inside malloc or
// pthread_create: no allocation, no locks, raw syscalls for /proc.
#include "worker/alloc_counting.h"

#ifdef LOCKSTEP_COUNT_ALLOCATIONS

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t n, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void __libc_free(void* p);
}

namespace lockstep {
namespace alloc_counting {

namespace {

// In the executable (linkstatic): static TLS, no allocation on access.
thread_local int t_group = 0;            // 0 = not counted; rank r = group r + 1
thread_local int64_t t_allocations = 0;  // this thread's, whatever its group
thread_local bool t_in_trace = false;
std::atomic<int64_t> g_group_allocations[kMaxGroups];
std::atomic<int64_t> g_group_threads[kMaxGroups];  // joined, the job thread included
std::atomic<int> g_group_tids[kMaxGroups][kMaxThreadsPerGroup];
std::atomic<bool> g_trace_group[kMaxGroups];

void Counted() {
  ++t_allocations;
  const int g = t_group;
  if (g <= 0) return;
  g_group_allocations[g].fetch_add(1, std::memory_order_relaxed);
  if (g_trace_group[g].load(std::memory_order_relaxed) && !t_in_trace) {
    t_in_trace = true;  // backtrace() may allocate the first time
    void* frames[24];
    const int n = backtrace(frames, 24);
    char sep[96];
    const int len = snprintf(sep, sizeof(sep),
                             "---- allocation on a traced hot-path step: group %d thread %d%s\n", g,
                             static_cast<int>(gettid()),
                             gettid() == g_group_tids[g][0].load() ? " (the job thread)" : "");
    (void)!write(2, sep, len);
    backtrace_symbols_fd(frames, n, 2);
    t_in_trace = false;
  }
}

// Minor faults of thread `tid` of this process (field 10 of its stat), with
// raw syscalls and a stack buffer; 0 if unreadable (the thread ended).
int64_t MinorFaultsOf(int tid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* p = strrchr(buf, ')');  // the name (field 2) may hold spaces
  if (p == nullptr) return 0;
  // ") S ppid pgrp session tty_nr tpgid flags minflt": minflt is the 8th
  // space-separated word after the ')'.
  for (int spaces = 0; *p != '\0' && spaces < 8; ++p) spaces += *p == ' ';
  return strtoll(p, nullptr, 10);
}

}  // namespace

void ResetGroups() {
  for (int g = 0; g < kMaxGroups; ++g) {
    g_group_allocations[g].store(0);
    g_group_threads[g].store(0);
    g_trace_group[g].store(false);
    for (auto& tid : g_group_tids[g]) tid.store(0);
  }
}

void JoinGroup(int group) {
  t_group = group;
  const int64_t i = g_group_threads[group].fetch_add(1);
  if (i < kMaxThreadsPerGroup) g_group_tids[group][i].store(static_cast<int>(gettid()));
}

void LeaveGroup() { t_group = 0; }

int CurrentGroup() { return t_group; }

int64_t ThreadAllocations() { return t_allocations; }

int64_t GroupAllocations(int group) { return g_group_allocations[group].load(); }

int64_t GroupThreads(int group) { return g_group_threads[group].load(); }

void TraceGroup(int group, bool on) { g_trace_group[group].store(on); }

// Sum over the group's threads; per thread (index = order of creation, 0 =
// the job thread) into by_thread[0, kMaxThreadsPerGroup) when non-null.
int64_t GroupMinorFaults(int group, int64_t* by_thread) {
  int64_t sum = 0;
  const int64_t n = std::min<int64_t>(g_group_threads[group].load(), kMaxThreadsPerGroup);
  for (int64_t i = 0; i < n; ++i) {
    const int tid = g_group_tids[group][i].load();
    const int64_t f = tid > 0 ? MinorFaultsOf(tid) : 0;
    if (by_thread != nullptr) by_thread[i] = f;
    sum += f;
  }
  return sum;
}

namespace {

struct StartArgs {
  void* (*fn)(void*);
  void* arg;
  int group;
  int64_t slot;  // in g_group_tids[group]
};

void* StartInGroup(void* p) {
  const StartArgs a = *static_cast<StartArgs*>(p);
  __libc_free(p);
  if (a.group > 0) {
    t_group = a.group;
    if (a.slot < kMaxThreadsPerGroup) {
      g_group_tids[a.group][a.slot].store(static_cast<int>(gettid()));
    }
  }
  return a.fn(a.arg);
}

}  // namespace
}  // namespace alloc_counting
}  // namespace lockstep

extern "C" {
// New threads inherit their creator's group.
int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*),
                   void* arg) noexcept {
  using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const Create real = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
  auto* a = static_cast<lockstep::alloc_counting::StartArgs*>(__libc_malloc(sizeof(lockstep::alloc_counting::StartArgs)));
  if (a == nullptr) return EAGAIN;
  // Counted when created (not when the thread first runs), in the
  // creator's step.
  const int group = lockstep::alloc_counting::t_group;
  const int64_t slot = group > 0 ? lockstep::alloc_counting::g_group_threads[group].fetch_add(1) : 0;
  *a = lockstep::alloc_counting::StartArgs{fn, arg, group, slot};
  const int rc = real(thread, attr, lockstep::alloc_counting::StartInGroup, a);
  if (rc != 0) __libc_free(a);
  return rc;
}

void* malloc(size_t size) noexcept {
  lockstep::alloc_counting::Counted();
  return __libc_malloc(size);
}
void* calloc(size_t n, size_t size) noexcept {
  lockstep::alloc_counting::Counted();
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t size) noexcept {
  lockstep::alloc_counting::Counted();
  return __libc_realloc(p, size);
}
void* memalign(size_t alignment, size_t size) noexcept {
  lockstep::alloc_counting::Counted();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(size_t alignment, size_t size) noexcept {
  lockstep::alloc_counting::Counted();
  return __libc_memalign(alignment, size);
}
int posix_memalign(void** out, size_t alignment, size_t size) noexcept {
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) {
    return EINVAL;
  }
  lockstep::alloc_counting::Counted();
  void* p = __libc_memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(size_t size) noexcept {
  lockstep::alloc_counting::Counted();
  return __libc_memalign(static_cast<size_t>(sysconf(_SC_PAGESIZE)), size);
}
void* pvalloc(size_t size) noexcept {
  lockstep::alloc_counting::Counted();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return __libc_memalign(page, (size + page - 1) / page * page);
}
}  // extern "C"
#endif  // LOCKSTEP_COUNT_ALLOCATIONS
