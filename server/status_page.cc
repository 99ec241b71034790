#include "server/status_page.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"
#include "server/job_series.h"
#include "server/status_page_assets.h"

namespace lockstep {
namespace {

constexpr char kJson[] = "application/json; charset=utf-8";

// A JSON string literal (quotes included).
std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (u < 0x20) {
          out += absl::StrFormat("\\u%04x", u);
        } else {
          out += c;
        }
    }
  }
  out += "\"";
  return out;
}

// A double as JSON: null when not finite (JSON has no NaN/Infinity).
std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.9g", v);
}

HttpResponse WithNoStore(HttpResponse r) {
  r.headers["Cache-Control"] = "no-store";
  return r;
}

HttpResponse JsonResponse(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.content_type = kJson;
  r.body = std::move(body);
  return WithNoStore(std::move(r));
}

HttpResponse JsonError(int status, absl::string_view message) {
  return JsonResponse(status, absl::StrCat("{\"error\":", JsonString(message), "}\n"));
}

// 404 for NOT_FOUND, 400 for INVALID_ARGUMENT, 500 otherwise.
HttpResponse StatusError(const absl::Status& s) {
  int code = 500;
  if (absl::IsNotFound(s)) code = 404;
  if (absl::IsInvalidArgument(s)) code = 400;
  return JsonError(code, s.message());
}

absl::StatusOr<std::string> ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  const auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print ", message.GetTypeName(), " as JSON: ", status.ToString()));
  }
  return out;
}

HttpResponse ProtoResponse(const google::protobuf::Message& message) {
  absl::StatusOr<std::string> json = ToJson(message);
  if (!json.ok()) return StatusError(json.status());
  return JsonResponse(200, *json + "\n");
}

// `value` quoted for an error message (escaped, at most 64 bytes shown).
std::string Quoted(absl::string_view value) {
  const bool cut = value.size() > 64;
  return absl::StrCat("\"", absl::CEscape(value.substr(0, 64)), cut ? "...\"" : "\"");
}

// Query parameter `name` as an integer >= `min`; `fallback` when absent
// (nullopt: the parameter is required). Errors name the parameter.
absl::StatusOr<int64_t> IntParam(const HttpRequest& request, const std::string& name,
                                 int64_t min, absl::string_view expected,
                                 std::optional<int64_t> fallback = std::nullopt) {
  const auto it = request.query.find(name);
  if (it == request.query.end()) {
    if (fallback.has_value()) return *fallback;
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": missing (expected ?", name, "=N, ", expected, ")"));
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(it->second, &v) || v < min) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": expected ", expected, ", got ", Quoted(it->second)));
  }
  return v;
}

absl::StatusOr<uint64_t> JobIdParam(const HttpRequest& request) {
  absl::StatusOr<int64_t> id = IntParam(request, "id", 1, "a job id (a positive integer)");
  if (!id.ok()) return id.status();
  return static_cast<uint64_t>(*id);
}

// "name":[v0,v1,...] from the points' field `f`.
template <typename T, typename F>
std::string Column(absl::string_view name, const std::vector<T>& points, F f) {
  std::string out = absl::StrCat(JsonString(name), ":[");
  for (size_t i = 0; i < points.size(); ++i) {
    if (i > 0) out += ",";
    out += f(points[i], i);
  }
  out += "]";
  return out;
}

