#include "common/tensor.h"

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(ShapeTest, ElementsAndString) {
  EXPECT_EQ(Shape({784, 256}).num_elements(), 784 * 256);
  EXPECT_EQ(Shape().num_elements(), 1);
  EXPECT_EQ(Shape({3, 0}).num_elements(), 0);
  EXPECT_EQ(Shape({784, 256}).ToString(), "[784,256]");
}

TEST(TensorTest, ZeroInitialisedAndViewsShareData) {
  Tensor t(Shape{2, 3});
  ASSERT_EQ(t.size(), 6);
  for (float v : t.span()) EXPECT_EQ(v, 0.0f);
  TensorView v = t.view();
  v.at(1, 2) = 5.0f;
  EXPECT_EQ(t.data()[5], 5.0f);
  EXPECT_EQ(v.shape(), Shape({2, 3}));
}

TEST(TensorTest, ResizeReusesCapacity) {
  Tensor t(Shape{100});
  const float* before = t.data();
  t.Resize(Shape{10, 5});
  EXPECT_EQ(t.size(), 50);
  t.Resize(Shape{100});
  EXPECT_EQ(t.data(), before);
}

}  // namespace
}  // namespace lockstep
