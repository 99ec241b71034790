#include "server/worker_registry.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

WorkerRecord* AddWorker(WorkerRegistry& r, const std::string& address, int64_t pid = 1) {
  WorkerRecord w;
  w.seq = r.NextSeq();
  w.id = "w-" + std::to_string(w.seq);
  w.address = address;
  w.hostname = "h";
  w.pid = pid;
  w.last_seen = kT0;
  return r.Add(std::move(w));
}

std::vector<std::string> Ids(const std::vector<WorkerRecord*>& ws) {
  std::vector<std::string> ids;
  for (const WorkerRecord* w : ws) ids.push_back(w->id);
  return ids;
}

TEST(WorkerRegistryTest, FindTakesOnlyRegisteredIds) {
  WorkerRegistry r;
  AddWorker(r, "a:1");
  EXPECT_NE(r.Find("w-1"), nullptr);
  EXPECT_EQ(r.Find("w-01"), nullptr);
  EXPECT_EQ(r.Find("w-2"), nullptr);
  EXPECT_EQ(r.Find("x-1"), nullptr);
  EXPECT_EQ(r.Find("w-"), nullptr);
}

TEST(WorkerRegistryTest, IdleInIdOrderByNumber) {
  WorkerRegistry r;
  for (int i = 1; i <= 10; ++i) AddWorker(r, "a:" + std::to_string(i));
  r.Find("w-3")->state = v1::BUSY;
  std::vector<std::string> idle = Ids(r.Idle());
  ASSERT_EQ(idle.size(), 9u);
  EXPECT_EQ(idle[0], "w-1");
  EXPECT_EQ(idle[1], "w-2");
  EXPECT_EQ(idle[2], "w-4");
  EXPECT_EQ(idle[8], "w-10");  // w-2 < w-10
  EXPECT_TRUE(r.AnyBusy());
}

TEST(WorkerRegistryTest, AddressRulesAndReRegistration) {
  WorkerRegistry r;
  AddWorker(r, "a:1", /*pid=*/7);
  EXPECT_TRUE(r.CheckAddress("a:1", "h", 7, kT0).ok());  // the same process
  absl::Status s = r.CheckAddress("a:1", "h", 8, kT0 + absl::Seconds(2));
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("already registered by live worker w-1 (host h, pid 7, last "
                             "heartbeat 2.0 s ago)"),
            absl::string_view::npos)
      << s;
  r.Find("w-1")->state = v1::LOST;
  EXPECT_TRUE(r.CheckAddress("a:1", "h", 8, kT0).ok());  // a LOST worker's address
  std::vector<WorkerRecord> removed = r.RemoveAtAddress("a:1");
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0].id, "w-1");
  EXPECT_EQ(r.Find("w-1"), nullptr);
  EXPECT_EQ(r.NextSeq(), 2);  // ids are never reused
}

TEST(WorkerRegistryTest, LostAfterSilenceAndBackOnHeartbeat) {
  WorkerRegistry r;
  AddWorker(r, "a:1");
  WorkerRecord* b = AddWorker(r, "a:2");
  b->state = v1::BUSY;
  b->job_id = 4;
  r.Find("w-1")->last_seen = kT0 + absl::Seconds(1);
  // lost_after 3 s: at kT0 + 3 s nobody is past it (silence must exceed it).
  EXPECT_TRUE(r.MarkLost(kT0 + absl::Seconds(3), absl::Seconds(3)).empty());
  std::vector<WorkerRegistry::Lost> lost = r.MarkLost(kT0 + absl::Seconds(4), absl::Seconds(3));
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].worker->id, "w-2");
  EXPECT_EQ(lost[0].silent, absl::Seconds(4));
  EXPECT_EQ(b->state, v1::LOST);
  EXPECT_EQ(r.lost_total(), 1);
  EXPECT_TRUE(r.MarkLost(kT0 + absl::Seconds(4), absl::Seconds(3)).empty());  // once

  EXPECT_TRUE(r.Seen(b, kT0 + absl::Seconds(5)));
  EXPECT_EQ(b->state, v1::BUSY);  // still bound to job 4
  EXPECT_FALSE(r.Seen(b, kT0 + absl::Seconds(6)));
  WorkerRegistry::Unbind(b);
  EXPECT_EQ(b->state, v1::IDLE);
  EXPECT_EQ(b->job_id, 0u);
  EXPECT_EQ(b->rank, -1);
  EXPECT_FALSE(r.AnyBusy());
}

}  // namespace
}  // namespace lockstep
