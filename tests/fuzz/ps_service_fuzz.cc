// Fuzz target: the parameter-server gRPC handlers (server/ps/ps_service.h:
// Push, Pull, DataAddress, Control) and the shard registry and raw-TCP
// plane's secret table behind them, called directly (no network) with
// requests decoded from the input.
// Input: records (fuzz_records.h); op % 4: 0 Push, 1 Pull, 2 DataAddress
// (the record's bytes as its request, waiting at most 2 ms), 3 Control;
// the bytes are the request proto (a malformed one is skipped). A Pull's
// wait is forced to at most 2 ms so that a missing push costs no time.
// Checks that no request (absurd shard_len, num_workers, worker rank, step,
// grad_sum length) crashes the service, overflows a size, throws, or makes
// it allocate beyond libFuzzer's malloc limit: each must be answered with a
// status; a Pull that succeeds returns exactly shard_len floats.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/time/clock.h"
#include "common/psnet/ps_tcp_server.h"
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
  PsShardRegistry registry(/*max_jobs=*/4);
  PsService service(&registry);
  // The plane's secret table as a TLS lockstep-server runs it (its socket
  // is never dialed).
  PsTcpServerOptions options;
  options.secrets_from_coordinator = true;
  options.max_secrets = 8;
  auto plane = PsTcpServer::Start(&registry, "127.0.0.1", 0, options);
  if (!plane.ok()) std::abort();
  PsService::SecretHooks hooks = DataPlaneSecretHooks(plane->get());
  // DataAddress waits for the coordinator's secret: at most 2 ms here.
  hooks.register_secret = [p = plane->get()](uint64_t job, const std::string& secret,
                                              absl::Time) {
    return p->RegisterSecret(job, secret, absl::Now() + absl::Milliseconds(2));
  };
  service.SetSecretHooks(std::move(hooks));
  service.SetDataAddress((*plane)->port());
  grpc::ServerContext ctx;
  fuzz::RecordReader in(data, size);
  fuzz::Record r;
  int ops = 0;
  while (in.Next(&r) && ++ops <= 128) {
    switch (r.op % 4) {
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
      case 2: {
        v1::DataAddressRequest q;
        v1::DataAddressReply a;
        if (q.ParseFromArray(r.data, static_cast<int>(r.size))) {
          (void)service.DataAddress(&ctx, &q, &a);
        }
        break;
      }
      default: {
        v1::PsControlRequest q;
        v1::PsControlReply a;
        if (q.ParseFromArray(r.data, static_cast<int>(r.size))) {
          (void)service.Control(&ctx, &q, &a);
        }
        break;
      }
    }
  }
  (*plane)->Shutdown();
  return 0;
}
