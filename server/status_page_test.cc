// First: google.protobuf.Struct below has a map field (see the header).
#include "tests/tsan/protobuf_map_abi.h"

#include "server/status_page.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/http/http.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "server/coordinator.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;
using google::protobuf::Struct;
using google::protobuf::Value;

std::string Hash(int i) { return absl::StrFormat("%032x", i); }

HttpRequest Get(const std::string& path, std::map<std::string, std::string> query = {}) {
  HttpRequest r;
  r.method = "GET";
  r.path = path;
  r.query = std::move(query);
  return r;
}

// Any JSON object, parsed with protobuf's JSON parser into a Struct.
Struct ParseObject(const std::string& json) {
  Struct s;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &s);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return s;
}

template <typename M>
M ParseProto(const std::string& json) {
  M m;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &m);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return m;
}

// The numbers of list `v` (null -> -1).
std::vector<double> Numbers(const Value& v) {
  std::vector<double> out;
  for (const Value& e : v.list_value().values()) {
    out.push_back(e.kind_case() == Value::kNullValue ? -1 : e.number_value());
  }
  return out;
}

const Value& Field(const Struct& s, const std::string& name) {
  static const Value* const kMissing = new Value();
  auto it = s.fields().find(name);
  EXPECT_NE(it, s.fields().end()) << "no field " << name;
  return it == s.fields().end() ? *kMissing : it->second;
}

class StatusPageTest : public ::testing::Test {
 protected:
  StatusPageTest() : clock_(absl::FromUnixSeconds(1000)) {
    CoordinatorOptions o;
    o.advertise_address = "coord:7070";
    coord_ = std::make_unique<Coordinator>(o, &clock_);
    StatusPageOptions po;
    po.max_sync_entries = 3;
    po.default_sync_entries = 2;
    po.max_jobs = 2;
    page_ = std::make_unique<StatusPage>(coord_.get(), po);
  }

