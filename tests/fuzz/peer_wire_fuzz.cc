// Fuzz target: the gRPC peer transport's hand-rolled PeerMessage codec
// (worker/net/peer_wire.h), which parses every message a peer streams in.
// Input: byte 0 gives the fragment size (1..256 bytes, as gRPC slices
// split a message), the rest is the serialized message. Checks no crash or
// out-of-bounds read, that the payload views lie inside the fragments and
// are non-empty, that whatever DecodePeerMessage accepts re-encodes with
// EncodePeerHeader to a header that decodes to the same fields, and that
// protobuf's own parser accepts what DecodePeerMessage accepts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "google/protobuf/stubs/logging.h"
#include "absl/types/span.h"
#include "proto/peer.pb.h"
#include "worker/net/peer_wire.h"

// Malformed protos are the point here: keep protobuf's per-parse error
// lines (invalid UTF-8 ...) off stderr, they slow the run down.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t frag = static_cast<size_t>(data[0]) + 1;
  const uint8_t* msg = data + 1;
  const size_t len = size - 1;
  std::vector<absl::Span<const uint8_t>> fragments;
  for (size_t off = 0; off < len; off += frag) {
    fragments.emplace_back(msg + off, std::min(frag, len - off));
  }
  lockstep::PeerHeader header;
  std::vector<absl::Span<const uint8_t>> payload;
  if (!lockstep::DecodePeerMessage(fragments, &header, &payload).ok()) return 0;
  std::string data_bytes;
  for (const auto& p : payload) {
    if (p.empty() || p.data() < msg || p.data() + p.size() > msg + len) std::abort();
    data_bytes.append(reinterpret_cast<const char*>(p.data()), p.size());
  }
  // Round trip through the encoder.
  uint8_t hdr[lockstep::kMaxPeerHeaderBytes];
  const size_t n = lockstep::EncodePeerHeader(header, data_bytes.size(), hdr);
  if (n > sizeof(hdr)) std::abort();
  std::string again(reinterpret_cast<const char*>(hdr), n);
  again += data_bytes;
  absl::Span<const uint8_t> one(reinterpret_cast<const uint8_t*>(again.data()),
                                again.size());
  lockstep::PeerHeader h2;
  std::vector<absl::Span<const uint8_t>> p2;
  if (!lockstep::DecodePeerMessage(absl::MakeConstSpan(&one, 1), &h2, &p2).ok() ||
      h2.group != header.group || h2.from_rank != header.from_rank ||
      h2.key.job != header.key.job || h2.key.step != header.key.step ||
      h2.key.phase != header.key.phase || h2.key.chunk != header.key.chunk ||
      h2.seq != header.seq || h2.streams != header.streams ||
      h2.fin_total != header.fin_total) {
    std::abort();
  }
  lockstep::v1::PeerMessage parsed;
  if (!parsed.ParseFromArray(again.data(), static_cast<int>(again.size()))) std::abort();
  if (parsed.data() != data_bytes) std::abort();
  return 0;
}
