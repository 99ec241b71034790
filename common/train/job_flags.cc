#include "common/train/job_flags.h"

#include <fstream>
#include <initializer_list>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

ABSL_FLAG(std::string, job_file, "",
          "A lockstep.v1.JobSpec in protobuf text format; flags given on the "
          "command line override its fields");
ABSL_FLAG(std::string, name, "", "Job name shown in listings");
ABSL_FLAG(std::string, model, "mlp:256",
          "linear | logistic | softmax | mlp:H1[,H2...] (ReLU hidden layers)");
ABSL_FLAG(std::string, dataset, "fashion-mnist",
          "fashion-mnist | mnist-dir:DIR | idx:IMAGES,LABELS[;TEST_IMAGES,TEST_LABELS] | "
          "csv:TRAIN[;TEST] | libsvm:TRAIN[;TEST]");
ABSL_FLAG(std::string, normalize, "",
          "none | scale255 | minmax | standardize (default: scale255 for IDX data, "
          "none for csv/libsvm)");
ABSL_FLAG(int32_t, label_column, 0, "csv: label column (negative counts from the end)");
ABSL_FLAG(std::string, csv_header, "auto", "csv: auto | yes | no");
ABSL_FLAG(int64_t, dim, 0, "libsvm: number of features (0 = largest index seen)");
ABSL_FLAG(int32_t, num_classes, 0, "0 = infer from labels, -1 = regression targets");
ABSL_FLAG(std::string, libsvm_labels, "auto", "libsvm: auto | signed | class");
ABSL_FLAG(std::string, sync, "ring", "ring | ps: how the workers combine gradients");
ABSL_FLAG(std::string, peer_transport, "tcp",
          "tcp | grpc | shm: ring mode's peer data plane (tcp, the default: raw sockets to "
          "each worker's --data_port, authenticated with the job's secret, encrypted only "
          "with the workers' --data_plane_tls; grpc: each worker's gRPC server, encrypted "
          "whenever the daemons use TLS, slower; shm: shared memory, every worker on one "
          "host); ignored in ps mode. A --job_file that does not name it keeps the "
          "JobSpec default, grpc");
ABSL_FLAG(int64_t, bucket_bytes, 0,
          "Overlap the gradient combine with backward in buckets of this many bytes "
          "(0 = default: off; -1 = off: combine after backward; 262144 = 4 buckets for "
          "mlp:256)");
ABSL_FLAG(std::string, compression, "none",
          "Gradient compression on the wire: none | bf16 | fp16 (float32 "
          "accumulation; ring and ps jobs)");
ABSL_FLAG(std::string, ring_algorithm, "auto",
          "auto | ring | direct: ring mode's all-reduce (auto: direct while (K-1) x the "
          "gradient is at most 1 MiB, else ring; ring jobs only)");
ABSL_FLAG(std::string, ps_transport, "tcp",
          "tcp | grpc: ps mode's data plane (tcp, the default: raw sockets to each shard's "
          "data port, authenticated with the job's secret, encrypted only with "
          "--data_plane_tls, several times faster; grpc: Push/Pull RPCs to each shard's gRPC "
          "server, encrypted whenever the daemons use TLS); ignored in ring mode. A "
          "--job_file that does not name it keeps the JobSpec default, grpc");
ABSL_FLAG(std::string, on_divergence, "repair",
          "repair | halt: when a replica's weights or optimizer state drift from the "
          "majority's, copy a majority rank's state into it at a step boundary and continue "
          "(repair; no majority: FAILED), or end the job FAILED naming the step, rank and "
          "first differing block (halt)");
ABSL_FLAG(std::string, on_nonfinite, "fail",
          "fail | skip: when a rank's gradient has a NaN or Inf, end the job FAILED naming "
          "the rank and step (fail), or skip that step's update on every replica and count "
          "it (skip)");
