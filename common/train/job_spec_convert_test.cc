#include "common/train/job_spec_convert.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

namespace v1 = ::lockstep::v1;

v1::JobSpec Minimal() {
  v1::JobSpec spec;
  spec.set_model("softmax");
  spec.set_sync_mode(v1::RING);
  spec.set_num_workers(2);
  spec.set_global_batch(64);
  spec.mutable_lr()->set_base_lr(0.05f);
  spec.set_epochs(2);
  return spec;
}

void ExpectInvalid(const v1::JobSpec& spec, const std::string& prefix) {
  absl::Status s = ValidateJobSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << prefix;
  EXPECT_EQ(std::string(s.message()).substr(0, prefix.size()), prefix) << s;
}

TEST(ToTrainSpecTest, ZeroValuesBecomeDocumentedDefaults) {
  absl::StatusOr<TrainSpec> t = ToTrainSpec(Minimal());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->model, "softmax");
  EXPECT_EQ(t->global_batch, 64);
  EXPECT_EQ(t->epochs, 2);
  EXPECT_EQ(t->steps, 0);
  EXPECT_EQ(t->seed, 0u);
  EXPECT_EQ(t->optimizer.kind, "sgd");
  EXPECT_EQ(t->optimizer.beta1, 0.9f);
  EXPECT_EQ(t->optimizer.beta2, 0.999f);
  EXPECT_EQ(t->optimizer.eps, 1e-8f);
  EXPECT_EQ(t->optimizer.momentum, 0.0f);
  EXPECT_EQ(t->lr.base_lr, 0.05f);
  EXPECT_EQ(t->lr.reference_batch, 256);
  EXPECT_EQ(t->lr.gamma, 0.1f);
  EXPECT_EQ(t->lr.decay, "constant");
  EXPECT_EQ(t->lr.total_steps, 0);
}

TEST(ToTrainSpecTest, ExplicitValuesAreKept) {
  v1::JobSpec spec = Minimal();
  spec.set_steps(500);
  spec.set_seed(77);
  spec.mutable_optimizer()->set_kind("adamw");
  spec.mutable_optimizer()->set_beta1(0.8f);
  spec.mutable_optimizer()->set_beta2(0.99f);
  spec.mutable_optimizer()->set_eps(1e-6f);
  spec.mutable_optimizer()->set_weight_decay(0.01f);
  spec.mutable_lr()->set_linear_scaling(true);
  spec.mutable_lr()->set_reference_batch(32);
  spec.mutable_lr()->set_warmup_steps(10);
  spec.mutable_lr()->set_warmup_start_factor(0.5f);
  spec.mutable_lr()->set_decay("cosine");
  spec.mutable_lr()->set_min_lr(0.001f);
  absl::StatusOr<TrainSpec> t = ToTrainSpec(spec);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->steps, 500);
  EXPECT_EQ(t->seed, 77u);
  EXPECT_EQ(t->optimizer.kind, "adamw");
  EXPECT_EQ(t->optimizer.beta1, 0.8f);
  EXPECT_EQ(t->optimizer.beta2, 0.99f);
  EXPECT_EQ(t->optimizer.eps, 1e-6f);
  EXPECT_EQ(t->optimizer.weight_decay, 0.01f);
  EXPECT_TRUE(t->lr.linear_scaling);
  EXPECT_EQ(t->lr.reference_batch, 32);
  EXPECT_EQ(t->lr.warmup_steps, 10);
  EXPECT_EQ(t->lr.warmup_start_factor, 0.5f);
  EXPECT_EQ(t->lr.decay, "cosine");
  EXPECT_EQ(t->lr.total_steps, 500);  // cosine with a fixed step count
  EXPECT_EQ(t->lr.min_lr, 0.001f);
}

TEST(ToTrainSpecTest, StepDecayGamma) {
  v1::JobSpec spec = Minimal();
  spec.mutable_lr()->set_decay("step");
  spec.mutable_lr()->set_step_size(100);
  absl::StatusOr<TrainSpec> t = ToTrainSpec(spec);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->lr.gamma, 0.1f);
  EXPECT_EQ(t->lr.step_size, 100);
  spec.mutable_lr()->set_gamma(0.5f);
  EXPECT_EQ(ToTrainSpec(spec)->lr.gamma, 0.5f);
  spec.mutable_lr()->set_step_size(0);
  EXPECT_EQ(ToTrainSpec(spec).status().message(),
            "spec.lr.step_size: expected > 0 for decay \"step\", got 0");
}