const char* ContentType(absl::string_view name) {
  if (absl::EndsWith(name, ".html")) return "text/html; charset=utf-8";
  if (absl::EndsWith(name, ".js")) return "text/javascript; charset=utf-8";
  if (absl::EndsWith(name, ".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

}  // namespace

StatusPage::StatusPage(Coordinator* coordinator, StatusPageOptions options)
    : coordinator_(coordinator), options_(options) {}

std::vector<std::string> StatusPage::Paths() {
  return {"/",          "/static/app.js", "/static/style.css", "/api/workers",
          "/api/jobs", "/api/job",       "/api/sync",         "/api/curve"};
}

HttpResponse StatusPage::Handle(const HttpRequest& request) const {
  const std::string& path = request.path;
  if (path == "/") return Asset("index.html");
  if (path == "/static/app.js") return Asset("app.js");
  if (path == "/static/style.css") return Asset("style.css");
  if (path == "/api/workers") return Workers();
  if (path == "/api/jobs") return Jobs();
  if (path == "/api/job") return Job(request);
  if (path == "/api/sync") return Sync(request);
  if (path == "/api/curve") return Curve(request);
  if (absl::StartsWith(path, "/api/")) {
    return JsonError(404, absl::StrCat("no such endpoint ", Quoted(path)));
  }
  HttpResponse r;
  r.status = 404;
  r.body = absl::StrCat("not found: ", path, "\n");
  return WithNoStore(std::move(r));
}

HttpResponse StatusPage::Asset(const std::string& name) const {
  for (size_t i = 0; i < kStatusPageAssetCount; ++i) {
    const EmbeddedAsset& a = kStatusPageAssets[i];
    if (name != a.name) continue;
    HttpResponse r;
    r.content_type = ContentType(name);
    r.body.assign(a.data, a.size);
    return WithNoStore(std::move(r));
  }
  HttpResponse r;
  r.status = 500;
  r.body = absl::StrCat("status page asset ", name, " is not embedded in this binary\n");
  return r;
}

HttpResponse StatusPage::Workers() const { return ProtoResponse(coordinator_->ListWorkers()); }

HttpResponse StatusPage::Jobs() const {
  const v1::JobList list = coordinator_->ListJobs();
  const int n = list.jobs_size();
  const int first = std::max(0, n - std::max(1, options_.max_jobs));
  std::vector<std::string> jobs;
  for (int i = first; i < n; ++i) {
    absl::StatusOr<std::string> json = ToJson(list.jobs(i));
    if (!json.ok()) return StatusError(json.status());
    jobs.push_back(*std::move(json));
  }
  return JsonResponse(200, absl::StrCat("{\"total_jobs\":", n, ",\"jobs\":[",
                                        absl::StrJoin(jobs, ","), "]}\n"));
}

HttpResponse StatusPage::Job(const HttpRequest& request) const {
  absl::StatusOr<uint64_t> id = JobIdParam(request);
  if (!id.ok()) return StatusError(id.status());
  absl::StatusOr<v1::JobStatus> job = coordinator_->GetJob(*id);
  if (!job.ok()) return StatusError(job.status());
  return ProtoResponse(*job);
}

HttpResponse StatusPage::Sync(const HttpRequest& request) const {
  absl::StatusOr<uint64_t> id = JobIdParam(request);
  if (!id.ok()) return StatusError(id.status());
  const int64_t cap = std::max<int64_t>(1, options_.max_sync_entries);
  absl::StatusOr<int64_t> max = IntParam(
      request, "max", 1, absl::StrCat("a positive integer (at most ", cap, " are returned)"),
      std::min(cap, std::max<int64_t>(1, options_.default_sync_entries)));
  if (!max.ok()) return StatusError(max.status());
  absl::StatusOr<v1::SyncHistory> history = coordinator_->GetSyncHistory(*id, std::min(*max, cap));
  if (!history.ok()) return StatusError(history.status());
  absl::StatusOr<JobSeriesSnapshot> series = coordinator_->GetJobSeries(*id);
  if (!series.ok()) return StatusError(series.status());
  absl::StatusOr<std::string> history_json = ToJson(*history);
  if (!history_json.ok()) return StatusError(history_json.status());
  const std::vector<SyncCell>& cells = series->sync;
  auto num = [](int64_t v) { return absl::StrCat(v); };
  const std::string strip = absl::StrCat(
      "{\"checks_per_cell\":", series->checks_per_cell,
      ",\"checks_offered\":", series->checks_offered, ",",
      Column("first_step", cells, [&](const SyncCell& c, size_t) { return num(c.first_step); }),
      ",",
      Column("last_step", cells, [&](const SyncCell& c, size_t) { return num(c.last_step); }),
      ",", Column("checks", cells, [&](const SyncCell& c, size_t) { return num(c.checks); }),
      ",",
      Column("mismatches", cells, [&](const SyncCell& c, size_t) { return num(c.mismatches); }),
      "}");
  return JsonResponse(200,
                      absl::StrCat("{\"history\":", *history_json, ",\"strip\":", strip, "}\n"));
}

HttpResponse StatusPage::Curve(const HttpRequest& request) const {
  absl::StatusOr<uint64_t> id = JobIdParam(request);
  if (!id.ok()) return StatusError(id.status());
  absl::StatusOr<JobSeriesSnapshot> series = coordinator_->GetJobSeries(*id);
  if (!series.ok()) return StatusError(series.status());
  const std::vector<LossPoint>& loss = series->loss;
  const std::vector<EvalPoint>& eval = series->eval;
  // Examples per second between consecutive kept points (null for the
  // first point, whose interval includes start-up, and for no time passed).
  auto window_rate = [&loss](const LossPoint& p, size_t i) -> std::string {
    if (i == 0) return "null";
    const double dt = p.seconds - loss[i - 1].seconds;
    if (!(dt > 0)) return "null";
    return JsonNumber(static_cast<double>(p.examples - loss[i - 1].examples) / dt);
  };
  const std::string body = absl::StrCat(
      "{\"job_id\":", *id, ",\"loss\":{\"stride\":", series->loss_stride,
      ",\"steps_offered\":", series->steps_offered, ",",
      Column("step", loss, [](const LossPoint& p, size_t) { return absl::StrCat(p.step); }), ",",
      Column("loss", loss, [](const LossPoint& p, size_t) { return JsonNumber(p.loss); }), ",",
      Column("examples_per_second", loss,
             [](const LossPoint& p, size_t) { return JsonNumber(p.examples_per_second); }),
      ",",
      Column("seconds", loss, [](const LossPoint& p, size_t) { return JsonNumber(p.seconds); }),
      ",", Column("window_examples_per_second", loss, window_rate),
      "},\"eval\":{\"stride\":", series->eval_stride, ",\"evals_offered\":",
      series->evals_offered, ",",
      Column("step", eval, [](const EvalPoint& p, size_t) { return absl::StrCat(p.step); }), ",",
      Column("test_accuracy", eval,
             [](const EvalPoint& p, size_t) { return JsonNumber(p.test_accuracy); }),
      ",",
      Column("test_loss", eval, [](const EvalPoint& p, size_t) { return JsonNumber(p.test_loss); }),
      "}}\n");
  return JsonResponse(200, body);
}

}  // namespace lockstep
