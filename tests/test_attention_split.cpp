// AttentionSplit (engine/attention_split.h): how a batch-1 decode step's attention units are cut among the
// threads, and how the measured rates (RateSplit, tests/test_rate_split.cpp) move the cuts.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/attention_split.h"

using namespace kvserve;

namespace {

// SmolLM2-shaped: 3 KV heads, 600 positions in partitions of 128 (the last holds 88).
const AttentionSplit::Units kUnits{5, 3, 600, 128};

TEST(AttentionSplit, UnitCostsCountTheNewestPartitionsPositions) {
  EXPECT_EQ(kUnits.count(), 15);
  EXPECT_EQ(kUnits.cost(0), 128 + AttentionSplit::kUnitFixedSlots);
  EXPECT_EQ(kUnits.cost(11), 128 + AttentionSplit::kUnitFixedSlots);
  EXPECT_EQ(kUnits.cost(12), 88 + AttentionSplit::kUnitFixedSlots);
  EXPECT_EQ(kUnits.cost(0, 15), 3 * (4 * 128 + 88) + 15 * AttentionSplit::kUnitFixedSlots);
}

// A sliding window from position 300: partitions 0 and 1 (positions < 256) cost nothing, partition 2 holds
// 84 attended positions; the split puts its cuts among the attended units only.
TEST(AttentionSplit, SlidingWindowUnitsBeforeTheWindowCostNothing) {
  AttentionSplit::Units w = kUnits;
  w.first_position = 300;
  for (int64_t u = 0; u < 6; ++u) EXPECT_EQ(w.cost(u), 0) << u;
  EXPECT_EQ(w.cost(6), 84 + AttentionSplit::kUnitFixedSlots);
  EXPECT_EQ(w.cost(9), 128 + AttentionSplit::kUnitFixedSlots);
  EXPECT_EQ(w.cost(14), 88 + AttentionSplit::kUnitFixedSlots);
  EXPECT_EQ(w.cost(0, 15), 3 * (84 + 128 + 88) + 9 * AttentionSplit::kUnitFixedSlots);
  AttentionSplit split;
  split.rates.resize(2);
  std::vector<int64_t> first;
  split.split(w, first);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_GE(first[1], 6);  // thread 1 starts among the attended units
  const int64_t total = w.cost(0, 15);
  EXPECT_LE(std::abs(2 * w.cost(0, first[1]) - total), 2 * w.cost(first[1]));
}

TEST(AttentionSplit, EqualPartsBeforeAnyRateIsMeasured) {
  AttentionSplit split;
  split.rates.resize(2);
  std::vector<int64_t> first;
  split.split(kUnits, first);
  // Unit 7 (cost 144) straddles the middle (1020 of 2040): it starts at 7 * 144 = 1008, its middle 1080 > 1020.
  ASSERT_EQ(first, (std::vector<int64_t>{0, 7, 15}));
  const int64_t total = kUnits.cost(0, 15);
  EXPECT_LE(std::abs(2 * kUnits.cost(0, 8) - total), 2 * kUnits.cost(7));
}

TEST(AttentionSplit, PartsFollowTheRates) {
  AttentionSplit split;
  split.rates.resize(2);
  split.rates.set_rates({3.0, 1.0});
  EXPECT_DOUBLE_EQ(split.rates.parts()[0], 0.75);
  EXPECT_DOUBLE_EQ(split.rates.parts()[1], 0.25);
  std::vector<int64_t> first;
  split.split(kUnits, first);
  // Thread 0's share is within half a unit's cost of three quarters of the total.
  const double total = static_cast<double>(kUnits.cost(0, 15));
  EXPECT_LE(std::abs(static_cast<double>(kUnits.cost(first[0], first[1])) - 0.75 * total),
            0.5 * static_cast<double>(kUnits.cost(0)));
  EXPECT_EQ(first[2], 15);
}

TEST(AttentionSplit, RecordedCostsOverTimesMoveTheCuts) {
  AttentionSplit split;
  split.rates.resize(2);
  std::vector<int64_t> first;
  split.split(kUnits, first);
  // Thread 0 attended its share at half thread 1's rate: it gets a third of the cost next.
  split.rates.record(0, static_cast<double>(kUnits.cost(first[0], first[1])),
                     2.0 * static_cast<double>(kUnits.cost(first[0], first[1])));
  split.rates.record(1, static_cast<double>(kUnits.cost(first[1], first[2])),
                     static_cast<double>(kUnits.cost(first[1], first[2])));
  split.rates.update();
  EXPECT_NEAR(split.rates.parts()[0], 1.0 / 3, 1e-12);
  split.split(kUnits, first);
  const double total = static_cast<double>(kUnits.cost(0, 15));
  EXPECT_LE(std::abs(static_cast<double>(kUnits.cost(first[0], first[1])) - total / 3),
            0.5 * static_cast<double>(kUnits.cost(0)));
}

TEST(AttentionSplit, ASingleUnitGoesToTheThreadWhosePartHoldsItsMiddle) {
  AttentionSplit split;
  split.rates.resize(3);
  split.rates.set_rates({1.0, 1.0, 1.2});
  const AttentionSplit::Units one{1, 1, 10, 128};  // a single unit (cost 26): two threads get nothing
  std::vector<int64_t> first;
  split.split(one, first);
  ASSERT_EQ(first, (std::vector<int64_t>{0, 0, 1, 1}));  // thread 1's part holds the unit's middle
}

TEST(AttentionSplit, EveryUnitGoesToExactlyOneThreadInOrder) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> rate(0.1, 3.0);
  AttentionSplit split;
  for (int trial = 0; trial < 500; ++trial) {
    const int nt = 1 + static_cast<int>(rng() % 6);
    split.rates.resize(nt);
    std::vector<double> rates(static_cast<size_t>(nt));
    for (double& r : rates) r = rate(rng);
    split.rates.set_rates(rates);
    double sum = 0;
    for (double p : split.rates.parts()) sum += p;
    ASSERT_NEAR(sum, 1.0, 1e-12);
    const AttentionSplit::Units u{1 + static_cast<int64_t>(rng() % 40), 1 + static_cast<int64_t>(rng() % 8), 0, 128};
    const AttentionSplit::Units units{u.n_parts, u.n_kv_heads,
                                      (u.n_parts - 1) * 128 + 1 + static_cast<int64_t>(rng() % 128), 128};
    std::vector<int64_t> first;
    split.split(units, first);
    ASSERT_EQ(first.size(), static_cast<size_t>(nt) + 1);
    EXPECT_EQ(first.front(), 0);
    EXPECT_EQ(first.back(), units.count());
    for (int t = 0; t < nt; ++t) EXPECT_LE(first[t], first[t + 1]);
  }
}

}  // namespace
