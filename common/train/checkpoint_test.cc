#include "common/train/checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/data/sampler.h"
#include "common/train/job_checkpoint.h"
#include "common/train/job_spec_convert.h"
#include "common/train/replica.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

namespace testing_util {
std::string TempPath(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return absl::StrCat(t != nullptr ? t : "/tmp", "/", name);
}
void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}
}  // namespace testing_util

std::string FreshDir(const std::string& name) {
  const std::string dir = testing_util::TempPath(name);
  std::system(absl::StrCat("rm -rf '", dir, "'").c_str());
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream b;
  b << in.rdbuf();
  return b.str();
}

TrainingState SampleState(int64_t next_step, int64_t n = 5) {
  TrainingState s;
  s.job_id = 42;
  s.seed = 0xfeedbeefcafeULL;
  s.next_step = next_step;
  s.total_steps = 100;
  s.sampler = {1000, 29, true};
  s.job_spec = std::string("spec\0bytes", 10);
  for (int64_t i = 0; i < n; ++i) s.params.push_back(0.25f * i - 1.0f);
  s.params[0] = -0.0f;  // bits, not values, are kept
  s.optimizer.steps = next_step;
  for (int64_t i = 0; i < 2 * n; ++i) s.optimizer.slots.push_back(1e-3f * i);
  s.weights_hash = HashWeights(s.params);
  return s;
}

void ExpectSameState(const TrainingState& a, const TrainingState& b) {
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.next_step, b.next_step);
  EXPECT_EQ(a.total_steps, b.total_steps);
  EXPECT_EQ(a.sampler.num_examples, b.sampler.num_examples);
  EXPECT_EQ(a.sampler.global_batch, b.sampler.global_batch);
  EXPECT_EQ(a.sampler.drop_last, b.sampler.drop_last);
  EXPECT_EQ(a.weights_hash, b.weights_hash);
  EXPECT_EQ(a.job_spec, b.job_spec);
  ASSERT_EQ(a.params.size(), b.params.size());
  EXPECT_EQ(std::memcmp(a.params.data(), b.params.data(), 4 * a.params.size()), 0);
  EXPECT_EQ(a.optimizer.steps, b.optimizer.steps);
  ASSERT_EQ(a.optimizer.slots.size(), b.optimizer.slots.size());
  EXPECT_EQ(std::memcmp(a.optimizer.slots.data(), b.optimizer.slots.data(),
                        4 * a.optimizer.slots.size()),
            0);
}

TEST(CheckpointFormatTest, RoundTripsEveryFieldBitForBit) {
  const TrainingState s = SampleState(7);
  const std::string bytes = EncodeCheckpoint(s);
  // 112-byte header + 10 spec bytes + 4 * (5 + 10) floats + 8 checksum.
  EXPECT_EQ(bytes.size(), 112u + 10 + 60 + 8);
  EXPECT_EQ(bytes.substr(0, 8), "LKSTCKPT");
  auto back = DecodeCheckpoint(bytes, CheckpointLimits{}, "f");
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameState(s, *back);
  EXPECT_TRUE(std::signbit(back->params[0]));
}

TEST(CheckpointFormatTest, EveryFlippedByteAndEveryTruncationIsDetected) {
  const std::string bytes = EncodeCheckpoint(SampleState(7));
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x10;
    EXPECT_FALSE(DecodeCheckpoint(bad, CheckpointLimits{}, "f").ok()) << "byte " << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto r = DecodeCheckpoint(bytes.substr(0, n), CheckpointLimits{}, "f");
    EXPECT_FALSE(r.ok()) << n;
  }
}