TEST(ToTrainSpecTest, EpochBasedCosineLeavesTotalStepsToTheWorker) {
  v1::JobSpec spec = Minimal();
  spec.mutable_lr()->set_decay("cosine");
  spec.mutable_lr()->set_warmup_steps(1000);
  absl::StatusOr<TrainSpec> t = ToTrainSpec(spec);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->lr.total_steps, 0);
  // With a fixed step count the check is made at once.
  spec.set_steps(500);
  EXPECT_EQ(ToTrainSpec(spec).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ToTrainSpec(spec).status().message().substr(0, 22), "spec.lr.total_steps: e");
}

TEST(ToTrainSpecTest, TrainSpecErrorsNameTheJobSpecField) {
  v1::JobSpec spec = Minimal();
  spec.mutable_optimizer()->set_momentum(1.5f);
  EXPECT_EQ(ToTrainSpec(spec).status().message(),
            "spec.optimizer.momentum: expected in [0, 1), got 1.5");
  spec = Minimal();
  spec.set_epochs(0);
  EXPECT_EQ(ToTrainSpec(spec).status().message(),
            "spec.epochs: expected >= 1 when steps is 0, got 0");
  spec = Minimal();
  spec.set_global_batch(1);
  EXPECT_EQ(ToTrainSpec(spec).status().message(),
            "spec.global_batch: expected >= number of workers (2), got 1");
  spec = Minimal();
  spec.mutable_optimizer()->set_kind("rmsprop");
  EXPECT_EQ(ToTrainSpec(spec).status().message().substr(0, 20), "spec.optimizer.kind:");
}

TEST(ValidateJobSpecTest, AcceptsValidSpecs) {
  EXPECT_TRUE(ValidateJobSpec(Minimal()).ok());
  v1::JobSpec spec = Minimal();
  for (const char* model : {"linear", "logistic", "softmax", "mlp:256", "mlp:512,256"}) {
    spec.set_model(model);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << model;
  }
  for (const char* ds : {"", "fashion-mnist", "mnist-dir:/data/mnist", "idx:a,b;c,d",
                         "csv:/x.csv", "libsvm:/a;/b"}) {
    spec.mutable_data()->set_dataset(ds);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ds;
  }
  spec.set_sync_mode(v1::PS);
  spec.set_ps_shards(3);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
}

TEST(ValidateJobSpecTest, WorkerLostPolicyIsFailShrinkOrWait) {
  v1::JobSpec spec = Minimal();
  EXPECT_TRUE(ValidateJobSpec(spec).ok());  // "" = fail
  spec.set_on_worker_lost("fail");
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_on_worker_lost("shrink");
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_on_worker_lost("wait");
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_wait_timeout_ms(5000);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_wait_timeout_ms(-1);
  absl::Status s = ValidateJobSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "spec.wait_timeout_ms: expected >= 0 (0 = 10 minutes), got -1");
  spec.set_wait_timeout_ms(0);
  spec.set_on_worker_lost("restart");
  s = ValidateJobSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "spec.on_worker_lost: expected fail, shrink or wait, got \"restart\"");
}

TEST(ValidateJobSpecTest, StallTimeoutIsZeroOrInItsRange) {
  v1::JobSpec spec = Minimal();
  for (int64_t ok : {int64_t{0}, int64_t{100}, int64_t{12000}, int64_t{3600000}}) {
    spec.set_stall_timeout_ms(ok);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ok;
  }
  for (int64_t bad : {int64_t{-1}, int64_t{99}, int64_t{3600001}}) {
    spec.set_stall_timeout_ms(bad);
    absl::Status s = ValidateJobSpec(spec);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(s.message(), absl::StrCat("spec.stall_timeout_ms: expected 0 (the coordinator's "
                                        "--lost_after_ms) or 100..3600000, got ",
                                        bad));
  }
}

TEST(ValidateJobSpecTest, PeerTransportDefaultsToGrpcAndAcceptsTcp) {
  v1::JobSpec spec = Minimal();
  EXPECT_EQ(spec.peer_transport(), v1::GRPC);  // the proto3 zero value
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_peer_transport(v1::TCP);
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec.set_sync_mode(v1::PS);  // ignored in ps mode, still a valid value
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  // The transport does not change the training arithmetic.
  absl::StatusOr<TrainSpec> grpc = ToTrainSpec(Minimal());
  absl::StatusOr<TrainSpec> tcp = ToTrainSpec(spec);
  ASSERT_TRUE(grpc.ok() && tcp.ok());
  EXPECT_EQ(tcp->model, grpc->model);
  EXPECT_EQ(tcp->global_batch, grpc->global_batch);
}

