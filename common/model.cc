#include "common/model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/blas.h"
#include "common/rng.h"

namespace lockstep {
namespace {

constexpr int64_t kEvalChunk = 1024;

void Relu(float* a, int64_t len) {
  for (int64_t i = 0; i < len; ++i) a[i] = a[i] > 0.0f ? a[i] : 0.0f;
}

// out[i, :] = bias for every row i; the Gemm that follows adds X*W.
void BroadcastRows(const float* bias, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) std::copy(bias, bias + cols, out + r * cols);
}

}  // namespace

Model::Model(std::string kind, std::vector<int64_t> dims, LossKind loss)
    : kind_(std::move(kind)), dims_(std::move(dims)), loss_(loss) {
  for (size_t l = 0; l + 1 < dims_.size(); ++l) {
    layout_.push_back({absl::StrCat("W", l), Shape{dims_[l], dims_[l + 1]}, num_params_});
    num_params_ += dims_[l] * dims_[l + 1];
    layout_.push_back({absl::StrCat("b", l), Shape{dims_[l + 1]}, num_params_});
    num_params_ += dims_[l + 1];
  }
  acts_.resize(dims_.size() - 1);
}

std::string Model::Describe() const {
  return absl::StrCat(kind_, " ", absl::StrJoin(dims_, "-"));
}

int Model::num_classes() const {
  switch (loss_) {
    case LossKind::kSquaredError: return 0;
    case LossKind::kBinaryCrossEntropy: return 2;
    case LossKind::kSoftmaxCrossEntropy: return static_cast<int>(output_dim());
  }
  return 0;
}

void Model::Init(uint64_t seed, absl::Span<float> params) const {
  const int layers = static_cast<int>(dims_.size()) - 1;
  for (int l = 0; l < layers; ++l) {
    const ParamBlock& w = layout_[2 * l];
    const ParamBlock& b = layout_[2 * l + 1];
    const float fan_in = static_cast<float>(dims_[l]);
    const float fan_out = static_cast<float>(dims_[l + 1]);
    const bool feeds_relu = l + 1 < layers;
    const float limit = feeds_relu ? std::sqrt(6.0f / fan_in)
                                   : std::sqrt(6.0f / (fan_in + fan_out));
    SplitMix64 rng(MixSeed(seed, static_cast<uint64_t>(l)));
    float* wp = params.data() + w.offset;
    for (int64_t i = 0; i < w.shape.num_elements(); ++i) {
      wp[i] = (2.0f * rng.NextFloat() - 1.0f) * limit;
    }
    std::fill_n(params.data() + b.offset, b.shape.num_elements(), 0.0f);
  }
}

const float* Model::Forward(absl::Span<const float> params, const float* x, int64_t n) {
  const float* in = x;
  const int layers = static_cast<int>(dims_.size()) - 1;
  for (int l = 0; l < layers; ++l) {
    const int64_t k = dims_[l], m = dims_[l + 1];
    Tensor& out = acts_[l];
    out.Resize(Shape{n, m});
    const float* w = params.data() + layout_[2 * l].offset;
    const float* b = params.data() + layout_[2 * l + 1].offset;
    BroadcastRows(b, n, m, out.data());
    Gemm(false, false, n, m, k, 1.0f, in, k, w, m, 1.0f, out.data(), m);
    if (l + 1 < layers) Relu(out.data(), n * m);
    in = out.data();
  }
  return in;
}

double Model::OutputLoss(const float* z, const float* y, int64_t n, float* dz,
                         int64_t* correct) const {
  double loss = 0;
  int64_t right = 0;
  const int64_t c = output_dim();
  switch (loss_) {
    case LossKind::kSquaredError:
      for (int64_t i = 0; i < n; ++i) {
        const float r = z[i] - y[i];
        loss += 0.5 * static_cast<double>(r) * r;
        if (dz) dz[i] = r;
      }
      break;
    case LossKind::kBinaryCrossEntropy:
      for (int64_t i = 0; i < n; ++i) {
        const float zi = z[i];
        // log(1+e^z) - y*z, written to stay finite for large |z|.
        loss += std::max(zi, 0.0f) - y[i] * zi + std::log1p(std::exp(-std::fabs(zi)));
        if (dz) dz[i] = 1.0f / (1.0f + std::exp(-zi)) - y[i];
        right += (zi > 0.0f) == (y[i] > 0.5f);
      }
      break;
    case LossKind::kSoftmaxCrossEntropy:
      for (int64_t i = 0; i < n; ++i) {
        const float* zi = z + i * c;
        const int64_t label = static_cast<int64_t>(y[i]);
        int64_t arg = 0;
        for (int64_t j = 1; j < c; ++j) arg = zi[j] > zi[arg] ? j : arg;
        const float zmax = zi[arg];
        double sum = 0;
        for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(zi[j] - zmax));
        loss += std::log(sum) - (zi[label] - zmax);
        right += arg == label;
        if (dz) {
          float* d = dz + i * c;
          const double inv = 1.0 / sum;
          for (int64_t j = 0; j < c; ++j) {
            d[j] = static_cast<float>(std::exp(static_cast<double>(zi[j] - zmax)) * inv);
          }
          d[label] -= 1.0f;
        }
      }
      break;
  }
  if (correct) *correct = right;
  return loss;
}

