// Wire codec of the raw-TCP peer transport: see tcp_wire.h.
#include "worker/net/tcp_wire.h"

#include "absl/strings/str_format.h"

namespace lockstep {
namespace tcpwire {

void EncodeFrame(const MessageKey& key, int64_t len, uint8_t* p) {
  Put<uint32_t>(p, 0, kFrameMagic);
  Put<uint32_t>(p, 4, 0);
  Put<uint64_t>(p, 8, key.job);
  Put<int64_t>(p, 16, key.step);
  Put<int32_t>(p, 24, key.phase);
  Put<int32_t>(p, 28, key.chunk);
  Put<int64_t>(p, 32, len);
}

bool DecodeFrame(const uint8_t* p, Frame* f) {
  if (Get<uint32_t>(p, 0) != kFrameMagic || Get<uint32_t>(p, 4) != 0) {
    return false;
  }
  f->key = MakeKey(Get<uint64_t>(p, 8), Get<int64_t>(p, 16),
                   Get<int32_t>(p, 24), Get<int32_t>(p, 28));
  f->len = Get<int64_t>(p, 32);
  return f->len >= 0 && f->len <= kMaxFrameBytes;
}

namespace {

// The magic and version that open a challenge or an accept:
// InvalidArgumentError "bad <what>: magic ... version ..." unless they fit.
absl::Status CheckMagicAndVersion(const uint8_t* p, uint32_t want_magic, const char* what) {
  const uint32_t magic = Get<uint32_t>(p, 0);
  const uint32_t version = Get<uint32_t>(p, 4);
  if (magic == want_magic && version == kVersion) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "bad %s: magic 0x%08x version %d, expected 0x%08x version %d (not a lockstep peer, or "
      "one of another version?)",
      what, magic, version, want_magic, kVersion));
}

}  // namespace

void EncodeChallenge(const dataauth::Nonce& nonce, uint8_t* p) {
  Put<uint32_t>(p, 0, kChallengeMagic);
  Put<uint32_t>(p, 4, kVersion);
  std::memcpy(p + 8, nonce.data(), nonce.size());
}

absl::Status DecodeChallenge(const uint8_t* p, dataauth::Nonce* nonce) {
  if (absl::Status s = CheckMagicAndVersion(p, kChallengeMagic, "challenge"); !s.ok()) return s;
  std::memcpy(nonce->data(), p + 8, nonce->size());
  return absl::OkStatus();
}

void EncodeHello(const Hello& h, absl::string_view secret, const dataauth::Nonce& challenge,
                 const dataauth::Nonce& own_nonce, uint8_t* p) {
  std::memset(p, 0, kHelloBytes);
  Put<uint32_t>(p, 0, kHelloMagic);
  Put<uint32_t>(p, 4, kVersion);
  Put<uint64_t>(p, 8, h.group);
  Put<uint32_t>(p, 16, h.from);
  Put<uint32_t>(p, 20, h.to);
  Put<uint32_t>(p, 24, h.world);
  std::memcpy(p + kHeaderBytes, own_nonce.data(), own_nonce.size());
  const dataauth::Mac mac =
      dataauth::HelloMac(secret, kHelloDomain, p, kHelloSignedBytes, challenge);
  std::memcpy(p + kHelloSignedBytes, mac.data(), mac.size());
}

absl::Status VerifyHello(const uint8_t* p, absl::string_view secret,
                         const dataauth::Nonce& challenge) {
  const dataauth::Mac want =
      dataauth::HelloMac(secret, kHelloDomain, p, kHelloSignedBytes, challenge);
  if (dataauth::MacEqual(want.data(), p + kHelloSignedBytes, want.size())) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrFormat(
      "hello from rank %d for group %d rank %d has a wrong mac (not this job's secret, or a "
      "hello recorded on another connection)",
      Get<uint32_t>(p, 16), Get<uint64_t>(p, 8), Get<uint32_t>(p, 20)));
}

void EncodeAccept(const uint8_t* hello, absl::string_view secret,
                  const dataauth::Nonce& challenge, uint8_t* p) {
  Put<uint32_t>(p, 0, kAcceptMagic);
  Put<uint32_t>(p, 4, kVersion);
  const dataauth::Mac mac =
      dataauth::HelloMac(secret, kAcceptDomain, hello, kHelloSignedBytes, challenge);
  std::memcpy(p + 8, mac.data(), mac.size());
}

absl::Status VerifyAccept(const uint8_t* p, const uint8_t* hello, absl::string_view secret,
                          const dataauth::Nonce& challenge) {
  if (absl::Status s = CheckMagicAndVersion(p, kAcceptMagic, "accept"); !s.ok()) return s;
  const dataauth::Mac want =
      dataauth::HelloMac(secret, kAcceptDomain, hello, kHelloSignedBytes, challenge);
  if (dataauth::MacEqual(want.data(), p + 8, want.size())) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrFormat(
      "its accept of our hello (rank %d to group %d rank %d) has a wrong mac: it does not hold "
      "the job's secret (a stranger at the peer's address, or an accept recorded on another "
      "connection)",
      Get<uint32_t>(hello, 16), Get<uint64_t>(hello, 8), Get<uint32_t>(hello, 20)));
}

absl::Status DecodeHello(const uint8_t* p, Hello* h) {
  const uint32_t magic = Get<uint32_t>(p, 0);
  const uint32_t version = Get<uint32_t>(p, 4);
  h->group = Get<uint64_t>(p, 8);
  h->from = Get<uint32_t>(p, 16);
  h->to = Get<uint32_t>(p, 20);
  h->world = Get<uint32_t>(p, 24);
  if (magic != kHelloMagic || version != kVersion) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "bad hello: magic 0x%08x version %d, expected 0x%08x "
        "version %d (not a lockstep peer?)",
        magic, version, kHelloMagic, kVersion));
  }
  if (h->world < 1 || h->world > kMaxWorld || h->from >= h->world ||
      h->to >= h->world || h->from == h->to) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bad hello: from rank %d to rank %d of %d", h->from,
                        h->to, h->world));
  }
  return absl::OkStatus();
}

}  // namespace tcpwire
}  // namespace lockstep