  std::string Register(int i) {
    v1::RegisterWorkerRequest req;
    req.set_address(absl::StrCat("10.0.0.", i, ":5000"));
    req.set_hostname(absl::StrCat("host", i));
    absl::StatusOr<v1::RegisterWorkerReply> r = coord_->RegisterWorker(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->worker_id() : "";
  }

  uint64_t Submit(int k) {
    v1::SubmitJobRequest req;
    v1::JobSpec* spec = req.mutable_spec();
    spec->set_name("curve");
    spec->set_model("softmax");
    spec->set_sync_mode(v1::RING);
    spec->set_num_workers(k);
    spec->set_global_batch(8 * k);
    spec->mutable_lr()->set_base_lr(0.1f);
    spec->set_steps(10);
    absl::StatusOr<v1::SubmitJobReply> r = coord_->SubmitJob(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->job_id() : 0;
  }

  // Both ranks report `step` with `loss`, 8 examples each; rank 1's hash is
  // `hash1`.
  void Step(uint64_t job, int64_t step, double loss, int hash1 = 7) {
    for (int rank = 0; rank < 2; ++rank) {
      v1::ReportStepRequest req;
      req.set_worker_id(workers_[rank]);
      req.set_job_id(job);
      req.set_rank(rank);
      req.set_step(step);
      req.set_weights_hash(Hash(rank == 0 ? 7 : hash1));
      req.set_loss(loss);
      req.set_examples(8);
      ASSERT_TRUE(coord_->ReportStep(req).ok());
    }
  }

  // Two workers and a K=2 job on them, RUNNING.
  uint64_t StartJob() {
    workers_ = {Register(1), Register(2)};
    const uint64_t job = Submit(2);
    EXPECT_EQ(coord_->GetJob(job)->state(), v1::RUNNING);
    return job;
  }

  FakeClock clock_;
  std::unique_ptr<Coordinator> coord_;
  std::unique_ptr<StatusPage> page_;
  std::vector<std::string> workers_;
};

TEST_F(StatusPageTest, ServesThePageAndItsAssetsFromTheBinary) {
  const HttpResponse html = page_->Handle(Get("/"));
  EXPECT_EQ(html.status, 200);
  EXPECT_EQ(html.content_type, "text/html; charset=utf-8");
  EXPECT_NE(html.body.find("<svg id=\"loss-curve\""), std::string::npos);
  EXPECT_NE(html.body.find("id=\"sync-strip\""), std::string::npos);
  EXPECT_NE(html.body.find("src=\"/static/app.js\""), std::string::npos);
  EXPECT_EQ(html.headers.at("Cache-Control"), "no-store");

  const HttpResponse js = page_->Handle(Get("/static/app.js"));
  EXPECT_EQ(js.status, 200);
  EXPECT_EQ(js.content_type, "text/javascript; charset=utf-8");
  EXPECT_NE(js.body.find("/api/curve?id="), std::string::npos);
  // The embedded file is whole: it ends with the script's last line.
  EXPECT_NE(js.body.find("refresh();\n})();\n"), std::string::npos);

  const HttpResponse css = page_->Handle(Get("/static/style.css"));
  EXPECT_EQ(css.status, 200);
  EXPECT_EQ(css.content_type, "text/css; charset=utf-8");
  EXPECT_NE(css.body.find(".strip .cell.bad"), std::string::npos);

  // Every path the page says it serves answers something other than 404.
  for (const std::string& path : StatusPage::Paths()) {
    EXPECT_NE(page_->Handle(Get(path)).status, 404) << path;
  }
  EXPECT_EQ(page_->Handle(Get("/static/nope.js")).status, 404);
  const HttpResponse api = page_->Handle(Get("/api/nope"));
  EXPECT_EQ(api.status, 404);
  EXPECT_EQ(api.content_type, "application/json; charset=utf-8");
}

TEST_F(StatusPageTest, UnknownJobIs404WithTheJobNamed) {
  for (const char* path : {"/api/job", "/api/sync", "/api/curve"}) {
    const HttpResponse r = page_->Handle(Get(path, {{"id", "42"}}));
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_EQ(r.content_type, "application/json; charset=utf-8");
    const Struct body = ParseObject(r.body);
    EXPECT_EQ(Field(body, "error").string_value(), "job 42 not found") << path;
  }
}

TEST_F(StatusPageTest, BadIdIs400NamingTheParameter) {
  for (const char* path : {"/api/job", "/api/sync", "/api/curve"}) {
    HttpResponse r = page_->Handle(Get(path, {{"id", "abc"}}));
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_EQ(Field(ParseObject(r.body), "error").string_value(),
              "id: expected a job id (a positive integer), got \"abc\"");
    r = page_->Handle(Get(path, {{"id", "0"}}));
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_EQ(Field(ParseObject(r.body), "error").string_value(),
              "id: expected a job id (a positive integer), got \"0\"");
    r = page_->Handle(Get(path));
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_EQ(Field(ParseObject(r.body), "error").string_value(),
              "id: missing (expected ?id=N, a job id (a positive integer))");
  }
  const uint64_t job = StartJob();
  for (const char* bad : {"x", "0", "-3", "1e3"}) {
    const HttpResponse r =
        page_->Handle(Get("/api/sync", {{"id", absl::StrCat(job)}, {"max", bad}}));
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_EQ(Field(ParseObject(r.body), "error").string_value(),
              absl::StrCat("max: expected a positive integer (at most 3 are returned), got \"",
                           bad, "\""));
  }
}

TEST_F(StatusPageTest, WorkersAndJobsAreProtoJson) {
  const uint64_t job = StartJob();
  const HttpResponse w = page_->Handle(Get("/api/workers"));
  ASSERT_EQ(w.status, 200);
  const v1::WorkerList workers = ParseProto<v1::WorkerList>(w.body);
  ASSERT_EQ(workers.workers_size(), 2);
  EXPECT_EQ(workers.workers(1).worker_id(), "w-2");
  EXPECT_EQ(workers.workers(1).state(), v1::BUSY);
  EXPECT_EQ(workers.workers(1).job_id(), job);
  // snake_case field names, enums by name.
  EXPECT_NE(w.body.find("\"worker_id\":\"w-1\""), std::string::npos) << w.body;
  EXPECT_NE(w.body.find("\"state\":\"BUSY\""), std::string::npos) << w.body;

  // Three more jobs (PENDING behind the first): only the last max_jobs = 2.
  Submit(2);
  Submit(2);
  const uint64_t last = Submit(2);
  const HttpResponse j = page_->Handle(Get("/api/jobs"));
  ASSERT_EQ(j.status, 200);
  const Struct jobs = ParseObject(j.body);
  EXPECT_EQ(Field(jobs, "total_jobs").number_value(), 4);
  const auto& list = Field(jobs, "jobs").list_value().values();
  ASSERT_EQ(list.size(), 2);
  EXPECT_EQ(list[1].struct_value().fields().at("job_id").string_value(), absl::StrCat(last));
  EXPECT_EQ(list[1].struct_value().fields().at("state").string_value(), "PENDING");

  const HttpResponse one = page_->Handle(Get("/api/job", {{"id", absl::StrCat(job)}}));
  ASSERT_EQ(one.status, 200);
  const v1::JobStatus status = ParseProto<v1::JobStatus>(one.body);
  EXPECT_EQ(status.job_id(), job);
  EXPECT_EQ(status.state(), v1::RUNNING);
  EXPECT_EQ(status.ranks_size(), 2);
  EXPECT_EQ(status.spec().model(), "softmax");
  // Zero-valued fields are printed too (the page reads them).
  EXPECT_NE(one.body.find("\"checked_steps\":\"0\""), std::string::npos) << one.body;
}

TEST_F(StatusPageTest, CurveHasLossThroughputAndEvalSeries) {
  const uint64_t job = StartJob();
  // Steps 0, 1, 2 complete 1 s apart; 16 examples per step.
  Step(job, 0, 2.0);
  clock_.Advance(absl::Seconds(1));
  Step(job, 1, 1.0);
  clock_.Advance(absl::Seconds(1));
  Step(job, 2, 0.5);
  v1::ReportEvalRequest eval;
  eval.set_worker_id(workers_[0]);
  eval.set_job_id(job);
  eval.set_rank(0);
  eval.set_step(3);
  eval.set_test_accuracy(0.75);
  eval.set_test_loss(0.625);
  ASSERT_TRUE(coord_->ReportEval(eval).ok());

  const HttpResponse r = page_->Handle(Get("/api/curve", {{"id", absl::StrCat(job)}}));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json; charset=utf-8");
  const Struct curve = ParseObject(r.body);
  EXPECT_EQ(Field(curve, "job_id").number_value(), job);
  const Struct& loss = Field(curve, "loss").struct_value();
  EXPECT_EQ(Numbers(Field(loss, "step")), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(Numbers(Field(loss, "loss")), (std::vector<double>{2.0, 1.0, 0.5}));
  EXPECT_EQ(Numbers(Field(loss, "seconds")), (std::vector<double>{0, 1, 2}));
  // 16 examples per second between steps; null (-1 here) for the first.
  EXPECT_EQ(Numbers(Field(loss, "window_examples_per_second")),
            (std::vector<double>{-1, 16, 16}));
  EXPECT_EQ(Field(loss, "stride").number_value(), 1);
  EXPECT_EQ(Field(loss, "steps_offered").number_value(), 3);
  const Struct& ev = Field(curve, "eval").struct_value();
  EXPECT_EQ(Numbers(Field(ev, "step")), (std::vector<double>{3}));
  EXPECT_EQ(Numbers(Field(ev, "test_accuracy")), (std::vector<double>{0.75}));
  EXPECT_EQ(Numbers(Field(ev, "test_loss")), (std::vector<double>{0.625}));
}

// What the page shows for a job beyond its curves comes from /api/job:
// skipped steps (with no rank named: a sum overflow), the per-rank step
// breakdown (medians of what the workers report) and the membership events
// field; and the page has the places that show them.
TEST_F(StatusPageTest, JobCarriesSkippedStepsAndTheStepBreakdown) {
  const uint64_t job = StartJob();
  for (int64_t step = 0; step < 3; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      v1::ReportStepRequest req;
      req.set_worker_id(workers_[rank]);
      req.set_job_id(job);
      req.set_rank(rank);
      req.set_step(step);
      req.set_weights_hash(Hash(7));
      req.set_examples(8);
      req.set_step_seconds(0.004);
      req.set_compute_seconds(rank == 0 ? 0.0025 : 0.003);
      req.set_communication_seconds(0.001);
      req.set_exposed_seconds(0.0005);
      req.set_peer_wait_seconds(0.00025);
      req.set_update_skipped(step == 1);  // a sum overflow: no rank named
      ASSERT_TRUE(coord_->ReportStep(req).ok());
    }
  }
  const HttpResponse r = page_->Handle(Get("/api/job", {{"id", absl::StrCat(job)}}));
  ASSERT_EQ(r.status, 200);
  const v1::JobStatus status = ParseProto<v1::JobStatus>(r.body);
  EXPECT_EQ(status.skipped_steps(), 1);
  EXPECT_EQ(status.last_skipped_step(), 1);
  EXPECT_EQ(status.last_nonfinite_ranks_size(), 0);
  ASSERT_EQ(status.ranks_size(), 2);
  EXPECT_DOUBLE_EQ(status.ranks(0).median_compute_seconds(), 0.0025);
  EXPECT_DOUBLE_EQ(status.ranks(1).median_compute_seconds(), 0.003);
  EXPECT_DOUBLE_EQ(status.ranks(1).median_peer_wait_seconds(), 0.00025);
  EXPECT_NE(r.body.find("\"membership_events\":[]"), std::string::npos) << r.body;
  const HttpResponse html = page_->Handle(Get("/"));
  EXPECT_NE(html.body.find("id=\"membership-events\""), std::string::npos);
  EXPECT_NE(html.body.find("<th>compute ms</th>"), std::string::npos);
  const HttpResponse js = page_->Handle(Get("/static/app.js"));
  EXPECT_NE(js.body.find("'sum overflowed'"), std::string::npos);
  EXPECT_NE(js.body.find("median_compute_seconds"), std::string::npos);
}

TEST_F(StatusPageTest, SyncHasBoundedHistoryAndAStripWithTheMismatch) {
  const uint64_t job = StartJob();
  Step(job, 0, 1.0);
  Step(job, 1, 1.0);
  Step(job, 2, 1.0);
  // Rank 1 drifts at step 3: with K = 2 there is no majority, so both ranks
  // are named and the job fails (repair needs a majority).
  Step(job, 3, 1.0, /*hash1=*/8);
  ASSERT_EQ(coord_->GetJob(job)->state(), v1::FAILED);

  const std::string id = absl::StrCat(job);
  // max=100 is capped at max_sync_entries = 3: the last three checks.
  HttpResponse r = page_->Handle(Get("/api/sync", {{"id", id}, {"max", "100"}}));
  ASSERT_EQ(r.status, 200);
  Struct sync = ParseObject(r.body);
  const Struct& strip = Field(sync, "strip").struct_value();
  EXPECT_EQ(Numbers(Field(strip, "first_step")), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(Numbers(Field(strip, "last_step")), (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(Numbers(Field(strip, "checks")), (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(Numbers(Field(strip, "mismatches")), (std::vector<double>{0, 0, 0, 1}));
  EXPECT_EQ(Field(strip, "checks_per_cell").number_value(), 1);
  EXPECT_EQ(Field(strip, "checks_offered").number_value(), 4);
  // The history part is a lockstep.v1.SyncHistory.
  const size_t start = r.body.find("{\"history\":") + 11;
  const size_t end = r.body.find(",\"strip\":");
  const v1::SyncHistory history = ParseProto<v1::SyncHistory>(r.body.substr(start, end - start));
  EXPECT_EQ(history.checked_steps(), 4);
  EXPECT_EQ(history.mismatched_steps(), 1);
  EXPECT_EQ(history.first_mismatch_step(), 3);
  ASSERT_EQ(history.checks_size(), 3);
  EXPECT_EQ(history.checks(0).step(), 1);
  EXPECT_EQ(history.checks(2).step(), 3);
  EXPECT_FALSE(history.checks(2).all_match());
  EXPECT_TRUE(history.checks(2).no_majority());
  ASSERT_EQ(history.checks(2).differing_ranks_size(), 2);
  EXPECT_EQ(history.checks(2).differing_ranks(0), 0);
  EXPECT_EQ(history.checks(2).differing_ranks(1), 1);

  // Without max: default_sync_entries = 2.
  r = page_->Handle(Get("/api/sync", {{"id", id}}));
  ASSERT_EQ(r.status, 200);
  sync = ParseObject(r.body);
  EXPECT_EQ(Field(Field(sync, "history").struct_value(), "checks").list_value().values_size(), 2);
}

}  // namespace
}  // namespace lockstep
