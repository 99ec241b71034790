#include <cstdio>
#include <thread>
#include <vector>
#include <algorithm>
#include <malloc.h>
#include <grpcpp/grpcpp.h>
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/synchronization/mutex.h"
#include "worker/net/grpc_transport.h"

using namespace lockstep;
int main(int argc, char** argv) {
  mallopt(M_ARENA_MAX, 1);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  int bytes = argc > 1 ? atoi(argv[1]) : 4096;
  int spin = argc > 2 ? atoi(argv[2]) : 0;
  int burst = argc > 3 ? atoi(argv[3]) : 1;
  std::vector<std::unique_ptr<PeerServiceImpl>> svc;
  std::vector<std::unique_ptr<grpc::Server>> srv;
  std::vector<std::string> addr;
  for (int r = 0; r < 2; ++r) {
    svc.push_back(std::make_unique<PeerServiceImpl>());
    grpc::ServerBuilder b; int port = 0;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    svc[r]->RegisterOn(b);
    srv.push_back(b.BuildAndStart());
    addr.push_back(absl::StrCat("127.0.0.1:", port));
  }
  GrpcTransportOptions o; o.recv_spin = absl::Microseconds(spin);
  auto t0 = *GrpcTransport::Create(svc[0].get(), 1, 0, addr, o);
  auto t1 = *GrpcTransport::Create(svc[1].get(), 1, 1, addr, o);
  const int iters = 2000;
  std::thread echo([&] {
    std::vector<uint8_t> b(bytes);
    for (int i = 0; i < iters; ++i) {
      MessageKey k; k.job = 1; k.step = i;
      for (int j = 0; j < burst; ++j) { k.chunk = j;
      auto s = t1->Recv(0, k, absl::MakeSpan(b), absl::Now() + absl::Seconds(10));
      if (!s.ok()) { fprintf(stderr, "%s\n", s.ToString().c_str()); exit(1); } }
      for (int j = 0; j < burst; ++j) { k.chunk = j;
      auto s = t1->Send(0, k, b, absl::Now() + absl::Seconds(10)); }
    }
  });
  std::vector<uint8_t> b(bytes);
  std::vector<double> rtt;
  for (int i = 0; i < iters; ++i) {
    MessageKey k; k.job = 1; k.step = i;
    absl::Time a = absl::Now();
    for (int j = 0; j < burst; ++j) { k.chunk = j; auto s = t0->Send(1, k, b, absl::Now() + absl::Seconds(10)); }
    for (int j = 0; j < burst; ++j) { k.chunk = j; auto s = t0->Recv(1, k, absl::MakeSpan(b), absl::Now() + absl::Seconds(10));
    if (!s.ok()) { fprintf(stderr, "%s\n", s.ToString().c_str()); exit(1); } }
    rtt.push_back(absl::ToDoubleMicroseconds(absl::Now() - a));
  }
  echo.join();
  std::sort(rtt.begin(), rtt.end());
  printf("bytes %d spin %d burst %d: rtt median %.1f us p10 %.1f p90 %.1f\n", bytes, spin, burst, rtt[iters/2], rtt[iters/10], rtt[iters*9/10]);
  t0.reset(); t1.reset();
  for (int r = 0; r < 2; ++r) { svc[r]->Shutdown(); srv[r]->Shutdown(absl::ToChronoTime(absl::Now())); }
  return 0;
}
