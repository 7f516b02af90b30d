// RateSplit (core/rate_split.h): each thread's part of a decode step's parallel work from the rates it
// worked at in the steps before, and the contiguous ranges cut by those parts.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/rate_split.h"

using namespace kvserve;

namespace {

TEST(RateSplit, EqualPartsUntilEveryThreadIsMeasured) {
  RateSplit split;
  split.resize(3);
  for (double p : split.parts()) EXPECT_DOUBLE_EQ(p, 1.0 / 3);
  split.record(0, 100.0, 10.0);
  split.record(1, 100.0, 20.0);
  split.update();  // thread 2 recorded nothing: no rate yet
  for (double p : split.parts()) EXPECT_DOUBLE_EQ(p, 1.0 / 3);
  EXPECT_EQ(split.range(9, 0).last, 3);
  EXPECT_EQ(split.range(9, 1).last, 6);
}

TEST(RateSplit, PartsAreClampedAroundEqual) {
  RateSplit split;
  split.resize(2);
  split.set_rates({100.0, 1.0});
  EXPECT_DOUBLE_EQ(split.parts()[0], 0.75);
  EXPECT_DOUBLE_EQ(split.parts()[1], 0.25);
  split.resize(4);
  split.set_rates({1.0, 1.0, 1.0, 0.0});  // one thread not measured yet: equal parts
  for (double p : split.parts()) EXPECT_DOUBLE_EQ(p, 0.25);
}

TEST(RateSplit, UpdateMovesTheRunningRatesAQuarterOfTheWay) {
  RateSplit split;
  split.resize(2);
  // The first measurement is taken as it is: thread 0 at half thread 1's rate.
  split.record(0, 100.0, 200.0);
  split.record(1, 100.0, 100.0);
  split.update();
  EXPECT_NEAR(split.parts()[0], 1.0 / 3, 1e-12);
  // Then both at the same rate: 0.5 -> 0.625 against 1.
  split.record(0, 50.0, 50.0);
  split.record(1, 70.0, 70.0);
  split.update();
  EXPECT_NEAR(split.parts()[0], 0.625 / 1.625, 1e-12);
  // A step with no records leaves them (the last ones are not folded in twice).
  split.update();
  EXPECT_NEAR(split.parts()[0], 0.625 / 1.625, 1e-12);
}

TEST(RateSplit, ThreadWithoutWorkKeepsItsRate) {
  RateSplit split;
  split.resize(3);
  split.set_rates({1.0, 1.0, 1.2});
  split.record(0, 0.0, 500.0);
  split.record(1, 26.0, 1000.0);
  split.record(2, 40.0, 0.0);
  split.update();
  // Thread 1: 0.75 * 1 + 0.25 * 26 / 1000; threads 0 and 2 keep 1 and 1.2.
  const double r1 = 0.75 + 0.25 * 0.026, sum = 1.0 + r1 + 1.2;
  EXPECT_NEAR(split.parts()[0], 1.0 / sum, 1e-12);
  EXPECT_NEAR(split.parts()[1], r1 / sum, 1e-12);
  EXPECT_NEAR(split.parts()[2], 1.2 / sum, 1e-12);
}

TEST(RateSplit, RangesFollowThePartsRoundedToAnItem) {
  RateSplit split;
  split.resize(2);
  split.set_rates({3.0, 1.0});
  EXPECT_EQ(split.range(25, 0).first, 0);
  EXPECT_EQ(split.range(25, 0).last, 19);  // 18.75 rounded
  EXPECT_EQ(split.range(25, 1).first, 19);
  EXPECT_EQ(split.range(25, 1).last, 25);
  EXPECT_EQ(split.range(0, 1).first, 0);
  EXPECT_EQ(split.range(0, 1).last, 0);
}

TEST(RateSplit, RangesCoverEveryItemOnceInThreadOrderEitherWay) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> rate(0.05, 4.0);
  RateSplit split;
  for (int trial = 0; trial < 500; ++trial) {
    const int nt = 1 + static_cast<int>(rng() % 8);
    split.resize(nt);
    std::vector<double> rates(static_cast<size_t>(nt));
    for (double& r : rates) r = rate(rng);
    split.set_rates(rates);
    double sum = 0;
    for (double p : split.parts()) {
      EXPECT_GE(p, (1 - RateSplit::kMaxSkew) / nt - 1e-12);
      EXPECT_LE(p, (1 + RateSplit::kMaxSkew) / nt + 1e-12);
      sum += p;
    }
    ASSERT_NEAR(sum, 1.0, 1e-12);
    const int64_t n = static_cast<int64_t>(rng() % 300);
    // Reversed, the last thread's range comes first, each the mirror of its forward one.
    int64_t next_reversed = 0;
    for (int t = nt - 1; t >= 0; --t) {
      const RateSplit::Range r = split.range(n, t, /*reversed=*/true);
      EXPECT_EQ(r.first, next_reversed);
      EXPECT_EQ(r.last - r.first, split.range(n, t).last - split.range(n, t).first);
      EXPECT_EQ(r.last, n - split.range(n, t).first);
      next_reversed = r.last;
    }
    EXPECT_EQ(next_reversed, n);
    int64_t next = 0;
    for (int t = 0; t < nt; ++t) {
      const RateSplit::Range r = split.range(n, t);
      EXPECT_EQ(r.first, next);
      EXPECT_LE(r.first, r.last);
      // Within one item of the thread's part.
      EXPECT_LE(std::abs(static_cast<double>(r.last - r.first) - split.parts()[t] * static_cast<double>(n)),
                1.0 + 1e-9);
      next = r.last;
    }
    EXPECT_EQ(next, n);
  }
}

}  // namespace
