#include "data/elastic_shard.h"

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tally {
namespace {

struct Change {
  int64_t from_step;
  std::vector<int> live;
};

// The ranks that really read at `step`: the live ranks of the last change from a step <= it,
// but a joiner only once its change is applied.
std::vector<int> ReadingAt(const std::vector<int>& start, const std::vector<Change>& changes, int64_t step,
                           int64_t applied) {
  std::vector<int> live = start;
  std::map<int, size_t> joined_by;
  for (size_t c = 0; c < changes.size() && changes[c].from_step <= step; ++c) {
    for (int r : changes[c].live) {
      if (std::find(live.begin(), live.end(), r) == live.end()) joined_by[r] = c;
    }
    live = changes[c].live;
  }
  std::vector<int> reading;
  for (int r : live) {
    if (!joined_by.count(r) || static_cast<int64_t>(joined_by[r]) < applied) reading.push_back(r);
  }
  return reading;
}

struct Trace {
  std::vector<std::vector<ShardBatch>> batches;  // [step][rank]
  std::vector<int64_t> epochs, indexes;           // per step
  // Per epoch: how many times each position was read (pads left out).
  std::map<int64_t, std::vector<int>> visits;
  int64_t last_full_epoch = -1;
};

// Runs `steps` steps of workers `start` through `changes`. hear_late: each change is added
// as late as the rule allows (as a worker that hears late); else all before step 0 (a replay).
Trace Simulate(int64_t n, int batch, const std::vector<int>& start, const std::vector<Change>& changes, int64_t steps,
             bool hear_late, int max_rank = 8) {
  ElasticShards shards(n, batch, start);
  Trace run;
  size_t added = 0;
  for (int64_t step = 0; step < steps; ++step) {
    while (added < changes.size() &&
           (!hear_late || changes[added].from_step + kElasticDataLag <= step ||
            (shards.NeedsChangesBefore(step) && changes[added].from_step < step))) {
      const Status s = shards.AddChange(changes[added].from_step, changes[added].live);
      EXPECT_TRUE(s.ok()) << s.ToString();
      ++added;
    }
    const int64_t before = shards.epoch();
    shards.Advance();
    if (shards.epoch() != before && before >= 0) run.last_full_epoch = before;
    run.epochs.push_back(shards.epoch());
    run.indexes.push_back(shards.index());
    std::vector<ShardBatch> at(max_rank);
    std::vector<int>& seen = run.visits[shards.epoch()];
    seen.resize(n);
    for (int rank = 0; rank < max_rank; ++rank) at[rank] = shards.BatchOf(rank);
    for (int rank : ReadingAt(start, changes, step, shards.changes_applied())) {
      const ShardBatch& b = at[rank];
      for (size_t j = 0; j + b.pad < b.positions.size(); ++j) ++seen[b.positions[j]];
    }
    run.batches.push_back(std::move(at));
  }
  return run;
}

// Every epoch that ended visits each position exactly once; the last, unfinished, at most once.
void ExpectEachOnce(const Trace& run, int64_t n) {
  ASSERT_GE(run.last_full_epoch, 0) << "no epoch ended";
  for (const auto& [epoch, seen] : run.visits) {
    for (int64_t p = 0; p < n; ++p) {
      if (epoch <= run.last_full_epoch) {
        ASSERT_EQ(seen[p], 1) << "epoch " << epoch << " position " << p;
      } else {
        ASSERT_LE(seen[p], 1) << "epoch " << epoch << " position " << p;
      }
    }
  }
}

void ExpectSameBatches(const Trace& a, const Trace& b) {
  ASSERT_EQ(a.batches.size(), b.batches.size());
  EXPECT_EQ(a.epochs, b.epochs);
  EXPECT_EQ(a.indexes, b.indexes);
  for (size_t s = 0; s < a.batches.size(); ++s) {
    for (size_t r = 0; r < a.batches[s].size(); ++r) {
      ASSERT_EQ(a.batches[s][r].positions, b.batches[s][r].positions) << "step " << s << " rank " << r;
      ASSERT_EQ(a.batches[s][r].pad, b.batches[s][r].pad) << "step " << s << " rank " << r;
    }
  }
}

TEST(ElasticShards, WithoutAChangeEachRankReadsItsContiguousPartAndPads) {
  // 100 over 4 ranks: 25 each, 4 batches of 8, the last holding 1 and 7 repeats.
  ElasticShards shards(100, 8, {0, 1, 2, 3});
  for (int b = 0; b < 4; ++b) {
    shards.Advance();
    EXPECT_EQ(shards.epoch(), 0);
    EXPECT_EQ(shards.index(), b);
    EXPECT_EQ(shards.epoch_batches(), 4);
  }
  const ShardBatch last = shards.BatchOf(2);
  EXPECT_EQ(last.pad, 7);
  EXPECT_EQ(last.positions[0], 74);
  EXPECT_EQ(last.positions[1], 50);  // the part's first, repeated
  EXPECT_TRUE(shards.BatchOf(4).positions.empty());
  shards.Advance();
  EXPECT_EQ(shards.epoch(), 1);
  EXPECT_EQ(shards.index(), 0);
  EXPECT_EQ(shards.BatchOf(1).positions[0], 25);
}

TEST(ElasticShards, ALeaveMidEpochGivesTheLeaversShareToTheOthers) {
  const std::vector<Change> changes = {{5, {0, 1, 3}}};
  const Trace run = Simulate(1000, 16, {0, 1, 2, 3}, changes, 60, /*hear_late=*/true);
  ExpectEachOnce(run, 1000);
  // The epoch got longer than 16 batches (1000 / 4 / 16) and everyone agrees where it ends.
  const int64_t first_of_epoch1 =
      std::find(run.epochs.begin(), run.epochs.end(), 1) - run.epochs.begin();
  EXPECT_GT(first_of_epoch1, 16);
  EXPECT_TRUE(run.batches[10][2].positions.empty());
}

TEST(ElasticShards, SeveralChangesUnevenCountsEpochEndsAndAJoin) {
  // 997 examples, batch 7, 5 ranks: a leave, two leaves inside the lag of each other, one
  // the step before an epoch's end, and a rank coming back.
  const std::vector<Change> changes = {
      {3, {0, 1, 2, 4}}, {20, {0, 2, 4}}, {21, {0, 4}}, {40, {0, 3, 4}}, {52, {0, 1, 3, 4}}, {53, {0, 1, 4}}};
  const Trace late = Simulate(997, 7, {0, 1, 2, 3, 4}, changes, 400, /*hear_late=*/true);
  ExpectEachOnce(late, 997);
  const Trace replay = Simulate(997, 7, {0, 1, 2, 3, 4}, changes, 400, /*hear_late=*/false);
  ExpectSameBatches(late, replay);
}

TEST(ElasticShards, AChangeJustBeforeTheEpochsEndStillVisitsTheLeaversLastBatch) {
  // 4 ranks of 256: 8 batches of 8 an epoch; rank 3 leaves at step 7, the epoch's last.
  const std::vector<Change> changes = {{7, {0, 1, 2}}};
  const Trace run = Simulate(256, 8, {0, 1, 2, 3}, changes, 30, /*hear_late=*/true);
  ExpectEachOnce(run, 256);
  EXPECT_EQ(run.epochs[7], 0);
  EXPECT_EQ(run.epochs[8], 0);  // the leaver's last batch, over the three others
  EXPECT_EQ(run.epochs[9], 1);
}

TEST(ElasticShards, RandomChangesVisitEachExampleOnceAndDoNotDependOnWhenTheyAreHeard) {
  std::mt19937 rng(37);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t n = 1 + static_cast<int64_t>(rng() % 300);
    const int batch = 1 + static_cast<int>(rng() % 9);
    std::vector<int> live = {0, 1, 2, 3, 4, 5};
    live.resize(1 + rng() % 6);
    const std::vector<int> start = live;
    std::vector<Change> changes;
    int64_t step = 0;
    for (int c = 0; c < 6; ++c) {
      step += static_cast<int64_t>(rng() % 12);
      std::vector<int> next;
      for (int r = 0; r < 6; ++r) {
        if (rng() % 3 != 0) next.push_back(r);
      }
      if (next.empty()) next.push_back(static_cast<int>(rng() % 6));
      changes.push_back({step, next});
    }
    std::string desc = "trial " + std::to_string(trial) + ": n " + std::to_string(n) + ", batch " +
                       std::to_string(batch) + ", ranks " + std::to_string(start.size()) + ", changes";
    for (const Change& c : changes) {
      desc += " " + std::to_string(c.from_step) + ":";
      for (int r : c.live) desc += std::to_string(r);
    }
    SCOPED_TRACE(desc);
    const int64_t steps = step + 3 * (n + batch) + 20;
    const Trace late = Simulate(n, batch, start, changes, steps, /*hear_late=*/true, 6);
    ExpectEachOnce(late, n);
    const Trace replay = Simulate(n, batch, start, changes, steps, /*hear_late=*/false, 6);
    ExpectSameBatches(late, replay);
    if (HasFatalFailure()) return;
  }
}

TEST(ElasticShards, RefusesChangesOutOfOrderEmptyOrTooLate) {
  ElasticShards shards(100, 10, {0, 1});
  EXPECT_FALSE(shards.AddChange(5, {}).ok());
  EXPECT_FALSE(shards.AddChange(5, {1, 1}).ok());
  EXPECT_FALSE(shards.AddChange(5, {-1}).ok());
  EXPECT_TRUE(shards.AddChange(5, {0}).ok());
  EXPECT_FALSE(shards.AddChange(4, {0, 1}).ok());
  for (int i = 0; i < 10; ++i) shards.Advance();
  const Status late = shards.AddChange(6, {0, 1});
  EXPECT_FALSE(late.ok());
  EXPECT_NE(late.message().find("after it was due"), std::string::npos) << late.message();
}

TEST(ElasticShards, TheForecastIsWhatEachRankReadsWithoutAChangeAcrossEpochs) {
  ElasticShards shards(103, 4, {0, 2, 5});
  shards.AddChange(3, {0, 5}).ok();
  for (int i = 0; i < 8; ++i) shards.Advance();  // the leave applied at step 5
  std::vector<std::shared_ptr<const ElasticShards::Forecast>> forecasts;
  for (int rank : {0, 2, 5}) forecasts.push_back(shards.ForecastOf(rank));
  for (int64_t step = 7; step < 80; ++step) {
    if (step > 7) shards.Advance();
    for (size_t i = 0; i < forecasts.size(); ++i) {
      const int rank = std::vector<int>{0, 2, 5}[i];
      int64_t epoch = -1, index = -1;
      const ShardBatch f = forecasts[i]->At(step, &epoch, &index);
      const ShardBatch real = rank == 2 ? shards.NoPartBatch() : shards.BatchOf(rank);
      ASSERT_EQ(epoch, shards.epoch()) << "step " << step;
      ASSERT_EQ(index, shards.index()) << "step " << step;
      ASSERT_EQ(f.positions, real.positions) << "step " << step << " rank " << rank;
      ASSERT_EQ(f.pad, real.pad) << "step " << step << " rank " << rank;
    }
  }
}

TEST(ElasticShards, StartAtAnEpochAndAChangeAtOnceCutTheRestAtItsStep) {
  // The run of ranks 0..3 to step 6, and one started at epoch 0's first step with the
  // gathered ranks 0, 1 at once from step 6: the same batches before, and from step 6 the
  // rest over 0 and 1.
  ElasticShards run(200, 5, {0, 1, 2, 3});
  ElasticShards resumed(200, 5, {0, 1, 2, 3});
  resumed.StartAt(0, 0);
  ASSERT_TRUE(resumed.AddChangeAtOnce(6, {0, 1}).ok());
  EXPECT_FALSE(resumed.AddChangeAtOnce(6, {}).ok());
  std::vector<int> seen(200);
  for (int64_t step = 0; step < 6; ++step) {
    run.Advance();
    resumed.Advance();
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(run.BatchOf(r).positions, resumed.BatchOf(r).positions);
      for (int64_t p : run.BatchOf(r).positions) ++seen[p];
    }
  }
  resumed.Advance();
  EXPECT_EQ(resumed.live(), (std::vector<int>{0, 1}));
  EXPECT_EQ(resumed.changes_applied(), 1);
  EXPECT_EQ(resumed.given(), 4 * 6 * 5);
  while (resumed.epoch() == 0) {
    for (int r = 0; r < 2; ++r) {
      const ShardBatch b = resumed.BatchOf(r);
      for (size_t j = 0; j + b.pad < b.positions.size(); ++j) ++seen[b.positions[j]];
    }
    resumed.Advance();
  }
  for (int p = 0; p < 200; ++p) ASSERT_EQ(seen[p], 1) << "position " << p;
  // A later run that starts inside epoch 3, at step 40.
  ElasticShards later(200, 5, {1, 2});
  later.StartAt(3, 40);
  later.Advance();
  EXPECT_EQ(later.epoch(), 3);
  EXPECT_EQ(later.index(), 0);
  EXPECT_EQ(later.step(), 40);
  EXPECT_FALSE(later.AddChange(39, {1}).ok());
}

}  // namespace
}  // namespace tally