namespace {

// Row panels of a [k, m] weight gradient of at most panel_floats elements.
int64_t NumPanels(int64_t k, int64_t m, int64_t panel_floats) {
  if (panel_floats <= 0 || k == 0) return 1;
  const int64_t rows = std::max<int64_t>(1, panel_floats / std::max<int64_t>(m, 1));
  return (k + rows - 1) / rows;
}
// First row of panel p of P over k rows (panels differ by at most a row).
int64_t PanelRow(int64_t k, int64_t panels, int64_t p) { return k * p / panels; }

}  // namespace

double Model::StartBackward(absl::Span<const float> params, const float* x, const float* y,
                            int64_t n) {
  const float* z = Forward(params, x, n);
  dz_.Resize(Shape{n, output_dim()});
  const double loss_sum = OutputLoss(z, y, n, dz_.data(), nullptr);
  if (ones_.size() < n) {
    ones_.Resize(Shape{n});
    std::fill_n(ones_.data(), n, 1.0f);
  }
  return loss_sum;
}

void Model::BackpropInput(absl::Span<const float> params, int l, int64_t n) {
  // dA_in = dZ W^T   [n,k], then through the ReLU of layer l-1.
  const int64_t k = dims_[l], m = dims_[l + 1];
  const float* w = params.data() + layout_[2 * l].offset;
  dz_prev_.Resize(Shape{n, k});
  Gemm(false, true, n, k, m, 1.0f, dz_.data(), m, w, m, 0.0f, dz_prev_.data(), k);
  const float* a = acts_[l - 1].data();
  float* d = dz_prev_.data();
  for (int64_t i = 0; i < n * k; ++i) d[i] = a[i] > 0.0f ? d[i] : 0.0f;
  std::swap(dz_, dz_prev_);
}

std::vector<int64_t> Model::GradPieceStarts(int64_t panel_floats) const {
  std::vector<int64_t> starts;
  const int layers = static_cast<int>(dims_.size()) - 1;
  for (int l = layers - 1; l >= 0; --l) {
    const int64_t k = dims_[l], m = dims_[l + 1];
    starts.push_back(layout_[2 * l + 1].offset);
    const int64_t panels = NumPanels(k, m, panel_floats);
    for (int64_t p = panels - 1; p >= 0; --p) {
      starts.push_back(layout_[2 * l].offset + PanelRow(k, panels, p) * m);
    }
  }
  return starts;
}

BatchStats Model::LossAndGradSum(absl::Span<const float> params, const float* x,
                                 const float* y, int64_t n, absl::Span<float> grad,
                                 int64_t panel_floats, GradReadyListener* listener) {
  BatchStats stats;
  stats.count = n;
  if (n == 0) {
    listener->LossReady(0.0);
    std::fill(grad.begin(), grad.end(), 0.0f);
    listener->ReadyFrom(0);
    return stats;
  }
  const int layers = static_cast<int>(dims_.size()) - 1;
  stats.loss_sum = StartBackward(params, x, y, n);
  listener->LossReady(stats.loss_sum);
  for (int l = layers - 1; l >= 0; --l) {
    const int64_t k = dims_[l], m = dims_[l + 1];
    const float* a_in = l == 0 ? x : acts_[l - 1].data();
    float* gw = grad.data() + layout_[2 * l].offset;
    float* gb = grad.data() + layout_[2 * l + 1].offset;
    // db = dZ^T 1 [m], then dW = A_in^T dZ [k,m] by row panels, last first:
    // rows [r0, r1) of dW are columns [r0, r1) of A_in, transposed.
    Gemv(true, n, m, 1.0f, dz_.data(), m, ones_.data(), 0.0f, gb);
    listener->ReadyFrom(layout_[2 * l + 1].offset);
    const int64_t panels = NumPanels(k, m, panel_floats);
    for (int64_t p = panels - 1; p >= 0; --p) {
      const int64_t r0 = PanelRow(k, panels, p), r1 = PanelRow(k, panels, p + 1);
      if (r1 > r0) {
        Gemm(true, false, r1 - r0, m, n, 1.0f, a_in + r0, k, dz_.data(), m, 0.0f,
             gw + r0 * m, m);
      }
      listener->ReadyFrom(layout_[2 * l].offset + r0 * m);
    }
    if (l == 0) break;
    BackpropInput(params, l, n);
  }
  return stats;
}

