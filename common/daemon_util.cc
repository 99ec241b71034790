#include "common/daemon_util.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace lockstep {

absl::Status WritePortFile(const std::string& path, int port) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", tmp));
  const bool wrote = std::fprintf(f, "%d\n", port) > 0;
  int err = errno;
  if (std::fclose(f) != 0 || !wrote) {
    if (wrote) err = errno;
    std::remove(tmp.c_str());
    return absl::ErrnoToStatus(err, absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    return absl::ErrnoToStatus(err, absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

std::string AdvertisedAddress(absl::string_view listen_host, int port) {
  std::string host(listen_host);
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    char name[256] = {};
    host = gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0' ? name : "localhost";
  }
  return absl::StrCat(host, ":", port);
}

}  // namespace lockstep
