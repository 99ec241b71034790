// Hand-rolled codec for lockstep.v1.PeerMessage (proto/peer.proto) so the
// gRPC peer transport can move payloads without protobuf's intermediate
// std::string copies.
//
// Sending: EncodePeerHeader writes every field EXCEPT the payload bytes and
// ends with the tag and length of field 6 (data), so `header ++ payload` is a
// valid serialized PeerMessage that any protobuf parser accepts (fields are
// written in the order 1,2,3,4,5,7,8,9,10,6; all fields are always present, even
// zeros, which proto3 parsers accept).
//
// Receiving: DecodePeerMessage parses a serialized PeerMessage given as the
// list of fragments gRPC received it in (any field order, unknown fields
// skipped, like protobuf) and returns the header plus the payload as views
// into those fragments: no byte of the payload is copied.
//
// Pure functions; thread-safe.
#ifndef LOCKSTEP_WORKER_NET_PEER_WIRE_H_
#define LOCKSTEP_WORKER_NET_PEER_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "common/collective/transport.h"

namespace lockstep {

// Routing and matching fields of one PeerMessage.
struct PeerHeader {
  uint64_t group = 0;     // field 7: transport group (see peer.proto)
  int32_t from_rank = 0;  // field 5
  MessageKey key;         // fields 1-4
  uint64_t seq = 0;       // field 8: message number on the link
  uint32_t streams = 0;   // field 9: parallel streams of the link
  uint64_t fin_total = 0; // field 10: non-zero on a stream's final message
};

// Upper bound of EncodePeerHeader's output.
inline constexpr size_t kMaxPeerHeaderBytes = 112;

// Writes the header fields and the data field's tag + length for a payload
// of `data_len` bytes into `out` (at least kMaxPeerHeaderBytes long);
// returns the number of bytes written.
size_t EncodePeerHeader(const PeerHeader& header, size_t data_len,
                        uint8_t* out);

// Parses one serialized PeerMessage split into `fragments` (in order; empty
// fragments allowed). On success fills *header and *payload (views into the
// fragments, in order, no empty views; empty when the message has no data).
// Errors: DataLossError describing the malformed field and its byte offset
// (truncated varint or length, a group wire type, a length past the end).
absl::Status DecodePeerMessage(
    absl::Span<const absl::Span<const uint8_t>> fragments, PeerHeader* header,
    std::vector<absl::Span<const uint8_t>>* payload);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_NET_PEER_WIRE_H_
