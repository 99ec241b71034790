// Tests only: see test_certs.h.
#include "common/net/test_certs.h"

#include <cstdlib>
#include <set>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace lockstep {
namespace testcerts {

std::string Pki(const std::string& name) {
  static absl::Mutex mu(absl::kConstInit);
  static std::set<std::string>* made = new std::set<std::string>();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  absl::MutexLock l(&mu);
  if (made->count(name) == 0) {
    const char* srcdir = std::getenv("TEST_SRCDIR");
    const char* workspace = std::getenv("TEST_WORKSPACE");
    const std::string script =
        absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                     workspace != nullptr ? workspace : "lockstep", "/deploy/certs.sh");
    const std::string cmd = absl::StrCat("bash '", script, "' --out='", dir, "' 2>/dev/null");
    ABSL_RAW_CHECK(std::system(cmd.c_str()) == 0, "deploy/certs.sh failed");
    made->insert(name);
  }
  return dir;
}

std::shared_ptr<const dataconn::DataTls> Tls(const std::string& pki, const std::string& role,
                                             std::vector<std::string> peer_roles) {
  const std::string dir = Pki(pki);
  auto t = dataconn::DataTls::Create(absl::StrCat(dir, "/", role, ".pem"),
                                     absl::StrCat(dir, "/", role, ".key"),
                                     absl::StrCat(dir, "/ca.pem"), std::move(peer_roles));
  ABSL_RAW_CHECK(t.ok(), "DataTls::Create failed");
  return *t;
}

}  // namespace testcerts
}  // namespace lockstep
