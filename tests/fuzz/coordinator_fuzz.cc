// Fuzz target: the coordinator's request handlers (server/coordinator.h,
// the facade the gRPC adapter calls), driven on a FakeClock.
// Input: records (fuzz_records.h); each record's op picks a handler and its
// bytes are that handler's request proto (a malformed proto is skipped):
//   0 RegisterWorker   1 Heartbeat     2 ReportStep   3 ReportEval
//   4 ReportDone       5 UploadWeightsChunk + (odd len) FinishWeightsUpload
//   6 SubmitJob        7 GetJob        8 CancelJob    9 GetSyncHistory(+Page)
//   10 DeregisterWorker 11 advance the clock (first 2 bytes, ms) and Tick
//   12 ListJobs + ListWorkers + counters  13 GetJobSeries + GetWeights
//   14 BeginDrain (once)
// Checks that no sequence of requests crashes the coordinator, trips a
// sanitizer, throws, or allocates beyond libFuzzer's malloc limit: every
// bad request must come back as a Status. Event lines are dropped (a null
// log sink) to keep the run fast.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "common/clock.h"
#include "common/log.h"
#include "proto/coordinator.pb.h"
#include "server/coordinator.h"
#include "tests/fuzz/fuzz_records.h"

namespace {

class NullSink final : public lockstep::LogSink {
 public:
  void Write(absl::string_view) override {}
};

template <typename M>
bool Parse(const lockstep::fuzz::Record& r, M* m) {
  return m->ParseFromArray(r.data, static_cast<int>(r.size));
}

}  // namespace

// Malformed protos are the point here: keep protobuf's per-parse error
// lines (invalid UTF-8 ...) off stderr, they slow the run down.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lockstep;
  namespace v1 = lockstep::v1;
  FakeClock clock;
  Logger logger(std::make_shared<NullSink>(),
                std::shared_ptr<Clock>(&clock, [](Clock*) {}));
  CoordinatorOptions options;
  options.logger = &logger;
  options.max_sync_history = 64;
  options.incarnation = 1;
  Coordinator coord(options, &clock);
  coord.SetAdvertiseAddress("127.0.0.1:7070");
  fuzz::RecordReader in(data, size);
  fuzz::Record r;
  int ops = 0;
  while (in.Next(&r) && ++ops <= 256) {
    switch (r.op % 15) {
      case 0: {
        v1::RegisterWorkerRequest q;
        if (Parse(r, &q)) (void)coord.RegisterWorker(q, "127.0.0.1");
        break;
      }
      case 1: {
        v1::HeartbeatRequest q;
        if (Parse(r, &q)) (void)coord.Heartbeat(q);
        break;
      }
      case 2: {
        v1::ReportStepRequest q;
        if (Parse(r, &q)) (void)coord.ReportStep(q);
        break;
      }
      case 3: {
        v1::ReportEvalRequest q;
        if (Parse(r, &q)) (void)coord.ReportEval(q);
        break;
      }
      case 4: {
        v1::ReportDoneRequest q;
        if (Parse(r, &q)) (void)coord.ReportDone(q);
        break;
      }
      case 5: {
        v1::WeightsChunk q;
        if (!Parse(r, &q)) break;
        (void)coord.UploadWeightsChunk(q);
        if (r.size & 1) (void)coord.FinishWeightsUpload(q.worker_id(), q.job_id());
        break;
      }
      case 6: {
        v1::SubmitJobRequest q;
        if (Parse(r, &q)) (void)coord.SubmitJob(q);
        break;
      }
      case 7: {
        v1::JobRef q;
        if (Parse(r, &q)) (void)coord.GetJob(q.job_id());
        break;
      }
      case 8: {
        v1::JobRef q;
        if (Parse(r, &q)) (void)coord.CancelJob(q.job_id());
        break;
      }
      case 9: {
        v1::SyncHistoryRequest q;
        if (!Parse(r, &q)) break;
        (void)coord.GetSyncHistory(q.job_id(), q.max_entries());
        (void)coord.GetSyncHistoryPage(q.job_id(), q.max_entries() / 2, q.max_entries());
        break;
      }
      case 10: {
        v1::DeregisterWorkerRequest q;
        if (Parse(r, &q)) (void)coord.DeregisterWorker(q);
        break;
      }
      case 11: {
        int ms = r.size > 0 ? r.data[0] : 0;
        if (r.size > 1) ms |= r.data[1] << 8;
        clock.Advance(absl::Milliseconds(ms));
        coord.Tick();
        break;
      }
      case 12:
        (void)coord.ListJobs();
        (void)coord.ListWorkers();
        (void)coord.counters();
        break;
      case 13: {
        v1::JobRef q;
        if (!Parse(r, &q)) break;
        (void)coord.GetJobSeries(q.job_id());
        (void)coord.GetWeights(q.job_id());
        break;
      }
      default:
        if (!coord.draining()) (void)coord.BeginDrain("fuzz drain");
        break;
    }
  }
  return 0;
}