TEST(ValidateJobSpecTest, RejectsWithFieldNames) {
  v1::JobSpec spec = Minimal();
  spec.set_sync_mode(v1::SYNC_MODE_UNSPECIFIED);
  ExpectInvalid(spec, "spec.sync_mode: expected RING or PS, got SYNC_MODE_UNSPECIFIED");
  spec = Minimal();
  spec.set_peer_transport(static_cast<v1::PeerTransport>(3));
  ExpectInvalid(spec, "spec.peer_transport: expected GRPC, TCP or SHM, got 3");
  spec.set_peer_transport(static_cast<v1::PeerTransport>(-1));
  ExpectInvalid(spec, "spec.peer_transport: expected GRPC, TCP or SHM, got -1");
  spec = Minimal();
  spec.set_ps_transport(v1::SHM);
  ExpectInvalid(spec, "spec.ps_transport: expected GRPC or TCP, got 2");
  spec = Minimal();
  spec.set_num_workers(-1);
  ExpectInvalid(spec, "spec.num_workers: expected >= 1, got -1");
  spec = Minimal();
  spec.set_global_batch(1);
  ExpectInvalid(spec, "spec.global_batch: expected >= spec.num_workers (2), got 1");
  spec = Minimal();
  spec.mutable_lr()->set_base_lr(0);
  ExpectInvalid(spec, "spec.lr.base_lr: expected finite and > 0, got 0");
  spec = Minimal();
  spec.set_model("resnet");
  ExpectInvalid(spec, "spec.model: unknown model \"resnet\" (expected");
  spec.set_model("");
  ExpectInvalid(spec, "spec.model: unknown model \"\"");
  spec.set_model("mlp:0");
  ExpectInvalid(spec, "spec.model \"mlp:0\": hidden layer width \"0\" is not a positive integer");
  spec = Minimal();
  spec.mutable_data()->set_dataset("cifar");
  ExpectInvalid(spec, "spec.data.dataset: unknown dataset \"cifar\" (expected");
  spec.mutable_data()->set_dataset("csv:");
  ExpectInvalid(spec, "spec.data.dataset: \"csv:\" has no path after \"csv:\"");
  spec = Minimal();
  spec.mutable_data()->set_normalize("zscore");
  ExpectInvalid(spec, "spec.data.normalize: expected");
  spec = Minimal();
  spec.mutable_data()->set_num_classes(-2);
  ExpectInvalid(spec, "spec.data.num_classes: expected >= -1");
  spec = Minimal();
  spec.set_ps_shards(-1);
  ExpectInvalid(spec, "spec.ps_shards: expected >= 0");
  spec = Minimal();
  spec.set_bucket_bytes(-2);
  ExpectInvalid(spec, "spec.bucket_bytes: expected -1 (no overlap), 0 (default) or > 0, got -2");
  spec = Minimal();
  spec.set_compression("int8");
  ExpectInvalid(spec, "spec.compression: expected none, bf16 or fp16, got \"int8\"");
  for (const char* ok : {"", "none", "bf16", "fp16"}) {  // ring and ps alike
    for (auto mode : {v1::RING, v1::PS}) {
      spec.set_compression(ok);
      spec.set_sync_mode(mode);
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ok << " " << mode;
    }
  }
  spec = Minimal();
  spec.set_ring_algorithm("tree");
  ExpectInvalid(spec, "spec.ring_algorithm: expected auto, ring or direct, got \"tree\"");
  for (const char* ok : {"", "auto", "ring", "direct"}) {
    spec.set_ring_algorithm(ok);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ok;
  }
  spec.set_sync_mode(v1::PS);
  ExpectInvalid(spec, "spec.ring_algorithm: direct is for ring jobs only");
  spec.set_ring_algorithm("auto");
  EXPECT_TRUE(ValidateJobSpec(spec).ok());
  spec = Minimal();
  spec.set_steps(-5);
  ExpectInvalid(spec, "spec.steps: expected >= 0, got -5");
}

TEST(PsShardsTest, ZeroMeansOne) {
  v1::JobSpec spec = Minimal();
  EXPECT_EQ(PsShards(spec), 1);
  spec.set_ps_shards(4);
  EXPECT_EQ(PsShards(spec), 4);
}

}  // namespace
}  // namespace lockstep
