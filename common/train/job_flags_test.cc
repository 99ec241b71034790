#include "common/train/job_flags.h"

#include <cstdlib>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::string TmpFile(const std::string& name, const std::string& text) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// Parses a command line the way main() does.
absl::StatusOr<v1::JobSpec> FromArgs(std::vector<std::string> args) {
  args.insert(args.begin(), "lockstep");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  absl::ParseCommandLine(static_cast<int>(argv.size()), argv.data());
  return JobSpecFromFlags(FlagsGivenOnCommandLine(static_cast<int>(argv.size()), argv.data()));
}

TEST(JobFlagsTest, DefaultsAreTheMainJob) {
  auto spec = FromArgs({});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model(), "mlp:256");
  EXPECT_EQ(spec->data().dataset(), "fashion-mnist");
  EXPECT_EQ(spec->sync_mode(), v1::RING);
  EXPECT_EQ(spec->num_workers(), 4);
  EXPECT_EQ(spec->global_batch(), 128);
  EXPECT_EQ(spec->lr().decay(), "cosine");
  // Both data planes default to raw TCP (the fast path); the JobSpec's own
  // default (a job file that names neither) stays GRPC = 0 for old clients.
  EXPECT_EQ(spec->peer_transport(), v1::TCP);
  EXPECT_EQ(spec->ps_transport(), v1::TCP);
  EXPECT_EQ(v1::JobSpec().peer_transport(), v1::GRPC);
  EXPECT_EQ(v1::JobSpec().ps_transport(), v1::GRPC);
}

TEST(JobFlagsTest, JobFileWithCommandLineOverrides) {
  const std::string file = TmpFile("job.txt", R"(
    name: "from-file"
    model: "softmax"
    sync_mode: PS
    num_workers: 3
    global_batch: 96
    lr { base_lr: 0.2 decay: "step" step_size: 100 }
  )");
  auto spec = FromArgs({"--job_file=" + file, "--workers=2", "--lr=0.3"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "from-file");
  EXPECT_EQ(spec->model(), "softmax");          // from the file
  EXPECT_EQ(spec->sync_mode(), v1::PS);         // from the file
  EXPECT_EQ(spec->global_batch(), 96);          // from the file, not the flag default
  EXPECT_EQ(spec->num_workers(), 2);            // overridden
  EXPECT_FLOAT_EQ(spec->lr().base_lr(), 0.3f);  // overridden
  EXPECT_EQ(spec->lr().decay(), "step");        // from the file
  absl::SetFlag(&FLAGS_job_file, "");
}

TEST(JobFlagsTest, BadJobFileNamesFileAndLine) {
  const std::string file = TmpFile("bad.txt", "model: \"softmax\"\nnum_workerz: 3\n");
  auto spec = FromArgs({"--job_file=" + file});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find(file + ": line 2"), std::string::npos) << spec.status();
  spec = FromArgs({"--job_file=/nonexistent/job.txt"});
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  absl::SetFlag(&FLAGS_job_file, "");
}

TEST(JobFlagsTest, AdamDoesNotInheritTheSgdMomentumDefault) {
  auto spec = FromArgs({"--optimizer=adam", "--lr=0.001"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->optimizer().kind(), "adam");
  EXPECT_EQ(spec->optimizer().momentum(), 0.0f);
  spec = FromArgs({"--optimizer=adam", "--momentum=0.5"});
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->optimizer().momentum(), 0.5f);  // given: kept, rejected later by validation
  absl::SetFlag(&FLAGS_optimizer, "sgd");
  absl::SetFlag(&FLAGS_momentum, 0.9f);
}

TEST(JobFlagsTest, BadSyncModeNamesTheFlag) {
  auto spec = FromArgs({"--sync=tree"});
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spec.status().message().find("--sync"), std::string::npos);
  absl::SetFlag(&FLAGS_sync, "ring");
}

