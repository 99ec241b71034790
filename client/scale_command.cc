#include "client/scale_command.h"

#include <cstdio>
#include <memory>
#include <thread>

#include <unistd.h>
#include <set>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/coordinator_client.h"
#include "client/scale_report.h"
#include "client/scale_runner.h"
#include "common/grpcutil/grpc_status.h"
#include "common/collective/wire_format.h"
#include "common/scaling_model.h"
#include "common/train/job_flags.h"

ABSL_FLAG(std::string, workers_list, "1,2,4,8",
          "scale: the worker counts K to run, ascending (K above the idle workers are skipped)");
ABSL_FLAG(std::string, scaling, "weak",
          "scale: weak (--batch per worker, global batch = --batch x K) | strong (global batch "
          "--batch at every K)");
ABSL_FLAG(double, threshold, 0.8, "scale: report the first K whose efficiency is below this");
ABSL_FLAG(int32_t, repeats, 1, "scale: runs per K, interleaved; the median is reported");
ABSL_FLAG(int32_t, job_timeout_s, 600, "scale: deadline of each job, from its submission (s)");
ABSL_FLAG(double, link_gbps, 10, "scale: the model's link bandwidth, Gbit/s (> 0)");
ABSL_FLAG(double, link_latency_us, 50, "scale: the model's link latency, microseconds (>= 0)");
ABSL_FLAG(std::string, extrapolate, "16,32,64,128,256,512,1024",
          "scale: worker counts the fitted model predicts");
ABSL_FLAG(std::string, alpha_probe_model, "auto",
          "scale: after each repeat, run the job once more at the smallest K > 1 with this "
          "(smaller or larger) model, so the fit can separate alpha from beta: auto (softmax for "
          "an mlp, mlp:256 for softmax, none for linear/logistic) | none | a --model value");
ABSL_FLAG(int32_t, max_ps_shards, 64,
          "scale: the model tries ps with S = 1, 2, 4, ... up to this many shards");

namespace lockstep {
namespace {

int Exit(const absl::Status& s) {
  std::fprintf(stderr, "lockstep scale: %s: %s\n", absl::StatusCodeToString(s.code()).c_str(),
               std::string(s.message()).c_str());
  return s.code() == absl::StatusCode::kInvalidArgument ||
                 s.code() == absl::StatusCode::kFailedPrecondition
             ? 2
             : 1;
}

class GrpcScaleBackend : public ScaleBackend {
 public:
  GrpcScaleBackend(const std::string& address, int rpc_timeout_s,
                   std::shared_ptr<grpc::ChannelCredentials> credentials)
      : client_(address, absl::Seconds(std::max(1, rpc_timeout_s)), std::move(credentials)) {}

  // IDLE workers, and BUSY ones whose job has already ended: a worker turns
  // IDLE on its first heartbeat after its job (a scale run just after
  // another job would otherwise see them busy).
  absl::StatusOr<int> IdleWorkers() override {
    absl::StatusOr<v1::WorkerList> list = client_.ListWorkers();
    if (!list.ok()) return list.status();
    absl::StatusOr<v1::JobList> jobs = client_.ListJobs();
    if (!jobs.ok()) return jobs.status();
    std::set<uint64_t> ended;
    for (const v1::JobStatus& j : jobs->jobs()) {
      if (j.state() == v1::SUCCEEDED || j.state() == v1::FAILED || j.state() == v1::CANCELLED) {
        ended.insert(j.job_id());
      }
    }
    int idle = 0;
    for (const v1::WorkerInfo& w : list->workers()) {
      idle += w.state() == v1::IDLE || (w.state() == v1::BUSY && ended.count(w.job_id()) > 0);
    }
    return idle;
  }

  absl::StatusOr<uint64_t> Submit(const v1::JobSpec& spec) override {
    v1::SubmitJobRequest req;
    *req.mutable_spec() = spec;
    absl::StatusOr<v1::SubmitJobReply> reply = client_.Submit(req);
    if (!reply.ok()) return reply.status();
    return reply->job_id();
  }

