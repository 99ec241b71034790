// Fuzz target: the parameter-server gRPC handlers (server/ps/ps_service.h:
// Push, Pull, DataAddress) and the shard registry behind them, called
// directly (no network) with requests decoded from the input.
// Input: records (fuzz_records.h); op % 3: 0 Push, 1 Pull, 2 DataAddress;
// the bytes are the request proto (a malformed one is skipped). A Pull's
// wait is forced to at most 2 ms so that a missing push costs no time.
// Checks that no request (absurd shard_len, num_workers, worker rank, step,
// grad_sum length) crashes the service, overflows a size, throws, or makes
// it allocate beyond libFuzzer's malloc limit: each must be answered with a
// status; a Pull that succeeds returns exactly shard_len floats.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "google/protobuf/stubs/logging.h"
#include "grpcpp/server_context.h"
#include "proto/ps.pb.h"
#include "server/ps/ps_service.h"
#include "tests/fuzz/fuzz_records.h"

// Malformed protos are the point here: keep protobuf's per-parse error
// lines (invalid UTF-8 ...) off stderr, they slow the run down.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  PsService service(/*max_jobs=*/4);
  grpc::ServerContext ctx;
  fuzz::RecordReader in(data, size);
  fuzz::Record r;
  int ops = 0;
  while (in.Next(&r) && ++ops <= 128) {
    switch (r.op % 3) {
      case 0: {
        v1::PushRequest q;
        v1::PushReply a;
        if (q.ParseFromArray(r.data, static_cast<int>(r.size))) {
          (void)service.Push(&ctx, &q, &a);
        }
        break;
      }
      case 1: {
        v1::PullRequest q;
        v1::PullReply a;
        if (!q.ParseFromArray(r.data, static_cast<int>(r.size))) break;
        q.set_wait_micros(1 + (q.wait_micros() & 2047));
        grpc::Status s = service.Pull(&ctx, &q, &a);
        if (s.ok() && a.grad_sum().size() !=
                          static_cast<size_t>(q.shard_len()) * sizeof(float)) {
          std::abort();
        }
        break;
      }
      default: {
        v1::DataAddressRequest q;
        v1::DataAddressReply a;
        (void)service.DataAddress(&ctx, &q, &a);
        break;
      }
    }
  }
  return 0;
}
