#include "common/grpcutil/grpc_status.h"

#include <string>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(GrpcStatusTest, OkBothWays) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(GrpcStatusTest, EveryCanonicalCodeRoundTripsWithItsMessage) {
  for (int code = 1; code <= 16; ++code) {
    const std::string msg = "job 42 not found: code " + std::to_string(code);
    const absl::Status in(static_cast<absl::StatusCode>(code), msg);
    const grpc::Status g = ToGrpcStatus(in);
    EXPECT_EQ(static_cast<int>(g.error_code()), code);
    EXPECT_EQ(g.error_message(), msg);
    const absl::Status back = FromGrpcStatus(g);
    EXPECT_EQ(back, in) << code;
  }
}

TEST(GrpcStatusTest, NamedCodesMatch) {
  EXPECT_EQ(ToGrpcStatus(absl::NotFoundError("x")).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("x")).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(ToGrpcStatus(absl::FailedPreconditionError("x")).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "slow")).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(GrpcStatusTest, OutOfRangeCodesBecomeUnknown) {
  const absl::Status odd(static_cast<absl::StatusCode>(99), "strange");
  const grpc::Status g = ToGrpcStatus(odd);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::UNKNOWN);
  EXPECT_EQ(g.error_message(), "(status code 99) strange");
  // (The reverse direction cannot be exercised: a grpc::StatusCode outside
  // its enumerators is undefined behaviour, which UBSan rejects.)
}

}  // namespace
}  // namespace lockstep
