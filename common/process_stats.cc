#include "common/process_stats.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>

namespace lockstep {

int64_t ResidentBytesFromStatm(const char* text, int64_t page_size) {
  // statm: "size resident shared text lib data dt", all in pages.
  const char* p = text;
  auto skip_spaces = [&p] {
    while (*p == ' ' || *p == '\t') ++p;
  };
  auto read_number = [&p](int64_t* out) {
    if (*p < '0' || *p > '9') return false;
    int64_t v = 0;
    while (*p >= '0' && *p <= '9') {
      if (v > (INT64_MAX - 9) / 10) return false;  // absurd; refuse
      v = v * 10 + (*p - '0');
      ++p;
    }
    *out = v;
    return true;
  };
  int64_t size_pages = 0;
  int64_t resident_pages = 0;
  skip_spaces();
  if (!read_number(&size_pages)) return 0;
  skip_spaces();
  if (!read_number(&resident_pages)) return 0;
  if (page_size <= 0 || resident_pages > INT64_MAX / page_size) return 0;
  return resident_pages * page_size;
}

int64_t ResidentBytes() {
  // A stack buffer and raw syscalls: no heap, no stdio locks.
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof(buf) - 1);
  } while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  static const int64_t page_size = ::sysconf(_SC_PAGESIZE);
  return ResidentBytesFromStatm(buf, page_size);
}

int64_t ThreadMinorPageFaults() {
  struct rusage usage;
  if (::getrusage(RUSAGE_THREAD, &usage) != 0) return -1;
  return usage.ru_minflt;
}

int64_t ThreadMajorPageFaults() {
  struct rusage usage;
  if (::getrusage(RUSAGE_THREAD, &usage) != 0) return -1;
  return usage.ru_majflt;
}

}  // namespace lockstep
