#include <cblas.h>
#include <grpcpp/grpcpp.h>
#include <xxhash.h>
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
TEST(S, S) { float a[1]={2},b[1]={3},c[1]={0}; cblas_sgemm(CblasRowMajor,CblasNoTrans,CblasNoTrans,1,1,1,1,a,1,b,1,0,c,1); EXPECT_EQ(c[0],6); EXPECT_EQ(absl::StrCat(1),"1"); }
