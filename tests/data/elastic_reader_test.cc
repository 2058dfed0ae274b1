// ElasticReader (data/elastic_reader.h): workers that hear of the membership changes as late
// as the answers allow, a leave, a join, and checkpoints taken after a leave and resumed by
// the job's workers gathered again; every epoch reads each example exactly once.
#include "data/elastic_reader.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace tally {
namespace {

// The job's changes as its workers hear of them: at step S's Place a change from a step
// <= S - 2 is heard (the answers of S - 2's pulls bring it), and once the step in flight is
// settled, every change from a step < S.
struct Job {
  std::vector<MembershipChange> changes;
  int64_t visible = -1;  // changes from a step <= this are heard
  int settles = 0;
  int64_t start = 0;  // a resumed run's first step: its servers count `changes`' steps from it
  Status Heard(std::vector<MembershipChange>* out) const {
    out->clear();
    for (const MembershipChange& c : changes) {
      if (c.from_step + start <= visible) out->push_back(c);
    }
    return Status::Ok();
  }
};

struct Worker {
  std::unique_ptr<ElasticReader> reader;
  int rank = 0;
};

// Visits per epoch of each position: [epoch][position].
using Visits = std::map<int64_t, std::vector<int>>;

Worker MakeWorker(Job* job, int64_t n, int batch, int rank, const ElasticStart& start) {
  ElasticReader::Options o;
  o.num_examples = n;
  o.batch_size = batch;
  o.rank = rank;
  o.heard = [job](std::vector<MembershipChange>* out) { return job->Heard(out); };
  Worker w{std::make_unique<ElasticReader>(o), rank};
  const Status s = w.reader->Start(start);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return w;
}

ElasticStart Fresh(std::vector<int> ranks) {
  ElasticStart s;
  s.gathered = std::move(ranks);
  return s;
}

// Steps [from, to) of the workers live at each step (a worker in `gone_from` stops before
// that step), counting what they read.
void RunSteps(Job* job, std::vector<Worker>* workers, const std::map<int, int64_t>& gone_from, int64_t from, int64_t to,
         int64_t n, Visits* visits, std::vector<ElasticStep>* rank0 = nullptr) {
  for (int64_t step = from; step < to; ++step) {
    for (Worker& w : *workers) {
      auto gone = gone_from.find(w.rank);
      if (gone != gone_from.end() && step >= gone->second) continue;
      job->visible = step - kElasticDataLag;
      ElasticStep at;
      const Status s = w.reader->Place(step, [&] {
        ++job->settles;
        job->visible = step - 1;
        return Status::Ok();
      }, &at);
      ASSERT_TRUE(s.ok()) << "rank " << w.rank << " step " << step << ": " << s.ToString();
      if (rank0 != nullptr && w.rank == 0) rank0->push_back(at);
      if (!at.reads) continue;
      std::vector<int>& seen = (*visits)[at.epoch];
      seen.resize(static_cast<size_t>(n));
      for (size_t j = 0; j + at.batch.pad < at.batch.positions.size(); ++j) ++seen[at.batch.positions[j]];
    }
  }
}

void ExpectEachOnce(const Visits& visits, int64_t epochs) {
  for (int64_t e = 0; e < epochs; ++e) {
    auto it = visits.find(e);
    ASSERT_NE(it, visits.end()) << "epoch " << e << " not read";
    for (size_t p = 0; p < it->second.size(); ++p) ASSERT_EQ(it->second[p], 1) << "epoch " << e << " position " << p;
  }
}

TEST(ElasticReader, WithoutAChangeEachRankReadsTheStartingCut) {
  Job job;
  std::vector<Worker> workers;
  for (int r = 0; r < 3; ++r) workers.push_back(MakeWorker(&job, 120, 8, r, Fresh({0, 1, 2})));
  Visits visits;
  std::vector<ElasticStep> rank0;
  RunSteps(&job, &workers, {}, 0, 10, 120, &visits, &rank0);
  ExpectEachOnce(visits, 2);
  ASSERT_EQ(rank0.size(), 10u);
  EXPECT_EQ(rank0[6].epoch, 1);
  EXPECT_EQ(rank0[6].index, 1);
  EXPECT_EQ(rank0[6].epoch_batches, 5);
  EXPECT_EQ(rank0[6].given, 24);  // the three parts' first batch of epoch 1
  EXPECT_EQ(rank0[2].batch.positions[0], 16);
  EXPECT_EQ(job.settles, 2 * 3);  // at each epoch's end, by each worker
}

TEST(ElasticReader, ALeaveHeardAsLateAsTheAnswersAllowIsReadOnce) {
  Job job;
  job.changes = {{5, {0, 2}, false}};
  std::vector<Worker> workers;
  for (int r = 0; r < 3; ++r) workers.push_back(MakeWorker(&job, 300, 8, r, Fresh({0, 1, 2})));
  Visits visits;
  std::vector<ElasticStep> rank0;
  RunSteps(&job, &workers, {{1, 5}}, 0, 60, 300, &visits, &rank0);
  ExpectEachOnce(visits, 3);
  EXPECT_GT(std::count_if(rank0.begin(), rank0.end(), [](const ElasticStep& s) { return s.epoch == 0; }), 13)
      << "epoch 0 got longer than 300 / 3 / 8 batches";
  for (size_t i = 1; i < rank0.size(); ++i) {
    if (rank0[i].epoch == rank0[i - 1].epoch) {
      EXPECT_GE(rank0[i].given, rank0[i - 1].given) << "step " << i;
    }
  }
}

constexpr int64_t kResumeExamples = 301;

// A job of ranks 0..2 where rank 1 leaves from step 5 runs to step `stop` (what its workers
// read counted into *visits, rank 0's steps into *rank0) and stops there with worker 0's
// checkpoint, whose record goes through JSON as in the checkpoint's metadata: the start of
// a job of the ranks `gathered` that resumes it.
ElasticStart StopAfterALeave(int64_t stop, const std::vector<int>& gathered, Visits* visits,
                             std::vector<ElasticStep>* rank0) {
  Job job;
  job.changes = {{5, {0, 2}, false}};
  std::vector<Worker> workers;
  for (int r = 0; r < 3; ++r) workers.push_back(MakeWorker(&job, kResumeExamples, 8, r, Fresh({0, 1, 2})));
  RunSteps(&job, &workers, {{1, 5}}, 0, stop, kResumeExamples, visits, rank0);
  job.visible = stop - 1;  // worker 0 saves with its step in flight settled
  ElasticRecord saved;
  ElasticStart start;
  EXPECT_TRUE(workers[0].reader->Record(stop, &saved).ok());
  EXPECT_TRUE(ElasticRecord::FromJson("test", saved.ToJson(), &start.record).ok());
  start.epoch = rank0->back().epoch;
  start.batch = rank0->back().index + 1;
  start.step = stop;
  start.gathered = gathered;
  return start;
}

// The job above resumed by the ranks `gathered` (a new job: its scheduler has decided
// nothing yet); the epochs read each example once over both runs.
void CheckpointAfterALeave(int64_t stop, const std::vector<int>& gathered = {0, 1, 2}) {
  SCOPED_TRACE("checkpoint at step " + std::to_string(stop) + ", resumed by " + std::to_string(gathered.size()));
  Visits visits;
  std::vector<ElasticStep> rank0;
  const ElasticStart start = StopAfterALeave(stop, gathered, &visits, &rank0);
  Job resumed;
  std::vector<Worker> again;
  for (int r : gathered) again.push_back(MakeWorker(&resumed, kResumeExamples, 8, r, start));
  RunSteps(&resumed, &again, {}, stop, stop + 120, kResumeExamples, &visits);
  ExpectEachOnce(visits, 3);
}

TEST(ElasticReader, ACheckpointAfterALeaveResumesWithTheGatheredWorkersAndReadsTheEpochOnce) {
  CheckpointAfterALeave(6);   // the leave not applied yet (from step 5: at step 7)
  CheckpointAfterALeave(10);  // applied
  CheckpointAfterALeave(5);   // the leaver's first missing step
  CheckpointAfterALeave(6, {0, 1});        // a job of two workers resumes
  CheckpointAfterALeave(10, {0, 1, 2, 3});  // a job of four
}

TEST(ElasticReader, AResumeWithTheLiveWorkersAndNothingPendingReadsWhatTheRunWouldHave) {
  // A checkpoint at step 12 (the leave applied at 7) resumed by ranks 0 and 2, the live
  // ones, goes on with the uninterrupted run's batches.
  Visits visits;
  std::vector<ElasticStep> uninterrupted, before;
  StopAfterALeave(60, {0, 2}, &visits, &uninterrupted);
  const ElasticStart start = StopAfterALeave(12, {0, 2}, &visits, &before);
  Job resumed;
  std::vector<Worker> two;
  for (int r : {0, 2}) two.push_back(MakeWorker(&resumed, kResumeExamples, 8, r, start));
  std::vector<ElasticStep> after;
  RunSteps(&resumed, &two, {}, 12, 60, kResumeExamples, &visits, &after);
  ASSERT_EQ(after.size(), 48u);
  for (size_t i = 0; i < after.size(); ++i) {
    ASSERT_EQ(after[i].batch.positions, uninterrupted[12 + i].batch.positions) << "step " << 12 + i;
    ASSERT_EQ(after[i].epoch, uninterrupted[12 + i].epoch) << "step " << 12 + i;
    ASSERT_EQ(after[i].given, uninterrupted[12 + i].given) << "step " << 12 + i;
  }
}

TEST(ElasticReader, AJoinerReadsPadsUntilItsChangeAppliesThenItsPart) {
  Job job;
  job.changes = {{3, {0, 1}, false}, {10, {0, 1, 2}, false}};
  std::vector<Worker> workers;
  for (int r = 0; r < 3; ++r) workers.push_back(MakeWorker(&job, 600, 8, r, Fresh({0, 1, 2})));
  Visits visits;
  RunSteps(&job, &workers, {{2, 3}}, 0, 10, 600, &visits);
  // The new process of rank 2 starts at its join's step; its reader begins at the job's start.
  workers[2] = MakeWorker(&job, 600, 8, 2, Fresh({0, 1, 2}));
  std::vector<ElasticStep> joiner;
  for (int64_t step = 10; step < 14; ++step) {
    job.visible = step - kElasticDataLag;
    ElasticStep at;
    ASSERT_TRUE(workers[2].reader->Place(step, nullptr, &at).ok());
    joiner.push_back(at);
  }
  EXPECT_FALSE(joiner[0].reads);
  EXPECT_FALSE(joiner[1].reads);
  EXPECT_EQ(joiner[1].batch.pad, 8);
  EXPECT_TRUE(joiner[2].reads);  // from step 12 = 10 + the lag
  EXPECT_EQ(joiner[2].epoch, 0);
  // The whole job, the joiner included, from its start: each example once.
  Job replay = job;
  std::vector<Worker> all;
  for (int r = 0; r < 3; ++r) all.push_back(MakeWorker(&replay, 600, 8, r, Fresh({0, 1, 2})));
  Visits once;
  RunSteps(&replay, &all, {{2, 3}}, 0, 10, 600, &once);
  all[2] = MakeWorker(&replay, 600, 8, 2, Fresh({0, 1, 2}));
  RunSteps(&replay, &all, {}, 10, 150, 600, &once);
  ExpectEachOnce(once, 3);
}

TEST(ElasticReader, AResumedRunsChangesCountFromItsStartAndAJoinerStartsWhereTheRunStarted) {
  // A checkpoint at step 10 after a leave, resumed by ranks 0..2. The resumed job's servers
  // count its steps from 0 there: worker 2 leaves from its step 4 (the job's 14) and a new
  // worker 2 process joins from its step 10 (the job's 20), its reader started where the
  // run started (tally train's PREFIX-run.json), as the others'. Each epoch is read once
  // over both runs.
  Visits visits;
  std::vector<ElasticStep> rank0;
  const ElasticStart start = StopAfterALeave(10, {0, 1, 2}, &visits, &rank0);
  Job resumed;
  resumed.start = 10;
  resumed.changes = {{4, {0, 1}, false}, {10, {0, 1, 2}, false}};
  std::vector<Worker> workers;
  for (int r = 0; r < 3; ++r) workers.push_back(MakeWorker(&resumed, kResumeExamples, 8, r, start));
  RunSteps(&resumed, &workers, {{2, 14}}, 10, 20, kResumeExamples, &visits);
  workers[2] = MakeWorker(&resumed, kResumeExamples, 8, 2, start);
  RunSteps(&resumed, &workers, {}, 20, 160, kResumeExamples, &visits);
  ExpectEachOnce(visits, 3);
}

TEST(ElasticRecord, RefusesMalformedRecordsNamingTheFile) {
  ElasticRecord r;
  for (const char* bad : {"", "[]", "{\"examples\": 0, \"epoch_live\": [0], \"changes\": []}",
                          "{\"examples\": 5, \"epoch_live\": [0, 0], \"changes\": []}",
                          "{\"examples\": 5, \"epoch_live\": [0], \"changes\": [{\"from_step\": 3}]}",
                          "{\"examples\": 5, \"epoch_live\": [0], \"changes\": [{\"from_step\": 3, \"live\": [0]}, "
                          "{\"from_step\": 2, \"live\": [0]}]}"}) {
    const Status s = ElasticRecord::FromJson("m-0001.params", bad, &r);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("m-0001.params"), std::string::npos) << s.message();
  }
  ElasticRecord good;
  good.num_examples = 9;
  good.epoch_live = {0, 2};
  good.changes = {{4, {0}, false}, {6, {0, 1, 2}, true}};
  ASSERT_TRUE(ElasticRecord::FromJson("x", good.ToJson(), &r).ok());
  EXPECT_EQ(r.ToJson(), good.ToJson());
  EXPECT_TRUE(r.changes[1].at_once);
}

TEST(ElasticReader, AResumeFromACheckpointOutsideItsEpochIsRefused) {
  Job job;
  ElasticStart start;
  start.epoch = 1;
  start.batch = 3;
  start.step = 20;
  start.record.num_examples = 100;
  start.record.epoch_live = {0, 1};
  start.record.changes = {{12, {0}, false}};  // before the epoch's first step, 17
  start.gathered = {0, 1};
  ElasticReader::Options o;
  o.num_examples = 100;
  o.batch_size = 4;
  ElasticReader reader(o);
  const Status s = reader.Start(start);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("from step 12"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tally
