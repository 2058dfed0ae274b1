// The profiler's records, run directories and trace recorder.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "profile/run_dir.h"
#include "profile/trace.h"
#include "tests/temp_dir.h"

namespace tally {
namespace profile {
namespace {

namespace fs = std::filesystem;

TEST(RecordsTest, StepRecordRoundTripsWithNonFiniteValues) {
  StepRecord r;
  r.step = 12;
  r.epoch = 1;
  r.batch = 3;
  r.start_us = 1234567;
  r.dur_us = 900;
  r.phase(Phase::kData) = 100;
  r.phase(Phase::kWait) = 50;
  r.samples = 16;
  r.loss = std::nan("");
  r.accuracy = 0.25;
  r.grad_norm = INFINITY;
  const std::string line = ToJson(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_NE(line.find("\"loss\":\"nan\""), std::string::npos) << line;
  EXPECT_FALSE(nlohmann::json::parse(line).is_discarded());
  StepRecord back;
  ASSERT_TRUE(FromJson(line, &back).ok());
  EXPECT_EQ(back.step, 12);
  EXPECT_EQ(back.epoch, 1);
  EXPECT_EQ(back.batch, 3);
  EXPECT_EQ(back.phase(Phase::kData), 100);
  EXPECT_EQ(back.phase(Phase::kWait), 50);
  EXPECT_EQ(back.phase(Phase::kForward), 0);
  EXPECT_TRUE(std::isnan(back.loss));
  EXPECT_TRUE(std::isinf(back.grad_norm));
  EXPECT_EQ(back.samples, 16);
}

TEST(RecordsTest, MalformedLinesFailSayingWhat) {
  StepRecord r;
  Status s = FromJson("{\"step\": 1}", &r);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("start_us"), std::string::npos) << s.message();
  s = FromJson("{\"step\": \"x\", \"start_us\": 0, \"dur_us\": 0}", &r);
  EXPECT_NE(s.message().find("step"), std::string::npos) << s.message();
  EXPECT_FALSE(FromJson("not json", &r).ok());
  MonitorSample m;
  EXPECT_FALSE(FromJson("{\"t_us\": 1, \"cpu\": 3}", &m).ok());
}

TEST(RecordsTest, FindingLineSaysWhoWhatAndWhatToChange) {
  Finding f;
  f.rule = "data_starvation";
  f.node = "worker-1";
  f.step = 120;
  f.message = "data loading takes 62% of the step";
  f.advice = "raise --data-nthreads";
  EXPECT_EQ(f.Line(), "tally: worker-1 step 120: data_starvation: data loading takes 62% of the step -> raise --data-nthreads");
}

TEST(RunDirTest, WrittenFilesReadBackInNodeOrder) {
  ScopedTempDir dir("trace_test");
  const std::string run = dir.path() + "/a/b";
  std::vector<std::unique_ptr<RunWriter>> writers;
  for (auto [role, rank] : std::vector<std::pair<std::string, int>>{{"worker", 1}, {"scheduler", 0}, {"server", 0}, {"worker", 0}}) {
    NodeMeta m;
    m.role = role;
    m.rank = rank;
    m.node = NodeName(role, rank);
    m.host = "h";
    m.config["batch_size"] = "8";
    std::unique_ptr<RunWriter> w;
    ASSERT_TRUE(RunWriter::Open(run, m, &w).ok());
    StepRecord r;
    r.step = rank;
    r.dur_us = 10;
    w->AddStep(r);
    MonitorSample s;
    s.t_us = 5;
    s.cpu = {1, 2};
    w->AddSample(s);
    m.clock_offset_us = -7;
    ASSERT_TRUE(w->UpdateMeta(m).ok());
    writers.push_back(std::move(w));
  }
  writers.clear();  // closes the files
  std::vector<NodeRun> nodes;
  ASSERT_TRUE(ReadRunDir(run, &nodes).ok());
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(nodes[0].meta.node, "scheduler");
  EXPECT_EQ(nodes[1].meta.node, "server-0");
  EXPECT_EQ(nodes[2].meta.node, "worker-0");
  EXPECT_EQ(nodes[3].meta.node, "worker-1");
  EXPECT_EQ(nodes[3].meta.clock_offset_us, -7);
  EXPECT_EQ(nodes[3].meta.config.at("batch_size"), "8");
  ASSERT_EQ(nodes[3].steps.size(), 1u);
  EXPECT_EQ(nodes[3].steps[0].step, 1);
  ASSERT_EQ(nodes[3].samples.size(), 1u);
  EXPECT_EQ(nodes[3].samples[0].cpu, (std::vector<double>{1, 2}));
}

TEST(RunDirTest, ErrorsNameTheDirectoryAndTheLine) {
  ScopedTempDir dir("trace_test");
  std::vector<NodeRun> nodes;
  Status s = ReadRunDir(dir.path() + "/missing", &nodes);
  EXPECT_NE(s.message().find("missing"), std::string::npos);
  s = ReadRunDir(dir.path(), &nodes);
  EXPECT_NE(s.message().find("--run-dir"), std::string::npos) << s.message();
  NodeMeta m;
  m.role = "worker";
  m.node = "worker-0";
  std::unique_ptr<RunWriter> w;
  ASSERT_TRUE(RunWriter::Open(dir.path(), m, &w).ok());
  w.reset();
  std::ofstream(dir.path() + "/worker-0.steps.jsonl") << "{\"step\":0,\"start_us\":0,\"dur_us\":1}\n{broken\n";
  s = ReadRunDir(dir.path(), &nodes);
  EXPECT_NE(s.message().find("worker-0.steps.jsonl line 2"), std::string::npos) << s.message();
}

TEST(TracerTest, EventsOfEveryThreadLandInOneValidChromeTrace) {
  ScopedTempDir dir("trace_test");
  const std::string path = dir.path() + "/t.trace.json";
  Tracer& tracer = Tracer::Get();
  EXPECT_FALSE(tracer.enabled());
  tracer.Complete("before", "x", 1, 1);  // off: not recorded
  tracer.Enable(path, "worker-0 (\"quoted\" host)");
  tracer.NameThread("trainer");
  { TraceScope scope("fwd", "compute"); }
  std::thread other([&] {
    tracer.NameThread("sender");
    for (int i = 0; i < 100; ++i) tracer.Complete("PUSH", "comm", NowUs(), 3, "key", i, "bytes", 4096);
  });
  other.join();
  tracer.Counter("cpu %", NowUs(), {{"busy", 50}, {"iowait", NAN}});
  tracer.Instant("mark", "x", NowUs());
  ASSERT_TRUE(tracer.Finish({{"node", "worker-0"}, {"clock_offset_us", "-12"}}).ok());
  EXPECT_FALSE(tracer.enabled());

  std::ifstream in(path);
  nlohmann::json trace = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(trace.is_discarded());
  EXPECT_EQ(trace["otherData"]["clock_offset_us"], "-12");
  int pushes = 0, fwd = 0, before = 0, threads = 0;
  std::set<int> push_tids, fwd_tids;
  for (const auto& e : trace["traceEvents"]) {
    for (const char* field : {"ph", "ts", "pid", "tid"}) ASSERT_TRUE(e.contains(field)) << e.dump();
    EXPECT_EQ(e["pid"], static_cast<int>(getpid()));
    const std::string name = e["name"];
    if (name == "PUSH") {
      ++pushes;
      push_tids.insert(e["tid"].get<int>());
      EXPECT_EQ(e["args"]["bytes"], 4096);
      EXPECT_EQ(e["dur"], 3);
    }
    if (name == "fwd") {
      ++fwd;
      fwd_tids.insert(e["tid"].get<int>());
      EXPECT_GE(e["dur"].get<int64_t>(), 0);
    }
    before += name == "before";
    threads += name == "thread_name";
    if (name == "cpu %") {
      EXPECT_TRUE(e["args"]["iowait"].is_null());
    }
  }
  EXPECT_EQ(pushes, 100);
  EXPECT_EQ(fwd, 1);
  EXPECT_EQ(before, 0);
  EXPECT_EQ(threads, 2);
  EXPECT_NE(*push_tids.begin(), *fwd_tids.begin());
}

}  // namespace
}  // namespace profile
}  // namespace tally