TEST(JobFlagsTest, OnWorkerLostFlag) {
  auto spec = FromArgs({"--on_worker_lost=shrink"});
  ASSERT_TRUE(spec.ok()) << spec.status();  // parsed; the coordinator refuses it
  EXPECT_EQ(spec->on_worker_lost(), "shrink");
  spec = FromArgs({"--on_worker_lost=fail"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->on_worker_lost(), "");  // the default, written as the zero value
  spec = FromArgs({"--on_worker_lost=retry"});
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(),
            "--on_worker_lost: expected fail, shrink or wait, got \"retry\"");
  ASSERT_TRUE(FromArgs({"--on_worker_lost=fail"}).ok());
  spec = FromArgs({"--on_worker_lost=wait", "--wait_timeout_ms=2500"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->on_worker_lost(), "wait");
  EXPECT_EQ(spec->wait_timeout_ms(), 2500);
  ASSERT_TRUE(FromArgs({"--on_worker_lost=fail", "--wait_timeout_ms=0"}).ok());  // defaults back
  spec = FromArgs({"--stall_timeout_ms=12000"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->stall_timeout_ms(), 12000);
  spec = FromArgs({"--stall_timeout_ms=0"});  // defaults back
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->stall_timeout_ms(), 0);
}

TEST(JobFlagsTest, PeerTransportFlag) {
  auto spec = FromArgs({"--peer_transport=tcp"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->peer_transport(), v1::TCP);
  spec = FromArgs({"--peer_transport=grpc"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->peer_transport(), v1::GRPC);
  spec = FromArgs({"--peer_transport=shm"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->peer_transport(), v1::SHM);
  spec = FromArgs({"--peer_transport=TCP"});
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(), "--peer_transport: expected grpc, tcp or shm, got \"TCP\"");
  spec = FromArgs({"--peer_transport=quic"});
  EXPECT_EQ(spec.status().message(), "--peer_transport: expected grpc, tcp or shm, got \"quic\"");
  absl::SetFlag(&FLAGS_peer_transport, "tcp");
  // The ps data plane has no shared-memory transport.
  spec = FromArgs({"--ps_transport=shm"});
  EXPECT_EQ(spec.status().message(), "--ps_transport: expected grpc or tcp, got \"shm\"");
  absl::SetFlag(&FLAGS_ps_transport, "tcp");
}

TEST(JobFlagsTest, OverlapAndCompressionFlags) {
  auto spec = FromArgs({});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->bucket_bytes(), 0);
  EXPECT_EQ(spec->compression(), "");
  spec = FromArgs({"--bucket_bytes=-1", "--compression=bf16"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->bucket_bytes(), -1);
  EXPECT_EQ(spec->compression(), "bf16");
  spec = FromArgs({"--compression=int8"});
  EXPECT_EQ(spec.status().message(), "--compression: expected none, bf16 or fp16, got \"int8\"");
  absl::SetFlag(&FLAGS_bucket_bytes, 0);
  absl::SetFlag(&FLAGS_compression, "none");
}

TEST(JobFlagsTest, RingAlgorithmFlag) {
  auto spec = FromArgs({});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ring_algorithm(), "");
  for (const char* a : {"ring", "direct"}) {
    spec = FromArgs({absl::StrCat("--ring_algorithm=", a)});
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->ring_algorithm(), a);
  }
  spec = FromArgs({"--ring_algorithm=auto"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ring_algorithm(), "");
  spec = FromArgs({"--ring_algorithm=tree"});
  EXPECT_EQ(spec.status().message(), "--ring_algorithm: expected auto, ring or direct, got \"tree\"");
  absl::SetFlag(&FLAGS_ring_algorithm, "auto");
}

TEST(JobFlagsTest, PeerTransportFromJobFileAndOverride) {
  const std::string file = TmpFile("tcp.txt", "model: \"softmax\"\npeer_transport: TCP\n");
  auto spec = FromArgs({"--job_file=" + file});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->peer_transport(), v1::TCP);  // the flag default does not override
  spec = FromArgs({"--job_file=" + file, "--peer_transport=grpc"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->peer_transport(), v1::GRPC);
  absl::SetFlag(&FLAGS_job_file, "");
  absl::SetFlag(&FLAGS_peer_transport, "tcp");
}

TEST(JobFlagsTest, PeerTransportNamesRoundTrip) {
  for (v1::PeerTransport t : {v1::GRPC, v1::TCP, v1::SHM}) {
    auto parsed = ParsePeerTransport(PeerTransportName(t));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_STREQ(PeerTransportName(v1::GRPC), "grpc");
  EXPECT_STREQ(PeerTransportName(v1::TCP), "tcp");
  EXPECT_STREQ(PeerTransportName(v1::SHM), "shm");
  EXPECT_STREQ(PeerTransportName(static_cast<v1::PeerTransport>(9)), "unknown");
  EXPECT_EQ(ParsePeerTransport("").status().message(), "expected grpc, tcp or shm, got \"\"");
}

TEST(JobFlagsTest, GivenFlagsAreFound) {
  std::vector<std::string> args = {"lockstep", "--lr=0.1", "--nonesterov", "--batch", "64",
                                   "submit"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  auto given = FlagsGivenOnCommandLine(static_cast<int>(argv.size()), argv.data());
  EXPECT_EQ(given, (std::set<std::string>{"lr", "nesterov", "batch"}));
}

}  // namespace
}  // namespace lockstep