  absl::StatusOr<v1::JobStatus> Get(uint64_t id) override { return client_.GetJob(id); }

  absl::Status Cancel(uint64_t id) override { return client_.Cancel(id).status(); }

  // Reads the first chunk of the final weights (its `total`) and cancels
  // the rest of the stream.
  absl::StatusOr<int64_t> ParameterCount(uint64_t id) override {
    grpc::ClientContext ctx;
    client_.SetDeadline(&ctx);
    v1::WeightsRequest req;
    req.set_job_id(id);
    auto reader = client_.stub()->GetWeights(&ctx, req);
    v1::WeightsChunk chunk;
    const bool got = reader->Read(&chunk);
    ctx.TryCancel();
    absl::Status s = FromGrpcStatus(reader->Finish());
    if (got) return chunk.total();
    return s.ok() ? absl::NotFoundError("the job has no final weights") : s;
  }

  void Sleep(absl::Duration d) override { absl::SleepFor(d); }
  absl::Time Now() override { return absl::Now(); }

 private:
  CoordinatorClient client_;
};

std::string Title(const v1::JobSpec& spec, bool weak) {
  const std::string data = spec.data().dataset().empty() ? "fashion-mnist" : spec.data().dataset();
  const std::string mode =
      spec.sync_mode() == v1::PS
          ? absl::StrCat("ps/", PeerTransportName(spec.ps_transport()), " S=",
                         std::max(1, spec.ps_shards()))
          : absl::StrCat("ring/", PeerTransportName(spec.peer_transport()));
  return absl::StrFormat("%s on %s, %s, %s %d, %d steps", spec.model(), data, mode,
                         weak ? "batch per worker" : "global batch", spec.global_batch(),
                         spec.steps());
}

}  // namespace

int ScaleCommand(const std::string& coordinator, const std::set<std::string>& given,
                 const std::string& out_prefix, int rpc_timeout_s,
                 std::shared_ptr<grpc::ChannelCredentials> credentials, bool json) {
  absl::StatusOr<v1::JobSpec> spec = JobSpecFromFlags(given);
  if (!spec.ok()) return Exit(spec.status());
  // Evaluation would stop the clock of a fixed-step run: off unless asked for.
  if (given.count("eval_each_epoch") == 0) spec->set_eval_each_epoch(false);
  ScaleOptions options;
  options.base = *spec;
  const std::string scaling_mode = absl::GetFlag(FLAGS_scaling);
  if (scaling_mode != "weak" && scaling_mode != "strong") {
    return Exit(absl::InvalidArgumentError(
        absl::StrCat("--scaling: expected weak or strong, got \"", scaling_mode, "\"")));
  }
  options.weak = scaling_mode == "weak";
  absl::StatusOr<std::vector<int>> ks = ParseKList(absl::GetFlag(FLAGS_workers_list), "workers_list");
  if (!ks.ok()) return Exit(ks.status());
  options.ks = *ks;
  options.repeats = absl::GetFlag(FLAGS_repeats);
  if (absl::GetFlag(FLAGS_job_timeout_s) < 1) {
    return Exit(absl::InvalidArgumentError("--job_timeout_s: expected >= 1"));
  }
  options.job_timeout = absl::Seconds(absl::GetFlag(FLAGS_job_timeout_s));
  const std::string probe_flag = absl::GetFlag(FLAGS_alpha_probe_model);
  options.probe_model = ProbeModelFor(probe_flag, spec->model());
  if (!options.probe_model.empty() && options.probe_model == spec->model()) {
    return Exit(absl::InvalidArgumentError(absl::StrCat(
        "--alpha_probe_model: expected a model with a different gradient size than --model=",
        spec->model(), " (or none)")));
  }
  const double threshold = absl::GetFlag(FLAGS_threshold);
  if (!(threshold > 0 && threshold <= 1)) {
    return Exit(absl::InvalidArgumentError(
        absl::StrCat("--threshold: expected a value in (0, 1], got ", threshold)));
  }
  ModelOptions model;
  model.mode = spec->sync_mode();
  model.ps_shards = spec->ps_shards();
  // Compressed jobs move 2 bytes per value (the flags checked the name).
  absl::StatusOr<WireFormat> wire = ParseWireFormat(spec->compression());
  if (!wire.ok()) {
    return Exit(absl::InvalidArgumentError(
        absl::StrCat("--compression: ", wire.status().message())));
  }
  model.bytes_per_value = static_cast<int>(WireBytesPerFloat(*wire));
  const double gbps = absl::GetFlag(FLAGS_link_gbps);
  const double latency_us = absl::GetFlag(FLAGS_link_latency_us);
  if (!(gbps > 0) || !(latency_us >= 0)) {
    return Exit(absl::InvalidArgumentError(absl::StrCat(
        "--link_gbps / --link_latency_us: expected > 0 and >= 0, got ", gbps, ", ", latency_us)));
  }
  model.link.bandwidth_bytes_per_second = gbps * 1e9 / 8;
  model.link.latency_seconds = latency_us * 1e-6;
  absl::StatusOr<std::vector<int>> ext = ParseKList(absl::GetFlag(FLAGS_extrapolate), "extrapolate");
  if (!ext.ok()) return Exit(ext.status());
  model.extrapolate = *ext;
  model.max_ps_shards = absl::GetFlag(FLAGS_max_ps_shards);
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) model.local_host = host;
  model.local_cpus = static_cast<int>(std::thread::hardware_concurrency());
  if (model.max_ps_shards < 1) {
    return Exit(absl::InvalidArgumentError("--max_ps_shards: expected >= 1"));
  }
  const std::string prefix = out_prefix.empty() ? "scale" : out_prefix;