TEST(CheckpointFormatTest, ErrorsNameTheFileAndTheField) {
  std::string bytes = EncodeCheckpoint(SampleState(7));
  auto r = DecodeCheckpoint(bytes.substr(0, 150), CheckpointLimits{}, "/ck/a.ckpt");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(r.status().message(),
            "/ck/a.ckpt: truncated: expected 190 bytes (5 weights, 10 optimizer slots, 10-byte "
            "spec), got 150");
  std::string flipped = bytes;
  flipped[130] ^= 1;
  r = DecodeCheckpoint(flipped, CheckpointLimits{}, "/ck/a.ckpt");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("/ck/a.ckpt: checksum: stored XXH3-64"), std::string::npos)
      << r.status();
  r = DecodeCheckpoint("hello world", CheckpointLimits{}, "/ck/a.ckpt");
  EXPECT_NE(r.status().message().find("/ck/a.ckpt: magic: expected \"LKSTCKPT\""),
            std::string::npos)
      << r.status();
  std::string v2 = bytes;
  v2[8] = 2;
  r = DecodeCheckpoint(v2, CheckpointLimits{}, "/ck/a.ckpt");
  EXPECT_EQ(r.status().message(), "/ck/a.ckpt: version: expected 1, got 2");
  CheckpointLimits limits;
  limits.num_params = 6;
  r = DecodeCheckpoint(bytes, limits, "/ck/a.ckpt");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "/ck/a.ckpt: num_params: expected 6, got 5");
  limits = CheckpointLimits{};
  limits.num_slots = 5;
  r = DecodeCheckpoint(bytes, limits, "/ck/a.ckpt");
  EXPECT_EQ(r.status().message(), "/ck/a.ckpt: num_slots: expected 5, got 10");
}

TEST(CheckpointFormatTest, AHugeSizeFieldIsRefusedBeforeAllocating) {
  std::string bytes = EncodeCheckpoint(SampleState(7));
  // num_params = 2^62 (offset 80): refused by the bound, not by a failed
  // allocation.
  std::memset(&bytes[80], 0, 8);
  bytes[87] = 0x40;
  auto r = DecodeCheckpoint(bytes, CheckpointLimits{}, "f");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(),
            absl::StrCat("f: num_params: expected 0 to ", int64_t{1} << 30, ", got ",
                         int64_t{1} << 62));
}

// Ranks sharing one checkpoint directory may store the same fetched file
// at once (each resumes itself): every writer has its own temporary file,
// each call succeeds and the path holds one writer's bytes whole. With one
// shared "<path>.tmp" a writer's rename finds it gone, or publishes a file
// another writer truncated.
TEST(CheckpointFilesTest, WritersRacingOnOnePathEachPublishAWholeFile) {
  const std::string dir = FreshDir("ck_race");
  ASSERT_TRUE(MakeDirs(dir).ok());
  const std::string path = dir + "/" + CheckpointFileName(7);
  constexpr int kWriters = 4;
  constexpr int kRounds = 25;
  std::vector<std::string> contents;
  for (int w = 0; w < kWriters; ++w) contents.push_back(std::string(1 << 20, static_cast<char>('a' + w)));
  std::vector<int> failures(kWriters, 0);
  std::vector<std::string> errors(kWriters);
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < kRounds; ++i) {
        absl::Status s = WriteFileAtomically(path, contents[static_cast<size_t>(w)]);
        if (!s.ok()) {
          ++failures[static_cast<size_t>(w)];
          errors[static_cast<size_t>(w)] = s.ToString();
        }
      }
    });
  }
  for (auto& t : writers) t.join();
  for (int w = 0; w < kWriters; ++w) EXPECT_EQ(failures[static_cast<size_t>(w)], 0) << errors[static_cast<size_t>(w)];
  std::ifstream in(path, std::ios::binary);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_NE(std::find(contents.begin(), contents.end(), got.str()), contents.end())
      << "the file is no writer's whole file (" << got.str().size() << " bytes)";
  // No temporary file is left behind.
  int entries = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (struct dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ++entries;
    }
    closedir(d);
  }
  EXPECT_EQ(entries, 1);
}