ABSL_FLAG(std::string, on_worker_lost, "fail",
          "fail: when a worker of the job is lost (no heartbeat for the coordinator's "
          "--lost_after_ms, 3 s by default), end the job FAILED naming the worker, rank and "
          "host; shrink: the survivors regroup without it and continue from the last step "
          "every replica completed with the same global batch, and grow back to --workers "
          "when idle workers appear; wait: the job pauses until an idle worker takes the lost "
          "rank's place (it receives a peer's weights and optimizer state), at most "
          "--wait_timeout_ms");
ABSL_FLAG(int64_t, wait_timeout_ms, 0,
          "--on_worker_lost=wait: how long a job waits for a worker to replace a lost rank "
          "before it ends FAILED naming the rank (0 = 600000, 10 minutes)");
ABSL_FLAG(int64_t, stall_timeout_ms, 0,
          "how long every rank may wait for a peer or ps shard (counted from the last bytes "
          "moved) while every worker heartbeats before the job ends FAILED as stuck (0 = the "
          "coordinator's --lost_after_ms, 3 s by default; else 100..3600000): raise it for a "
          "job on a slow link. Values above the workers' --combine_timeout_ms (30 s) change "
          "nothing (a combine ends there); values below the time one message takes (a gRPC ring "
          "segment, up to 2 MiB; a whole shard's push or pull over --ps_transport=grpc) can fail "
          "a healthy job");
ABSL_FLAG(int32_t, workers, 4, "Number of workers K");
ABSL_FLAG(int32_t, ps_shards, 1, "ps mode: number of parameter-server shards S");
ABSL_FLAG(int64_t, batch, 128, "Global batch B: examples per step over all workers");
ABSL_FLAG(int64_t, epochs, 10, "Passes over the training set (when --steps is 0)");
ABSL_FLAG(int64_t, steps, 0, "Exact number of steps (0 = use --epochs)");
ABSL_FLAG(uint64_t, seed, 1, "Initialisation and sampling seed");
ABSL_FLAG(std::string, optimizer, "sgd", "sgd | adam | adamw");
ABSL_FLAG(float, momentum, 0.9f, "sgd momentum in [0,1) (not applied to adam/adamw)");
ABSL_FLAG(bool, nesterov, false, "sgd: Nesterov momentum");
ABSL_FLAG(float, weight_decay, 0.0f, "Weight decay (L2; decoupled for adamw)");
ABSL_FLAG(float, beta1, 0.9f, "adam beta1");
ABSL_FLAG(float, beta2, 0.999f, "adam beta2");
ABSL_FLAG(float, eps, 1e-8f, "adam epsilon");
ABSL_FLAG(float, lr, 0.05f, "Base learning rate");
ABSL_FLAG(bool, linear_scaling, false,
          "Scale the rate by B / --reference_batch (Goyal et al.)");
ABSL_FLAG(int64_t, reference_batch, 256, "Reference batch of --linear_scaling");
ABSL_FLAG(int64_t, warmup_steps, 0, "Linear warm-up steps");
ABSL_FLAG(float, warmup_start_factor, 0.0f, "Warm-up starts at peak rate x this");
ABSL_FLAG(std::string, decay, "cosine",
          "constant | step | cosine (cosine: to --min_lr at the last step)");
ABSL_FLAG(int64_t, step_size, 0, "step decay: steps between decays");
ABSL_FLAG(float, gamma, 0.1f, "step decay: factor");
ABSL_FLAG(float, min_lr, 0.0f, "cosine decay: final rate");
ABSL_FLAG(bool, eval_each_epoch, true, "Evaluate on the test split after every epoch");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Rank 0 writes checkpoints to DIR/job-<id>/step-<N>.ckpt on its host (an absolute "
          "path; shared by the workers if jobs are to resume on other hosts); empty = none. "
          "With neither interval, one checkpoint at the end");
ABSL_FLAG(int64_t, checkpoint_every_steps, 0, "Checkpoint every N steps (0 = not by steps)");
ABSL_FLAG(int64_t, checkpoint_every_seconds, 0,
          "Checkpoint when T seconds have passed since the last one (0 = not by time)");
