#include "server/ps/ps_metrics.h"

#include <cstring>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(PsMetrics, CountsSuccessfulPushesAndPullsAndTheirBytes) {
  PsService service;
  MetricsRegistry registry;
  RegisterPsMetrics(&service, &registry);
  v1::PushRequest push;
  push.set_job(1);
  push.set_step(0);
  push.set_shard(0);
  push.set_num_workers(1);
  push.set_worker_rank(0);
  push.set_shard_len(3);
  const std::vector<float> grad = {1, 2, 3};
  push.set_grad_sum(std::string(reinterpret_cast<const char*>(grad.data()), 12));
  push.set_count(4);
  grpc::ServerContext ctx;
  v1::PushReply push_reply;
  ASSERT_TRUE(service.Push(&ctx, &push, &push_reply).ok());
  v1::PushRequest bad = push;
  bad.set_grad_sum("abc");  // not shard_len x 4 bytes: INVALID_ARGUMENT, not counted
  EXPECT_FALSE(service.Push(&ctx, &bad, &push_reply).ok());
  v1::PullRequest pull;
  pull.set_job(1);
  pull.set_step(0);
  pull.set_shard(0);
  pull.set_num_workers(1);
  pull.set_worker_rank(0);
  pull.set_shard_len(3);
  v1::PullReply pull_reply;
  ASSERT_TRUE(service.Pull(&ctx, &pull, &pull_reply).ok());
  EXPECT_EQ(pull_reply.count(), 4);
  EXPECT_EQ(registry.Render(),
            "# HELP lockstep_ps_jobs Jobs whose ps shards this server holds.\n"
            "# TYPE lockstep_ps_jobs gauge\n"
            "lockstep_ps_jobs 1\n"
            "# HELP lockstep_ps_pulls_total Successful ps pulls.\n"
            "# TYPE lockstep_ps_pulls_total counter\n"
            "lockstep_ps_pulls_total 1\n"
            "# HELP lockstep_ps_pushes_total Successful ps pushes.\n"
            "# TYPE lockstep_ps_pushes_total counter\n"
            "lockstep_ps_pushes_total 1\n"
            "# HELP lockstep_ps_received_bytes_total Payload bytes of successful pushes "
            "(gradient floats x 4 + 8-byte count).\n"
            "# TYPE lockstep_ps_received_bytes_total counter\n"
            "lockstep_ps_received_bytes_total 20\n"
            "# HELP lockstep_ps_sent_bytes_total Payload bytes of successful pull replies "
            "(gradient floats x 4 + 8-byte count).\n"
            "# TYPE lockstep_ps_sent_bytes_total counter\n"
            "lockstep_ps_sent_bytes_total 20\n"
            "# HELP lockstep_ps_waiting_pulls Pulls waiting for the rest of a step's pushes.\n"
            "# TYPE lockstep_ps_waiting_pulls gauge\n"
            "lockstep_ps_waiting_pulls 0\n");
}

}  // namespace
}  // namespace lockstep
