// Models: for a batch, the loss SUM, the gradient SUM over its examples and
// the example count.
//
// Returning sums (not means) is what makes data parallelism exact: K
// workers' sums added together and divided once by the total count give
// the full-batch mean whatever the slice sizes, including empty slices.
//
// Every model here is a dense feed-forward network over one flat parameter
// vector (layout(): W0 [d,h1], b0 [h1], W1 [h1,h2], b1, ...), with ReLU
// between hidden layers and a loss on the last layer's output:
//   "linear"            d -> 1, squared error 0.5*(z-y)^2 (regression)
//   "logistic"          d -> 1, binary cross-entropy on sigmoid(z), y in {0,1}
//   "softmax"           d -> C, cross-entropy on softmax(z), y in [0,C)
//   "mlp:H1[,H2...]"    d -> H1 -> ReLU -> ... -> C, softmax cross-entropy
// All matrix work goes through Gemm/Gemv (common/blas.h).
//
// Thread safety: a Model owns scratch buffers reused across calls (fresh
// memory is slow), so one Model object must be used by one thread at a
// time. Parameters are passed in, never held, so any number of models can
// share one read-only parameter vector.
#ifndef LOCKSTEP_COMMON_MODEL_H_
#define LOCKSTEP_COMMON_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor.h"

namespace lockstep {

enum class LossKind { kSquaredError, kBinaryCrossEntropy, kSoftmaxCrossEntropy };

// One named parameter tensor inside the flat parameter vector.
struct ParamBlock {
  std::string name;  // e.g. "W0", "b0"
  Shape shape;
  int64_t offset = 0;  // first element in the flat vector
};

struct BatchStats {
  double loss_sum = 0;  // sum of per-example losses
  int64_t count = 0;    // examples in the batch
};

struct EvalStats {
  double loss_sum = 0;
  int64_t correct = 0;  // classification only (0 for regression)
  int64_t count = 0;
  bool classification = false;
  double mean_loss() const { return count ? loss_sum / count : 0.0; }
  double accuracy() const { return count ? static_cast<double>(correct) / count : 0.0; }
};

// Told by a backward pass run in pieces (Model::LossAndGradSum with a
// listener) as the gradient becomes final, so a combine of the finished
// part can start while the rest is computed (worker/step_combine.h).
// Backward finishes the flat gradient from its END towards its start: the
// last layer first, each layer's bias before its weight matrix, whose row
// panels go from the last rows to the first. So "final" is always a
// suffix grad[begin, num_params()).
class GradReadyListener {
 public:
  virtual ~GradReadyListener() = default;
  // The batch's loss sum, before any gradient is final.
  virtual void LossReady(double loss_sum) = 0;
  // grad[begin, num_params()) is final; begin decreases call by call and
  // the last call has begin = 0.
  virtual void ReadyFrom(int64_t begin) = 0;
};

class Model {
 public:
  // `dims` = {input, hidden..., output}; at least two entries, all > 0.
  Model(std::string kind, std::vector<int64_t> dims, LossKind loss);

  const std::string& kind() const { return kind_; }
  // Canonical description, e.g. "mlp 784-256-10".
  std::string Describe() const;
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t input_dim() const { return dims_.front(); }
  int64_t output_dim() const { return dims_.back(); }
  LossKind loss() const { return loss_; }
  bool classification() const { return loss_ != LossKind::kSquaredError; }
  // Number of label classes the model expects (2 for logistic, 0 for
  // regression).
  int num_classes() const;
  const std::vector<ParamBlock>& layout() const { return layout_; }
  int64_t num_params() const { return num_params_; }

  // Deterministic initialisation: the same seed gives bit-identical
  // parameters on every machine. Weights are uniform (He for layers feeding
  // a ReLU, Glorot otherwise) from SplitMix64; biases are zero.
  void Init(uint64_t seed, absl::Span<float> params) const;

  // Forward and backward over n examples: x is [n, input_dim] row-major,
  // y holds n labels. Writes the gradient SUM into `grad` (overwritten,
  // length num_params()) and returns the loss sum and n. n may be 0.
  BatchStats LossAndGradSum(absl::Span<const float> params, const float* x,
                            const float* y, int64_t n, absl::Span<float> grad);

  // The same, in pieces: each weight matrix's gradient dW = A^T dZ is
  // computed in row panels of at most `panel_floats` elements (whole rows;
  // <= 0 = one panel) and `listener` (not null) is told after each piece
  // (see GradReadyListener). The result equals the call above up to the
  // BLAS's summation within a panel: one Gemm per panel may round
  // differently from one Gemm for the matrix; every rank that uses the
  // same panel_floats gets the same bits.
  BatchStats LossAndGradSum(absl::Span<const float> params, const float* x,
                            const float* y, int64_t n, absl::Span<float> grad,
                            int64_t panel_floats, GradReadyListener* listener);

  // Where each piece of the call above begins in the flat gradient, in the
  // order the pieces become final (strictly decreasing, last = 0): the
  // ReadyFrom arguments of a call with n > 0.
  std::vector<int64_t> GradPieceStarts(int64_t panel_floats) const;

  // Loss sum (and correct predictions for classification) without
  // gradients; processes the data in bounded chunks.
  EvalStats Evaluate(absl::Span<const float> params, const float* x,
                     const float* y, int64_t n);

 private:
  // Forward pass into acts_; returns the output-layer logits [n, out].
  const float* Forward(absl::Span<const float> params, const float* x, int64_t n);
  // Loss sum over the logits; writes dLoss/dlogits into dz when non-null.
  double OutputLoss(const float* z, const float* y, int64_t n, float* dz,
                    int64_t* correct) const;
  // Backward, shared by both LossAndGradSum: StartBackward runs the forward
  // pass, puts dLoss/dlogits into dz_ and returns the loss sum (n > 0);
  // BackpropInput moves dz_ from layer l's output to its input (through
  // the ReLU of layer l-1), for l >= 1.
  double StartBackward(absl::Span<const float> params, const float* x, const float* y,
                       int64_t n);
  void BackpropInput(absl::Span<const float> params, int l, int64_t n);

  std::string kind_;
  std::vector<int64_t> dims_;
  LossKind loss_;
  std::vector<ParamBlock> layout_;
  int64_t num_params_ = 0;
  // Scratch, reused across calls: acts_[l] holds layer l's output [n, dims[l+1]].
  std::vector<Tensor> acts_;
  Tensor dz_, dz_prev_, ones_;
};

// Largest parameter count CreateModel accepts (an overflow guard, far above
// any model a worker can hold; larger specs are InvalidArgument).
inline constexpr int64_t kMaxModelParams = int64_t{1} << 40;

// Parses a model spec ("linear", "logistic", "softmax", "mlp:256",
// "mlp:512,256") for a dataset with `input_dim` features and
// `num_classes` classes (0 = regression targets). InvalidArgument naming
// the field "model" and what was expected when the spec is unknown or does
// not fit the data.
absl::StatusOr<std::unique_ptr<Model>> CreateModel(absl::string_view spec,
                                                   int64_t input_dim,
                                                   int num_classes);

// grad[i] /= count, in place: the one place a gradient sum becomes a mean.
// count == 0 leaves grad unchanged (it is all zeros then).
void SumToMean(absl::Span<float> grad, int64_t count);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_MODEL_H_