ABSL_FLAG(int32_t, checkpoint_keep, 3, "Newest checkpoints kept per job");
ABSL_FLAG(std::string, resume_from, "",
          "Start from a checkpoint: DIR/job-<id> (its newest valid checkpoint) or "
          "DIR/job-<id>/step-<N>.ckpt; every worker reads it, so DIR must be readable by all "
          "of them. The other job flags must describe the same run (lockstep resume JOB "
          "copies them from the job)");

namespace lockstep {
namespace {

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat("line ", line + 1, " col ", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

// A flag with a fixed set of values: "" for the first (the default, stored
// as the field's empty value), the value itself for the others; else
// InvalidArgumentError "--flag: expected a, b or c, got \"x\"".
absl::StatusOr<std::string> Choice(absl::string_view flag, const std::string& value,
                                   std::initializer_list<absl::string_view> choices) {
  for (absl::string_view c : choices) {
    if (value == c) return c == *choices.begin() ? std::string() : value;
  }
  std::vector<absl::string_view> all(choices);
  const absl::string_view last = all.back();
  all.pop_back();
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": expected ",
                                                 absl::StrJoin(all, ", "), " or ", last,
                                                 ", got \"", value, "\""));
}

}  // namespace

const char* PeerTransportName(v1::PeerTransport transport) {
  switch (transport) {
    case v1::GRPC:
      return "grpc";
    case v1::TCP:
      return "tcp";
    case v1::SHM:
      return "shm";
    default:
      return "unknown";
  }
}

absl::StatusOr<v1::PeerTransport> ParsePeerTransport(const std::string& name) {
  if (name == "grpc") return v1::GRPC;
  if (name == "tcp") return v1::TCP;
  if (name == "shm") return v1::SHM;
  return absl::InvalidArgumentError(
      absl::StrCat("expected grpc, tcp or shm, got \"", name, "\""));
}

std::set<std::string> FlagsGivenOnCommandLine(int argc, char** argv) {
  std::set<std::string> given;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") break;
    if (!absl::ConsumePrefix(&a, "--") && !absl::ConsumePrefix(&a, "-")) continue;
    a = a.substr(0, a.find('='));
    if (absl::FindCommandLineFlag(a) == nullptr) {
      absl::ConsumePrefix(&a, "no");  // the --noflag form of a boolean flag
    }
    given.insert(std::string(a));
  }
  return given;
}

absl::StatusOr<v1::JobSpec> ParseJobSpecText(const std::string& text,
                                             const std::string& origin) {
  v1::JobSpec spec;
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &spec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job file ", origin, ": ", errors.first(),
                     " (expected a lockstep.v1.JobSpec in protobuf text format)"));
  }
  return spec;
}

absl::StatusOr<v1::CheckpointRef> ParseResumeFrom(const std::string& path) {
  auto fail = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected DIR/job-<id> (a job's checkpoint directory) or DIR/job-<id>/step-<N>.ckpt "
        "(one checkpoint), got \"", path, "\""));
  };
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto split = [](const std::string& s) {
    const size_t slash = s.rfind('/');
    if (slash == std::string::npos) return std::make_pair(std::string("."), s);
    return std::make_pair(slash == 0 ? std::string("/") : s.substr(0, slash), s.substr(slash + 1));
  };
  v1::CheckpointRef ref;
  auto [dir, base] = split(p);
  absl::string_view b = base;
  if (absl::ConsumePrefix(&b, "step-") && absl::ConsumeSuffix(&b, ".ckpt")) {
    int64_t step = 0;
    if (!absl::SimpleAtoi(b, &step) || step <= 0) return fail();
    ref.set_step(step);
    std::tie(dir, base) = split(dir);
    b = base;
  }
  uint64_t job = 0;
  if (!absl::ConsumePrefix(&b, "job-") || !absl::SimpleAtoi(b, &job) || job == 0) return fail();
  ref.set_checkpoint_dir(dir);
  ref.set_job_id(job);
  return ref;
}

