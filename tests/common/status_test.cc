#include "common/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace flashroll {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, WrapPrependsContextAndKeepsCode) {
  Status s = Status::NotFound("tensor lm_head.weight").Wrap("model.safetensors").Wrap("load m");
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_EQ(s.message(), "load m: model.safetensors: tensor lm_head.weight");
  EXPECT_TRUE(Status().Wrap("ctx").ok());
}

TEST(StatusTest, FromErrnoMapsCodes) {
  EXPECT_EQ(Status::FromErrno(ENOENT, "open /x").code(), Code::kNotFound);
  EXPECT_EQ(Status::FromErrno(EPERM, "mount").code(), Code::kPermissionDenied);
  EXPECT_EQ(Status::FromErrno(ENOSPC, "write").code(), Code::kResourceExhausted);
  EXPECT_EQ(Status::FromErrno(EIO, "read").code(), Code::kIoError);
  EXPECT_EQ(Status::FromErrno(ENOENT, "open /x").message(), "open /x: No such file or directory");
}

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status Quarter(int x, int* out) {
  FR_ASSIGN_OR_RETURN(int half, Half(x));
  FR_ASSIGN_OR_RETURN(*out, Half(half));
  return Status::Ok();
}

TEST(StatusTest, MacrosPropagate) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = Quarter(6, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd: 3");
}

TEST(StatusTest, CodeNamesRoundTrip) {
  for (int i = 1; i <= static_cast<int>(Code::kInternal); ++i) {
    const Code code = static_cast<Code>(i);
    EXPECT_EQ(CodeFromName(CodeName(code)), code) << CodeName(code);
  }
  EXPECT_EQ(CodeFromName("ok"), std::nullopt);
  EXPECT_EQ(CodeFromName("nonsense"), std::nullopt);
}

TEST(StatusTest, ResultFromOkStatusIsAnError) {
  Result<int> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
}

}  // namespace
}  // namespace flashroll