BatchStats Model::LossAndGradSum(absl::Span<const float> params, const float* x,
                                 const float* y, int64_t n, absl::Span<float> grad) {
  BatchStats stats;
  stats.count = n;
  if (n == 0) {
    std::fill(grad.begin(), grad.end(), 0.0f);
    return stats;
  }
  const int layers = static_cast<int>(dims_.size()) - 1;
  stats.loss_sum = StartBackward(params, x, y, n);
  for (int l = layers - 1; l >= 0; --l) {
    const int64_t k = dims_[l], m = dims_[l + 1];
    const float* a_in = l == 0 ? x : acts_[l - 1].data();
    float* gw = grad.data() + layout_[2 * l].offset;
    float* gb = grad.data() + layout_[2 * l + 1].offset;
    // dW = A_in^T dZ   [k,m];  db = dZ^T 1   [m]
    Gemm(true, false, k, m, n, 1.0f, a_in, k, dz_.data(), m, 0.0f, gw, m);
    Gemv(true, n, m, 1.0f, dz_.data(), m, ones_.data(), 0.0f, gb);
    if (l == 0) break;
    BackpropInput(params, l, n);
  }
  return stats;
}

EvalStats Model::Evaluate(absl::Span<const float> params, const float* x,
                          const float* y, int64_t n) {
  EvalStats stats;
  stats.classification = classification();
  for (int64_t begin = 0; begin < n; begin += kEvalChunk) {
    const int64_t len = std::min(kEvalChunk, n - begin);
    const float* z = Forward(params, x + begin * input_dim(), len);
    int64_t correct = 0;
    stats.loss_sum += OutputLoss(z, y + begin, len, nullptr, &correct);
    stats.correct += correct;
    stats.count += len;
  }
  return stats;
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(absl::string_view spec,
                                                   int64_t input_dim,
                                                   int num_classes) {
  if (input_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model: input dimension must be > 0, got ", input_dim));
  }
  auto need_classes = [&](int min_classes) -> absl::Status {
    if (num_classes < min_classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model \"", spec, "\": needs a classification dataset with at least ",
          min_classes, " classes, dataset has ",
          num_classes == 0 ? std::string("real-valued targets")
                           : absl::StrCat(num_classes, " classes")));
    }
    return absl::OkStatus();
  };
  if (spec == "linear") {
    return std::make_unique<Model>("linear", std::vector<int64_t>{input_dim, 1},
                                   LossKind::kSquaredError);
  }
  if (spec == "logistic") {
    if (num_classes != 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model \"logistic\": needs binary labels (2 classes, y in {0,1}), dataset has ",
          num_classes == 0 ? std::string("real-valued targets")
                           : absl::StrCat(num_classes, " classes")));
    }
    return std::make_unique<Model>("logistic", std::vector<int64_t>{input_dim, 1},
                                   LossKind::kBinaryCrossEntropy);
  }
  if (spec == "softmax") {
    if (auto s = need_classes(2); !s.ok()) return s;
    return std::make_unique<Model>("softmax",
                                   std::vector<int64_t>{input_dim, num_classes},
                                   LossKind::kSoftmaxCrossEntropy);
  }
  if (absl::StartsWith(spec, "mlp:")) {
    if (auto s = need_classes(2); !s.ok()) return s;
    std::vector<int64_t> dims = {input_dim};
    for (absl::string_view h : absl::StrSplit(spec.substr(4), ',')) {
      int64_t width = 0;
      if (!absl::SimpleAtoi(h, &width) || width <= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model \"", spec, "\": hidden layer width \"", h,
            "\" is not a positive integer (expected e.g. mlp:256 or mlp:512,256)"));
      }
      dims.push_back(width);
    }
    dims.push_back(num_classes);
    // Bound the parameter count before the Model sums it (widths near 2^63
    // overflowed int64: found by tests/fuzz/job_spec_fuzz).
    int64_t params = 0;
    for (size_t l = 0; l + 1 < dims.size(); ++l) {
      int64_t layer = 0;
      if (__builtin_mul_overflow(dims[l], dims[l + 1], &layer) ||
          __builtin_add_overflow(layer, dims[l + 1], &layer) ||
          __builtin_add_overflow(params, layer, &params) || params > kMaxModelParams) {
        return absl::InvalidArgumentError(absl::StrCat(
            "model \"", spec, "\": more than ", kMaxModelParams,
            " parameters (2^40) with input dimension ", input_dim, " and ", num_classes,
            " classes"));
      }
    }
    return std::make_unique<Model>("mlp", std::move(dims), LossKind::kSoftmaxCrossEntropy);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "model: unknown model \"", spec,
      "\" (expected linear, logistic, softmax or mlp:H1[,H2...])"));
}

void SumToMean(absl::Span<float> grad, int64_t count) {
  if (count <= 0) return;
  const float c = static_cast<float>(count);
  for (float& g : grad) g /= c;
}

}  // namespace lockstep