TEST(CheckpointFilesTest, WritesAtomicallyKeepsTheNewestAndRemovesLeftovers) {
  const std::string root = FreshDir("ck_keep");
  const std::string dir = JobCheckpointDir(root + "/", 42);
  EXPECT_EQ(dir, root + "/job-42");
  ASSERT_TRUE(MakeDirs(dir).ok());
  // A crash's leftovers an hour old (the old name and this build's) go; a
  // young one may be another writer's, in progress, and stays.
  const std::string old_tmp = dir + "/step-000000000001.ckpt.tmp";
  const std::string old_tmp2 = dir + "/step-000000000002.ckpt.00000000deadbeef.tmp";
  const std::string young_tmp = dir + "/step-000000000003.ckpt.0000000012345678.tmp";
  for (const std::string& p : {old_tmp, old_tmp2, young_tmp}) {
    testing_util::WriteFile(p, "crash leftover");
  }
  for (const std::string& p : {old_tmp, old_tmp2}) {
    struct timeval hour_ago[2] = {{time(nullptr) - kStaleTempFileSeconds - 5, 0},
                                  {time(nullptr) - kStaleTempFileSeconds - 5, 0}};
    ASSERT_EQ(utimes(p.c_str(), hour_ago), 0) << p;
  }
  for (int64_t step : {5, 10, 15, 20}) {
    auto path = WriteCheckpoint(dir, SampleState(step), 3);
    ASSERT_TRUE(path.ok()) << path.status();
    EXPECT_EQ(*path, absl::StrCat(dir, "/", CheckpointFileName(step)));
  }
  auto files = ListCheckpoints(dir);
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(files->size(), 3u);
  EXPECT_EQ((*files)[0].first, 10);
  EXPECT_EQ((*files)[2].second, dir + "/step-000000000020.ckpt");
  EXPECT_NE(access(old_tmp.c_str(), F_OK), 0);
  EXPECT_NE(access(old_tmp2.c_str(), F_OK), 0);
  EXPECT_EQ(access(young_tmp.c_str(), F_OK), 0);
  EXPECT_NE(access((dir + "/step-000000000020.ckpt.tmp").c_str(), F_OK), 0);
  auto loaded = LoadCheckpoint(dir, 0, CheckpointLimits{});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->path, dir + "/step-000000000020.ckpt");
  EXPECT_TRUE(loaded->skipped.empty());
  ExpectSameState(SampleState(20), loaded->state);
  loaded = LoadCheckpoint(dir, 15, CheckpointLimits{});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->state.next_step, 15);
  EXPECT_EQ(LoadCheckpoint(dir, 5, CheckpointLimits{}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckpointFilesTest, ACorruptOrTruncatedNewestFileFallsBackToThePreviousOneNamingIt) {
  const std::string dir = FreshDir("ck_fault") + "/job-1";
  for (int64_t step : {10, 20, 30}) ASSERT_TRUE(WriteCheckpoint(dir, SampleState(step), 3).ok());
  const std::string newest = dir + "/step-000000000030.ckpt";
  const std::string middle = dir + "/step-000000000020.ckpt";
  // Truncate the newest (a crash of a non-atomic writer, a full disk).
  ASSERT_EQ(truncate(newest.c_str(), 100), 0);
  auto loaded = LoadCheckpoint(dir, 0, CheckpointLimits{});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->path, middle);
  EXPECT_EQ(loaded->state.next_step, 20);
  ASSERT_EQ(loaded->skipped.size(), 1u);
  EXPECT_EQ(loaded->skipped[0], newest + ": truncated: 100 bytes, shorter than the 120-byte "
                                         "header and checksum");
  // Flip one weight bit in the middle one too: the oldest is used.
  std::string bytes = ReadAll(middle);
  bytes[bytes.size() - 20] ^= 0x04;
  testing_util::WriteFile(middle, bytes);
  loaded = LoadCheckpoint(dir, 0, CheckpointLimits{});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->state.next_step, 10);
  ASSERT_EQ(loaded->skipped.size(), 2u);
  EXPECT_NE(loaded->skipped[1].find(middle + ": checksum: "), std::string::npos)
      << loaded->skipped[1];
  // Every file broken: the newest file's error, the others appended.
  testing_util::WriteFile(dir + "/step-000000000010.ckpt", "garbage");
  loaded = LoadCheckpoint(dir, 0, CheckpointLimits{});
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(loaded.status().message().find(absl::StrCat("no valid checkpoint in ", dir, ": ",
                                                         newest, ": truncated")),
            std::string::npos)
      << loaded.status();
  EXPECT_NE(loaded.status().message().find("step-000000000010.ckpt: magic"), std::string::npos);
  // A missing directory, an empty one.
  EXPECT_EQ(LoadCheckpoint(dir + "x", 0, CheckpointLimits{}).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(MakeDirs(dir + "/empty").ok());
  EXPECT_EQ(LoadCheckpoint(dir + "/empty", 0, CheckpointLimits{}).status().message(),
            dir + "/empty: holds no checkpoint (step-*.ckpt)");
}

TEST(CheckpointFilesTest, AFileLargerThanTheModelAllowsIsNotRead) {
  const std::string dir = FreshDir("ck_big") + "/job-1";
  ASSERT_TRUE(WriteCheckpoint(dir, SampleState(10, 1000), 3).ok());
  CheckpointLimits limits;
  limits.num_params = 5;
  limits.num_slots = 10;
  limits.max_spec_bytes = 64;
  auto loaded = LoadCheckpoint(dir, 10, limits);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(loaded.status().message().find("size: expected at most 244 bytes for this job's "
                                           "model, got 12130"),
            std::string::npos)
      << loaded.status();
}

