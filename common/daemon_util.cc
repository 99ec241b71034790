#include "common/daemon_util.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

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

bool IsWildcardHost(absl::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::";
}

std::string JoinHostPort(absl::string_view host, int port) {
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "[")) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

std::string HostOfAddress(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    return std::string(close == absl::string_view::npos ? address : address.substr(0, close + 1));
  }
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return std::string(address);
  if (address.find(':') != colon) return std::string(address);  // bare IPv6 literal
  return std::string(address.substr(0, colon));
}

absl::StatusOr<std::string> AdvertisedAddress(absl::string_view flag,
                                              absl::string_view advertise,
                                              absl::string_view listen_host, int bound_port) {
  if (advertise.empty()) {
    return JoinHostPort(IsWildcardHost(listen_host) ? "" : listen_host, bound_port);
  }
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        flag,
        ": expected HOST or HOST:PORT (IPv6 as [ADDR] or [ADDR]:PORT, PORT in 1..65535), got \"",
        advertise, "\""));
  };
  absl::string_view host = advertise;
  absl::string_view port_text;
  bool has_port = false;
  if (absl::StartsWith(advertise, "[")) {
    const size_t close = advertise.find(']');
    if (close == absl::string_view::npos || close == 1) return bad();
    host = advertise.substr(0, close + 1);
    absl::string_view rest = advertise.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return bad();
      port_text = rest.substr(1);
      has_port = true;
    }
  } else {
    const size_t first = advertise.find(':');
    const size_t last = advertise.rfind(':');
    if (first != absl::string_view::npos && first == last) {  // HOST:PORT
      host = advertise.substr(0, first);
      port_text = advertise.substr(first + 1);
      has_port = true;
    }  // no colon: a bare host; several: a bare IPv6 literal
  }
  if (host.empty() || IsWildcardHost(host)) return bad();
  int port = bound_port;
  if (has_port && (!absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535)) {
    return bad();
  }
  return JoinHostPort(host, port);
}

absl::StatusOr<std::string> HostFromGrpcPeer(absl::string_view peer) {
  std::string text(peer);
  text = absl::StrReplaceAll(text, {{"%5B", "["}, {"%5D", "]"}, {"%5b", "["}, {"%5d", "]"}});
  absl::string_view rest = text;
  const bool v4 = absl::ConsumePrefix(&rest, "ipv4:");
  const bool v6 = !v4 && absl::ConsumePrefix(&rest, "ipv6:");
  if (v4 || v6) {
    const std::string host = HostOfAddress(rest);
    const bool bracketed = absl::StartsWith(host, "[") && absl::EndsWith(host, "]");
    if (!host.empty() && host != rest && (v4 ? !bracketed : bracketed)) return host;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("expected an ipv4: or ipv6: peer address, got \"", peer, "\""));
}

}  // namespace lockstep
