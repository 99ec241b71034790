#include "worker/net/peer_wire.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace lockstep {
namespace {

// Field numbers of lockstep.v1.PeerMessage.
constexpr uint32_t kJob = 1, kStep = 2, kPhase = 3, kChunk = 4, kFromRank = 5,
                   kData = 6, kGroup = 7, kSeq = 8, kStreams = 9,
                   kFinTotal = 10;
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2,
                   kFixed32 = 5;

uint8_t* PutVarint(uint64_t v, uint8_t* p) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

uint8_t* PutVarintField(uint32_t field, uint64_t v, uint8_t* p) {
  p = PutVarint((field << 3) | kVarint, p);
  return PutVarint(v, p);
}

// Reads bytes across fragments.
class Cursor {
 public:
  explicit Cursor(absl::Span<const absl::Span<const uint8_t>> fragments)
      : frags_(fragments) {
    Normalize();
  }

  bool AtEnd() const { return frag_ == frags_.size(); }
  size_t offset() const { return offset_; }

  bool ReadByte(uint8_t* b) {
    if (AtEnd()) return false;
    *b = frags_[frag_][pos_];
    Advance(1);
    return true;
  }

  bool ReadVarint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!ReadByte(&b)) return false;
      result |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return false;  // more than 10 bytes
  }

  // Takes `n` bytes as views (nullptr `out`: skips them).
  bool Take(uint64_t n, std::vector<absl::Span<const uint8_t>>* out) {
    while (n > 0) {
      if (AtEnd()) return false;
      const absl::Span<const uint8_t> f = frags_[frag_];
      const size_t k = static_cast<size_t>(
          std::min<uint64_t>(n, static_cast<uint64_t>(f.size() - pos_)));
      if (out != nullptr) out->push_back(f.subspan(pos_, k));
      Advance(k);
      n -= k;
    }
    return true;
  }

 private:
  void Advance(size_t k) {
    pos_ += k;
    offset_ += k;
    Normalize();
  }
  void Normalize() {
    while (frag_ < frags_.size() && pos_ >= frags_[frag_].size()) {
      ++frag_;
      pos_ = 0;
    }
  }

  absl::Span<const absl::Span<const uint8_t>> frags_;
  size_t frag_ = 0;
  size_t pos_ = 0;
  size_t offset_ = 0;
};

}  // namespace

size_t EncodePeerHeader(const PeerHeader& h, size_t data_len, uint8_t* out) {
  uint8_t* p = out;
  p = PutVarintField(kJob, h.key.job, p);
  p = PutVarintField(kStep, static_cast<uint64_t>(h.key.step), p);
  // int32 fields are sign-extended to 64 bits, as protobuf does.
  p = PutVarintField(kPhase, static_cast<uint64_t>(int64_t{h.key.phase}), p);
  p = PutVarintField(kChunk, static_cast<uint64_t>(int64_t{h.key.chunk}), p);
  p = PutVarintField(kFromRank, static_cast<uint64_t>(int64_t{h.from_rank}),
                     p);
  p = PutVarintField(kGroup, h.group, p);
  p = PutVarintField(kSeq, h.seq, p);
  p = PutVarintField(kStreams, h.streams, p);
  p = PutVarintField(kFinTotal, h.fin_total, p);
  p = PutVarint((kData << 3) | kLengthDelimited, p);
  p = PutVarint(data_len, p);
  return static_cast<size_t>(p - out);
}

absl::Status DecodePeerMessage(
    absl::Span<const absl::Span<const uint8_t>> fragments, PeerHeader* header,
    std::vector<absl::Span<const uint8_t>>* payload) {
  *header = PeerHeader();
  payload->clear();
  Cursor c(fragments);
  while (!c.AtEnd()) {
    const size_t at = c.offset();
    uint64_t tag;
    if (!c.ReadVarint(&tag)) {
      return absl::DataLossError(absl::StrFormat(
          "PeerMessage: truncated or overlong field tag at byte %d", at));
    }
    const uint32_t field = static_cast<uint32_t>(tag >> 3);
    const uint32_t wire = static_cast<uint32_t>(tag & 7);
    if (field == 0) {
      return absl::DataLossError(
          absl::StrFormat("PeerMessage: field number 0 at byte %d", at));
    }
    switch (wire) {
      case kVarint: {
        uint64_t v;
        if (!c.ReadVarint(&v)) {
          return absl::DataLossError(absl::StrFormat(
              "PeerMessage: truncated varint of field %d at byte %d", field,
              at));
        }
        switch (field) {
          case kJob: header->key.job = v; break;
          case kStep: header->key.step = static_cast<int64_t>(v); break;
          case kPhase: header->key.phase = static_cast<int32_t>(v); break;
          case kChunk: header->key.chunk = static_cast<int32_t>(v); break;
          case kFromRank: header->from_rank = static_cast<int32_t>(v); break;
          case kGroup: header->group = v; break;
          case kSeq: header->seq = v; break;
          case kStreams: header->streams = static_cast<uint32_t>(v); break;
          case kFinTotal: header->fin_total = v; break;
          default: break;  // unknown field: skipped
        }
        break;
      }
      case kLengthDelimited: {
        uint64_t len;
        if (!c.ReadVarint(&len)) {
          return absl::DataLossError(absl::StrFormat(
              "PeerMessage: truncated length of field %d at byte %d", field,
              at));
        }
        // The last occurrence of a bytes field wins, as in protobuf.
        if (field == kData) payload->clear();
        if (!c.Take(len, field == kData ? payload : nullptr)) {
          return absl::DataLossError(absl::StrFormat(
              "PeerMessage: field %d at byte %d claims %d bytes, past the end "
              "of the message",
              field, at, len));
        }
        break;
      }
      case kFixed64:
      case kFixed32:
        if (!c.Take(wire == kFixed64 ? 8 : 4, nullptr)) {
          return absl::DataLossError(absl::StrFormat(
              "PeerMessage: truncated fixed-width field %d at byte %d", field,
              at));
        }
        break;
      default:
        return absl::DataLossError(absl::StrFormat(
            "PeerMessage: unsupported wire type %d of field %d at byte %d",
            wire, field, at));
    }
  }
  return absl::OkStatus();
}

}  // namespace lockstep