TEST(CheckpointFilesTest, ADirectoryThatCannotBeMadeIsNamed) {
  const std::string root = FreshDir("ck_notdir");
  ASSERT_TRUE(MakeDirs(root).ok());
  testing_util::WriteFile(root + "/file", "x");
  auto path = WriteCheckpoint(root + "/file/job-1", SampleState(3), 3);
  EXPECT_FALSE(path.ok());
  EXPECT_NE(path.status().message().find(root + "/file: exists and is not a directory"),
            std::string::npos)
      << path.status();
}

// ---------------------------------------------------------------------------
// Replica + optimizer + sampler: a run interrupted at step M and resumed from
// its checkpoint ends bit-identical to the uninterrupted run.

Dataset Blobs(int64_t n) {
  Dataset d;
  d.name = "blobs";
  d.num_examples = n;
  d.dim = 6;
  d.num_classes = 3;
  uint64_t z = 1;
  auto next = [&] {
    z = z * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>((z >> 40) & 0xffff) / 65536.0f;
  };
  for (int64_t i = 0; i < n; ++i) {
    const int c = static_cast<int>(i % 3);
    for (int j = 0; j < 6; ++j) d.x.push_back((j % 3 == c ? 1.5f : 0.0f) + next() - 0.5f);
    d.y.push_back(static_cast<float>(c));
  }
  return d;
}

v1::JobSpec ResumeSpec(const std::string& kind) {
  v1::JobSpec spec;
  spec.set_model("mlp:16,8");
  spec.set_sync_mode(v1::RING);
  spec.set_num_workers(1);
  spec.set_global_batch(29);
  spec.set_steps(40);
  spec.set_seed(5);
  spec.mutable_optimizer()->set_kind(kind);
  if (kind == "sgd") spec.mutable_optimizer()->set_momentum(0.9f);
  spec.mutable_lr()->set_base_lr(kind == "sgd" ? 0.05f : 0.01f);
  spec.mutable_lr()->set_decay("cosine");
  return spec;
}

// Trains steps [from, to) of `replica` as a worker does.
void TrainSteps(Replica* r, GlobalBatchSampler* sampler, const Dataset& data, int64_t from,
                int64_t to) {
  std::vector<int64_t> slice;
  for (int64_t step = from; step < to; ++step) {
    sampler->SliceInto(step, 0, 1, &slice);
    BatchStats s = r->ComputeGradSum(data, slice);
    r->Apply(step, s.count);
  }
}

class ResumeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ResumeTest, ResumedRunEndsBitIdenticalToTheUninterruptedOne) {
  const Dataset data = Blobs(200);
  v1::JobSpec spec = ResumeSpec(GetParam());
  spec.set_checkpoint_dir(FreshDir("ck_resume_" + GetParam()));
  spec.set_checkpoint_every_steps(7);
  auto train_spec = ToTrainSpec(spec);
  ASSERT_TRUE(train_spec.ok()) << train_spec.status();
  const int64_t total = 40;

  auto whole = Replica::Create(*train_spec, data.dim, data.num_classes);
  ASSERT_TRUE(whole.ok());
  GlobalBatchSampler s1(data.num_examples, 29, spec.seed());
  TrainSteps(whole->get(), &s1, data, 0, total);

  // Interrupted run: checkpoints every 7 steps, "dies" after step 24.
  auto first = Replica::Create(*train_spec, data.dim, data.num_classes);
  ASSERT_TRUE(first.ok());
  GlobalBatchSampler s2(data.num_examples, 29, spec.seed());
  JobCheckpointer ck(spec, 3);
  ASSERT_TRUE(ck.Start(absl::UnixEpoch()).ok());
  int written = 0;
  for (int64_t step = 0; step < 25; ++step) {
    TrainSteps(first->get(), &s2, data, step, step + 1);
    if (ck.Due(step + 1, total, absl::UnixEpoch())) {
      auto path = ck.Write(**first, step + 1, total, {data.num_examples, 29, false},
                           (*first)->Hash(), absl::UnixEpoch());
      ASSERT_TRUE(path.ok()) << path.status();
      ++written;
    }
  }
  EXPECT_EQ(written, 3);  // after steps 7, 14, 21

