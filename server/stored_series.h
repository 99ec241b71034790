// A job's status-page curves (JobSeriesSnapshot) as the --state_dir
// database stores them (table job_series, proto StoredJobSeries): written
// at the job's end and now and then while it runs (coordinator_state.cc),
// read back at a restart and for a job evicted from memory
// (coordinator_history.cc).
#ifndef LOCKSTEP_SERVER_STORED_SERIES_H_
#define LOCKSTEP_SERVER_STORED_SERIES_H_

#include <string>

#include "server/job_series.h"

namespace lockstep {

std::string EncodeStoredSeries(const JobSeriesSnapshot& s);
// False when `blob` does not parse (then *s is left as it was).
bool DecodeStoredSeries(const std::string& blob, JobSeriesSnapshot* s);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_STORED_SERIES_H_