absl::StatusOr<v1::JobSpec> JobSpecFromFlags(const std::set<std::string>& given) {
  v1::JobSpec spec;
  const std::string file = absl::GetFlag(FLAGS_job_file);
  const bool from_file = !file.empty();
  if (from_file) {
    std::ifstream in(file);
    if (!in) return absl::NotFoundError(absl::StrCat("job file ", file, ": cannot open"));
    std::stringstream buf;
    buf << in.rdbuf();
    auto parsed = ParseJobSpecText(buf.str(), file);
    if (!parsed.ok()) return parsed.status();
    spec = *std::move(parsed);
  }
  // Applies a flag unless a job file is in use and the flag was not given.
  auto use = [&](const char* flag) { return !from_file || given.count(flag) > 0; };
  v1::DataSpec* d = spec.mutable_data();
  v1::OptimizerSpec* o = spec.mutable_optimizer();
  v1::LrScheduleSpec* lr = spec.mutable_lr();
  if (use("name")) spec.set_name(absl::GetFlag(FLAGS_name));
  if (use("model")) spec.set_model(absl::GetFlag(FLAGS_model));
  if (use("dataset")) d->set_dataset(absl::GetFlag(FLAGS_dataset));
  if (use("normalize")) d->set_normalize(absl::GetFlag(FLAGS_normalize));
  if (use("label_column")) d->set_label_column(absl::GetFlag(FLAGS_label_column));
  if (use("csv_header")) d->set_csv_header(absl::GetFlag(FLAGS_csv_header));
  if (use("dim")) d->set_dim(absl::GetFlag(FLAGS_dim));
  if (use("num_classes")) d->set_num_classes(absl::GetFlag(FLAGS_num_classes));
  if (use("libsvm_labels")) d->set_libsvm_labels(absl::GetFlag(FLAGS_libsvm_labels));
  if (use("sync")) {
    const std::string sync = absl::GetFlag(FLAGS_sync);
    if (sync == "ring") {
      spec.set_sync_mode(v1::RING);
    } else if (sync == "ps") {
      spec.set_sync_mode(v1::PS);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--sync: expected ring or ps, got \"", sync, "\""));
    }
  }
  if (use("peer_transport")) {
    auto transport = ParsePeerTransport(absl::GetFlag(FLAGS_peer_transport));
    if (!transport.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--peer_transport: ", transport.status().message()));
    }
    spec.set_peer_transport(*transport);
  }
  if (use("bucket_bytes")) spec.set_bucket_bytes(absl::GetFlag(FLAGS_bucket_bytes));
  if (use("compression")) {
    auto v = Choice("compression", absl::GetFlag(FLAGS_compression), {"none", "bf16", "fp16"});
    if (!v.ok()) return v.status();
    spec.set_compression(*v);
  }
  if (use("ring_algorithm")) {
    auto v = Choice("ring_algorithm", absl::GetFlag(FLAGS_ring_algorithm),
                    {"auto", "ring", "direct"});
    if (!v.ok()) return v.status();
    spec.set_ring_algorithm(*v);
  }
  if (use("ps_transport")) {
    auto transport = ParsePeerTransport(absl::GetFlag(FLAGS_ps_transport));
    if (!transport.ok() || *transport == v1::SHM) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--ps_transport: expected grpc or tcp, got \"", absl::GetFlag(FLAGS_ps_transport),
          "\""));
    }
    spec.set_ps_transport(*transport);
  }
  if (use("on_divergence")) {
    auto v = Choice("on_divergence", absl::GetFlag(FLAGS_on_divergence), {"repair", "halt"});
    if (!v.ok()) return v.status();
    spec.set_on_divergence(*v);
  }
  if (use("on_nonfinite")) {
    auto v = Choice("on_nonfinite", absl::GetFlag(FLAGS_on_nonfinite), {"fail", "skip"});
    if (!v.ok()) return v.status();
    spec.set_on_nonfinite(*v);
  }
  if (use("on_worker_lost")) {
    auto v = Choice("on_worker_lost", absl::GetFlag(FLAGS_on_worker_lost), {"fail", "shrink", "wait"});
    if (!v.ok()) return v.status();
    spec.set_on_worker_lost(*v);
  }
  // (A negative value is refused by ValidateJobSpec, naming the field.)
  if (use("wait_timeout_ms")) spec.set_wait_timeout_ms(absl::GetFlag(FLAGS_wait_timeout_ms));
  if (use("stall_timeout_ms")) spec.set_stall_timeout_ms(absl::GetFlag(FLAGS_stall_timeout_ms));
  if (use("workers")) spec.set_num_workers(absl::GetFlag(FLAGS_workers));
  if (use("ps_shards")) spec.set_ps_shards(absl::GetFlag(FLAGS_ps_shards));
  if (use("batch")) spec.set_global_batch(absl::GetFlag(FLAGS_batch));
  if (use("epochs")) spec.set_epochs(absl::GetFlag(FLAGS_epochs));
  if (use("steps")) spec.set_steps(absl::GetFlag(FLAGS_steps));
  if (use("seed")) spec.set_seed(absl::GetFlag(FLAGS_seed));
  if (use("eval_each_epoch")) spec.set_eval_each_epoch(absl::GetFlag(FLAGS_eval_each_epoch));
  if (use("optimizer")) o->set_kind(absl::GetFlag(FLAGS_optimizer));
  // --momentum's default (0.9) is for sgd: adam/adamw take it only when
  // given explicitly (and then reject it, naming the field).
  const bool sgd = o->kind().empty() || o->kind() == "sgd";
  if (use("momentum") && (sgd || given.count("momentum") > 0)) {
    o->set_momentum(absl::GetFlag(FLAGS_momentum));
  }
  if (use("nesterov")) o->set_nesterov(absl::GetFlag(FLAGS_nesterov));
  if (use("weight_decay")) o->set_weight_decay(absl::GetFlag(FLAGS_weight_decay));
  if (use("beta1")) o->set_beta1(absl::GetFlag(FLAGS_beta1));
  if (use("beta2")) o->set_beta2(absl::GetFlag(FLAGS_beta2));
  if (use("eps")) o->set_eps(absl::GetFlag(FLAGS_eps));
  if (use("lr")) lr->set_base_lr(absl::GetFlag(FLAGS_lr));
  if (use("linear_scaling")) lr->set_linear_scaling(absl::GetFlag(FLAGS_linear_scaling));
  if (use("reference_batch")) lr->set_reference_batch(absl::GetFlag(FLAGS_reference_batch));
  if (use("warmup_steps")) lr->set_warmup_steps(absl::GetFlag(FLAGS_warmup_steps));
  if (use("warmup_start_factor")) {
    lr->set_warmup_start_factor(absl::GetFlag(FLAGS_warmup_start_factor));
  }
  if (use("decay")) lr->set_decay(absl::GetFlag(FLAGS_decay));
  if (use("step_size")) lr->set_step_size(absl::GetFlag(FLAGS_step_size));
  if (use("gamma")) lr->set_gamma(absl::GetFlag(FLAGS_gamma));
  if (use("min_lr")) lr->set_min_lr(absl::GetFlag(FLAGS_min_lr));
  if (use("checkpoint_dir")) spec.set_checkpoint_dir(absl::GetFlag(FLAGS_checkpoint_dir));
  if (use("checkpoint_every_steps")) {
    spec.set_checkpoint_every_steps(absl::GetFlag(FLAGS_checkpoint_every_steps));
  }
  if (use("checkpoint_every_seconds")) {
    spec.set_checkpoint_every_seconds(absl::GetFlag(FLAGS_checkpoint_every_seconds));
  }
  if (use("checkpoint_keep")) spec.set_checkpoint_keep(absl::GetFlag(FLAGS_checkpoint_keep));
  if (use("resume_from") && !absl::GetFlag(FLAGS_resume_from).empty()) {
    auto ref = ParseResumeFrom(absl::GetFlag(FLAGS_resume_from));
    if (!ref.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--resume_from: ", ref.status().message()));
    }
    *spec.mutable_resume_from() = *ref;
  }
  return spec;
}

}  // namespace lockstep