  // Resume in a fresh process-like state: new replica, new sampler.
  v1::JobSpec resume = spec;
  resume.mutable_resume_from()->set_checkpoint_dir(spec.checkpoint_dir());
  resume.mutable_resume_from()->set_job_id(3);
  ASSERT_TRUE(ValidateJobSpec(resume).ok());
  auto second = Replica::Create(*train_spec, data.dim, data.num_classes);
  ASSERT_TRUE(second.ok());
  auto point = ResumeReplica(resume, {data.num_examples, 29, false}, total, second->get());
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->next_step, 21);
  EXPECT_EQ(point->path, spec.checkpoint_dir() + "/job-3/step-000000000021.ckpt");
  EXPECT_EQ((*second)->optimizer().steps(), 21);
  GlobalBatchSampler s3(data.num_examples, 29, spec.seed());
  TrainSteps(second->get(), &s3, data, point->next_step, total);

  EXPECT_EQ((*second)->Hash(), (*whole)->Hash());
  ASSERT_EQ(std::memcmp((*second)->params().data(), (*whole)->params().data(),
                        4 * (*whole)->num_params()),
            0);
  EXPECT_EQ((*second)->optimizer().State().slots, (*whole)->optimizer().State().slots);

  // An explicit older step works too and also ends identical.
  resume.mutable_resume_from()->set_step(14);
  auto third = Replica::Create(*train_spec, data.dim, data.num_classes);
  ASSERT_TRUE(third.ok());
  point = ResumeReplica(resume, {data.num_examples, 29, false}, total, third->get());
  ASSERT_TRUE(point.ok()) << point.status();
  EXPECT_EQ(point->next_step, 14);
  TrainSteps(third->get(), &s3, data, 14, total);
  EXPECT_EQ((*third)->Hash(), (*whole)->Hash());
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ResumeTest, ::testing::Values("sgd", "adam", "adamw"));

