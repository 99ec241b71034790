// A job's curves as the state database stores them. Contract:
// stored_series.h.
#include "server/stored_series.h"

#include "proto/coordinator_state.pb.h"

namespace lockstep {

std::string EncodeStoredSeries(const JobSeriesSnapshot& s) {
  v1::StoredJobSeries p;
  for (const LossPoint& x : s.loss) {
    v1::StoredLossPoint* y = p.add_loss();
    y->set_step(x.step);
    y->set_loss(x.loss);
    y->set_examples_per_second(x.examples_per_second);
    y->set_seconds(x.seconds);
    y->set_examples(x.examples);
  }
  for (const EvalPoint& x : s.eval) {
    v1::StoredEvalPoint* y = p.add_eval();
    y->set_step(x.step);
    y->set_test_accuracy(x.test_accuracy);
    y->set_test_loss(x.test_loss);
  }
  for (const SyncCell& x : s.sync) {
    v1::StoredSyncCell* y = p.add_sync();
    y->set_first_step(x.first_step);
    y->set_last_step(x.last_step);
    y->set_checks(x.checks);
    y->set_mismatches(x.mismatches);
  }
  p.set_loss_stride(s.loss_stride);
  p.set_eval_stride(s.eval_stride);
  p.set_checks_per_cell(s.checks_per_cell);
  p.set_steps_offered(s.steps_offered);
  p.set_evals_offered(s.evals_offered);
  p.set_checks_offered(s.checks_offered);
  return p.SerializeAsString();
}

bool DecodeStoredSeries(const std::string& blob, JobSeriesSnapshot* s) {
  v1::StoredJobSeries p;
  if (!p.ParseFromString(blob)) return false;
  for (const v1::StoredLossPoint& y : p.loss()) {
    s->loss.push_back({y.step(), y.loss(), y.examples_per_second(), y.seconds(), y.examples()});
  }
  for (const v1::StoredEvalPoint& y : p.eval()) {
    s->eval.push_back({y.step(), y.test_accuracy(), y.test_loss()});
  }
  for (const v1::StoredSyncCell& y : p.sync()) {
    s->sync.push_back({y.first_step(), y.last_step(), y.checks(), y.mismatches()});
  }
  s->loss_stride = p.loss_stride();
  s->eval_stride = p.eval_stride();
  s->checks_per_cell = p.checks_per_cell();
  s->steps_offered = p.steps_offered();
  s->evals_offered = p.evals_offered();
  s->checks_offered = p.checks_offered();
  return true;
}

}  // namespace lockstep
