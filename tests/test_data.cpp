// data/: the modular-addition split of docs/protocol.md §4.
#include <gtest/gtest.h>

#include <set>

#include "data/modular.h"
#include "data/task.h"

namespace {

TEST(ModularAddition, SplitSizesAreFloorFortyPercent) {
  data::ModularAddition t47(47, 42, torch::kCPU);
  EXPECT_EQ(t47.train_batch(1).x.size(0), 883);  // floor(0.4 * 2209)
  EXPECT_EQ(t47.validation().x.size(0), 2209 - 883);
  data::ModularAddition t97(97, 42, torch::kCPU);
  EXPECT_EQ(t97.train_batch(1).x.size(0), 3763);  // floor(0.4 * 9409)
}

TEST(ModularAddition, EveryPairExactlyOnceWithCorrectTarget) {
  const int64_t p = 13;
  data::ModularAddition t(p, 42, torch::kCPU);
  std::set<std::pair<int64_t, int64_t>> seen;
  const data::Batch train = t.train_batch(1);
  for (const data::Batch* b : {&train, &t.validation()}) {
    auto x = b->x.accessor<int64_t, 2>();
    auto y = b->y.accessor<int64_t, 1>();
    for (int64_t i = 0; i < b->x.size(0); ++i) {
      EXPECT_EQ(x[i][2], p);  // the '=' token
      EXPECT_EQ(y[i], (x[i][0] + x[i][1]) % p);
      seen.insert({x[i][0], x[i][1]});
    }
  }
  EXPECT_EQ(seen.size(), size_t(p * p));
}

TEST(ModularAddition, SplitIsFixedByTheDataSeed) {
  data::ModularAddition a(47, 42, torch::kCPU), b(47, 42, torch::kCPU),
      c(47, 43, torch::kCPU);
  EXPECT_TRUE(torch::equal(a.train_batch(1).x, b.train_batch(1).x));
  EXPECT_TRUE(torch::equal(a.train_batch(1).x, a.train_batch(700).x));
  EXPECT_FALSE(torch::equal(a.train_batch(1).x, c.train_batch(1).x));
}

TEST(ModularAddition, ShapeForTheModel) {
  data::ModularAddition t(47, 42, torch::kCPU);
  EXPECT_EQ(t.shape().vocab_in, 48);
  EXPECT_EQ(t.shape().vocab_out, 47);
  EXPECT_EQ(t.shape().n_ctx, 3);
  EXPECT_TRUE(t.shape().last_only);
  EXPECT_FALSE(t.shape().causal);
}

TEST(TaskFactory, ParsesModNamesAndRejectsOthers) {
  data::TaskOptions o;
  o.name = "mod97";
  EXPECT_EQ(data::make_task(o)->name(), "mod97");
  EXPECT_EQ(data::task_family("mod5"), "mod");
  for (const char* bad : {"mod", "mod1", "modx", "mod-3", "add47", ""}) {
    o.name = bad;
    try {
      data::make_task(o);
      FAIL() << "accepted task '" << bad << "'";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