TEST(ResumeTest, AnotherRunsCheckpointIsRefusedNamingTheField) {
  const Dataset data = Blobs(200);
  v1::JobSpec spec = ResumeSpec("sgd");
  spec.set_checkpoint_dir(FreshDir("ck_other"));
  auto train_spec = ToTrainSpec(spec);
  auto r = Replica::Create(*train_spec, data.dim, data.num_classes);
  ASSERT_TRUE(r.ok());
  JobCheckpointer ck(spec, 9);
  ASSERT_TRUE(ck.Start(absl::UnixEpoch()).ok());
  ASSERT_TRUE(ck.Write(**r, 40, 40, {200, 29, false}, (*r)->Hash(), absl::UnixEpoch()).ok());

  v1::JobSpec other = spec;
  other.mutable_resume_from()->set_checkpoint_dir(spec.checkpoint_dir());
  other.mutable_resume_from()->set_job_id(9);
  other.set_seed(6);
  auto point = ResumeReplica(other, {200, 29, false}, 40, r->get());
  EXPECT_EQ(point.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(point.status().message(),
            spec.checkpoint_dir() +
                "/job-9/step-000000000040.ckpt: spec.seed: the checkpoint's run used 5, this "
                "job 6 (a resumed job must train the same run)");
  other.set_seed(5);
  point = ResumeReplica(other, {300, 29, false}, 40, r->get());
  EXPECT_NE(point.status().message().find("sampler: the checkpoint's run sampled 200 examples"),
            std::string::npos)
      << point.status();
  // Another model: refused on its size before reading the weights.
  v1::JobSpec bigger = other;
  bigger.set_model("mlp:32");
  auto big_spec = ToTrainSpec(bigger);
  auto big = Replica::Create(*big_spec, data.dim, data.num_classes);
  ASSERT_TRUE(big.ok());
  point = ResumeReplica(bigger, {200, 29, false}, 40, big->get());
  EXPECT_EQ(point.status().code(), absl::StatusCode::kFailedPrecondition);
  other.mutable_resume_from()->set_job_id(10);
  point = ResumeReplica(other, {200, 29, false}, 40, r->get());
  EXPECT_EQ(point.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(point.status().message().find("spec.resume_from: "), std::string::npos);
}

TEST(CheckpointSpecTest, FieldsAreValidatedByName) {
  v1::JobSpec spec = ResumeSpec("sgd");
  ASSERT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_checkpoint_every_steps(-1);
  EXPECT_EQ(ValidateJobSpec(spec).message(), "spec.checkpoint_every_steps: expected >= 0, got -1");
  spec.set_checkpoint_every_steps(0);
  spec.set_checkpoint_keep(-2);
  EXPECT_EQ(ValidateJobSpec(spec).message(), "spec.checkpoint_keep: expected >= 0, got -2");
  spec.set_checkpoint_keep(0);
  spec.mutable_resume_from()->set_job_id(3);
  EXPECT_NE(ValidateJobSpec(spec).message().find("spec.resume_from.checkpoint_dir"),
            std::string::npos);
  spec.mutable_resume_from()->set_checkpoint_dir("/x");
  spec.mutable_resume_from()->set_step(-1);
  EXPECT_NE(ValidateJobSpec(spec).message().find("spec.resume_from.step"), std::string::npos);
}

TEST(CheckpointPolicyTest, DueEveryNStepsEveryTSecondsAndAtTheEnd) {
  v1::JobSpec spec = ResumeSpec("sgd");
  JobCheckpointer off(spec, 1);
  EXPECT_FALSE(off.Due(40, 40, absl::UnixEpoch()));
  spec.set_checkpoint_dir("/unused");
  JobCheckpointer end_only(spec, 1);
  EXPECT_FALSE(end_only.Due(39, 40, absl::UnixEpoch() + absl::Hours(100)));
  EXPECT_TRUE(end_only.Due(40, 40, absl::UnixEpoch()));
  spec.set_checkpoint_every_steps(10);
  JobCheckpointer steps(spec, 1);
  EXPECT_TRUE(steps.Due(10, 40, absl::UnixEpoch()));
  EXPECT_FALSE(steps.Due(11, 40, absl::UnixEpoch()));
  spec.set_checkpoint_every_steps(0);
  spec.set_checkpoint_every_seconds(60);
  spec.set_checkpoint_dir(FreshDir("ck_timed"));
  JobCheckpointer timed(spec, 1);
  const absl::Time t0 = absl::UnixEpoch();
  ASSERT_TRUE(timed.Start(t0).ok());
  EXPECT_FALSE(timed.Due(1, 40, t0 + absl::Seconds(59)));
  EXPECT_TRUE(timed.Due(1, 40, t0 + absl::Seconds(60)));
  Dataset data = Blobs(50);
  auto r = Replica::Create(*ToTrainSpec(spec), data.dim, data.num_classes);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(timed.Write(**r, 2, 40, {50, 29, false}, (*r)->Hash(), t0 + absl::Seconds(70)).ok());
  EXPECT_FALSE(timed.Due(3, 40, t0 + absl::Seconds(129)));
  EXPECT_TRUE(timed.Due(3, 40, t0 + absl::Seconds(130)));
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

TEST(CheckpointPolicyTest, ABackgroundWriteHoldsTheStateOfTheMomentItWasStarted) {
  v1::JobSpec spec = ResumeSpec("adam");
  spec.set_checkpoint_dir(FreshDir("ck_background"));
  Dataset data = Blobs(50);
  auto r = Replica::Create(*ToTrainSpec(spec), data.dim, data.num_classes);
  ASSERT_TRUE(r.ok());
  GlobalBatchSampler sampler(50, 29, 5);
  TrainSteps(r->get(), &sampler, data, 0, 3);
  const std::vector<float> at3((*r)->params().begin(), (*r)->params().end());
  const OptimizerState opt3 = (*r)->optimizer().State();
  JobCheckpointer ck(spec, 4);
  ASSERT_TRUE(ck.Start(absl::UnixEpoch()).ok());
  absl::StatusOr<std::string> written = absl::UnknownError("not called");
  ck.WriteInBackground(**r, 3, 40, {50, 29, false}, (*r)->Hash(), absl::UnixEpoch(),
                       [&](const absl::StatusOr<std::string>& path, double capture,
                           double seconds) {
                         written = path;
                         EXPECT_GE(capture, 0);
                         EXPECT_GE(seconds, 0);
                       });
  TrainSteps(r->get(), &sampler, data, 3, 5);  // changes the replica at once
  ck.Wait();
  ASSERT_TRUE(written.ok()) << written.status();
  auto loaded = LoadCheckpoint(JobCheckpointDir(spec.checkpoint_dir(), 4), 0, CheckpointLimits{});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->path, *written);
  EXPECT_EQ(loaded->state.params, at3);
  EXPECT_EQ(loaded->state.optimizer.slots, opt3.slots);
  EXPECT_EQ(loaded->state.optimizer.steps, 3);
  EXPECT_NE(std::vector<float>((*r)->params().begin(), (*r)->params().end()), at3);
}

}  // namespace
}  // namespace lockstep
