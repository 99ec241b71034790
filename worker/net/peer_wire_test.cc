#include "worker/net/peer_wire.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "proto/peer.pb.h"

namespace lockstep {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}

std::string Joined(const std::vector<absl::Span<const uint8_t>>& parts) {
  std::string out;
  for (const auto& p : parts) out.append(p.begin(), p.end());
  return out;
}

PeerHeader SampleHeader() {
  PeerHeader h;
  h.group = 0xfedcba9876543210ull;
  h.from_rank = 3;
  h.key.job = 42;
  h.key.step = -7;  // negative values use 10-byte varints
  h.key.phase = 5;
  h.key.chunk = -1;  // kCountChunk
  h.seq = 1234567;
  h.streams = 2;
  h.fin_total = 99;
  return h;
}

TEST(PeerWireTest, EncodedHeaderPlusPayloadIsAValidPeerMessage) {
  const PeerHeader h = SampleHeader();
  const std::string payload = "hello, ring";
  uint8_t buf[kMaxPeerHeaderBytes];
  const size_t n = EncodePeerHeader(h, payload.size(), buf);
  ASSERT_LE(n, kMaxPeerHeaderBytes);
  std::string wire(reinterpret_cast<const char*>(buf), n);
  wire += payload;

  lockstep::v1::PeerMessage m;
  ASSERT_TRUE(m.ParseFromString(wire));
  EXPECT_EQ(m.group(), h.group);
  EXPECT_EQ(m.from_rank(), 3);
  EXPECT_EQ(m.job(), 42u);
  EXPECT_EQ(m.step(), -7);
  EXPECT_EQ(m.phase(), 5);
  EXPECT_EQ(m.chunk(), -1);
  EXPECT_EQ(m.seq(), 1234567u);
  EXPECT_EQ(m.streams(), 2u);
  EXPECT_EQ(m.fin_total(), 99u);
  EXPECT_EQ(m.data(), payload);
}

TEST(PeerWireTest, LargestHeaderFitsTheBound) {
  PeerHeader h;
  h.group = ~0ull;
  h.from_rank = -1;
  h.key.job = ~0ull;
  h.key.step = -1;
  h.key.phase = -1;
  h.key.chunk = -1;
  h.seq = ~0ull;
  h.streams = ~0u;
  h.fin_total = ~0ull;
  uint8_t buf[kMaxPeerHeaderBytes];
  // 6 varint fields of 1 + 10 bytes, seq and fin_total 1 + 10, streams
  // 1 + 5, data tag and a 10-byte length.
  EXPECT_EQ(EncodePeerHeader(h, ~size_t{0}, buf), 105u);
}

// A protobuf-serialized message (field order 1..7, data before group) split
// at every possible pair of points decodes to the same header and payload.
TEST(PeerWireTest, DecodesProtobufSerializationAcrossAnyFragmentation) {
  lockstep::v1::PeerMessage m;
  m.set_job(9);
  m.set_step(123456789012345);
  m.set_phase(2);
  m.set_chunk(-1);
  m.set_from_rank(1);
  m.set_group(77);
  m.set_seq(5);
  m.set_streams(3);
  m.set_data(std::string(300, 'x') + "tail");
  const std::vector<uint8_t> wire = Bytes(m.SerializeAsString());
  for (size_t a = 0; a <= wire.size(); a += 7) {
    for (size_t b = a; b <= wire.size(); b += 13) {
      const absl::Span<const uint8_t> all(wire);
      std::vector<absl::Span<const uint8_t>> frags = {
          all.subspan(0, a), all.subspan(a, b - a), all.subspan(b)};
      PeerHeader h;
      std::vector<absl::Span<const uint8_t>> payload;
      absl::Status s = DecodePeerMessage(frags, &h, &payload);
      ASSERT_TRUE(s.ok()) << s << " split " << a << "," << b;
      EXPECT_EQ(h.group, 77u);
      EXPECT_EQ(h.from_rank, 1);
      EXPECT_EQ(h.key.job, 9u);
      EXPECT_EQ(h.key.step, 123456789012345);
      EXPECT_EQ(h.key.phase, 2);
      EXPECT_EQ(h.key.chunk, -1);
      EXPECT_EQ(h.seq, 5u);
      EXPECT_EQ(h.streams, 3u);
      EXPECT_EQ(Joined(payload), m.data());
      for (const auto& p : payload) EXPECT_FALSE(p.empty());
    }
  }
}

TEST(PeerWireTest, EmptyMessageAndUnknownFields) {
  PeerHeader h;
  std::vector<absl::Span<const uint8_t>> payload;
  ASSERT_TRUE(DecodePeerMessage({}, &h, &payload).ok());
  EXPECT_EQ(h.group, 0u);
  EXPECT_TRUE(payload.empty());

  // Field 15 (varint), field 16 (length-delimited), fixed32 and fixed64
  // fields are skipped.
  const std::vector<uint8_t> wire = {
      0x78, 0x05,                    // field 15 varint 5
      0x82, 0x01, 0x02, 0xaa, 0xbb,  // field 16, 2 bytes
      0x55, 1, 2, 3, 4,              // field 10 fixed32
      0x59, 1, 2, 3, 4, 5, 6, 7, 8,  // field 11 fixed64
      0x20, 0x04,                    // chunk = 4
      0x32, 0x01, 0x7f};             // data = {0x7f}
  std::vector<absl::Span<const uint8_t>> frags = {absl::MakeConstSpan(wire)};
  ASSERT_TRUE(DecodePeerMessage(frags, &h, &payload).ok());
  EXPECT_EQ(h.key.chunk, 4);
  EXPECT_EQ(Joined(payload), std::string("\x7f"));
}

TEST(PeerWireTest, MalformedMessagesAreDataLoss) {
  const std::vector<std::vector<uint8_t>> bad = {
      {0x08},                          // tag without value
      {0x08, 0x80},                    // truncated varint
      {0x32, 0x05, 1, 2},              // data longer than the message
      {0x32},                          // missing length
      {0x0b},                          // group wire type (field 1, type 3)
      {0x45, 1, 2},                    // truncated fixed32
      {0x00, 0x01},                    // field number 0
      {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
       0x01},                          // 11-byte varint
  };
  for (const auto& w : bad) {
    PeerHeader h;
    std::vector<absl::Span<const uint8_t>> payload;
    std::vector<absl::Span<const uint8_t>> frags = {absl::MakeConstSpan(w)};
    absl::Status s = DecodePeerMessage(frags, &h, &payload);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_NE(s.message().find("byte"), absl::string_view::npos) << s;
  }
}

}  // namespace
}  // namespace lockstep
