#include "rpc/grpc_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace iscsigw::rpc {
namespace grpc_util_test {

TEST(ToGrpcCode, EveryStatusCodeHasItsGrpcCode) {
  const std::pair<StatusCode, grpc::StatusCode> table[] = {
      {StatusCode::kOk, grpc::StatusCode::OK},
      {StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
      {StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND},
      {StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
      {StatusCode::kFailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
      {StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
      {StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE},
      {StatusCode::kResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
      {StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE},
      {StatusCode::kIoError, grpc::StatusCode::INTERNAL},
      {StatusCode::kInternal, grpc::StatusCode::INTERNAL},
  };
  for (const auto& [ours, theirs] : table) {
    EXPECT_EQ(ToGrpcCode(ours), theirs) << StatusCodeName(ours);
  }
}

TEST(ReadPemFile, NamesTheFlagAndThePath) {
  auto missing = ReadPemFile("/nonexistent/ca.pem", "--tls-ca");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "--tls-ca /nonexistent/ca.pem: cannot open for reading");
  char path[] = "/tmp/iscsigw-pem-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  auto empty = ReadPemFile(path, "--tls-cert");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty file"), std::string::npos);
  ASSERT_EQ(::write(fd, "PEM\n", 4), 4);
  ::close(fd);
  auto ok = ReadPemFile(path, "--tls-cert");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok.value(), "PEM\n");
  ::unlink(path);
}

}  // namespace grpc_util_test
}  // namespace iscsigw::rpc