  GrpcScaleBackend backend(coordinator, rpc_timeout_s, credentials);
  absl::StatusOr<ScaleRun> run = RunScale(&backend, options, [](const std::string& line) {
    std::fprintf(stderr, "lockstep scale: %s\n", line.c_str());
  });
  if (!run.ok()) return Exit(run.status());

  ScaleReport report;
  report.title = Title(*spec, options.weak);
  report.date = absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone());
  report.weak = options.weak;
  report.threshold = threshold;
  report.rows = scaling::Summarize(run->measurements);
  report.skipped = run->skipped;
  report.first_below = scaling::FirstKBelow(report.rows, threshold);
  model.parameter_count = run->parameter_count;
  model.probe = run->probe;
  if (probe_flag == "auto" && options.probe_model.empty()) {
    model.probe.note = absl::StrCat("no alpha probe for --model=", spec->model(),
                                    ": name one with --alpha_probe_model");
  }
  AddModel(&report, model);
  if (!report.has_model && !run->parameter_note.empty()) report.model_note = run->parameter_note;
  report.link = absl::StrFormat("%g Gbit/s, %g us", gbps, latency_us);

  const std::string csv = prefix + ".csv", svg = prefix + ".svg", model_csv = prefix + ".model.csv";
  for (const auto& [path, text] :
       {std::pair<std::string, std::string>{csv, ScaleCsv(report.rows)},
        {svg, ScaleSvg(report)},
        {model_csv, ModelCsv(report.predictions)}}) {
    absl::Status s = WriteTextFile(path, text);
    if (!s.ok()) return Exit(s);
  }
  if (json) {
    std::printf("%s", ScaleJson(report, {csv, svg, model_csv}).c_str());
    return 0;
  }
  std::printf("%s", ScaleTable(report).c_str());
  std::printf("wrote %s, %s, %s\n", csv.c_str(), svg.c_str(), model_csv.c_str());
  return 0;
}

}  // namespace lockstep
