// `tally plan` as a user runs it: the figures for one job, a sweep with its recommendation,
// one JSON object, and refusals that name the flag.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace {

struct CliRun {
  int exit_code;
  std::string out;  // stdout alone
  std::string err;
};

std::string TallyBinary() {
  const char* bin = std::getenv("TALLY_BINARY");
  return bin != nullptr && *bin != '\0' ? bin : TALLY_BINARY;
}

std::string ReadAll(FILE* f) {
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

// Runs `tally plan args`; stderr goes through a temporary file so that stdout stays parseable.
CliRun Plan(const std::string& args) {
  FILE* err = std::tmpfile();
  CliRun r{-1, "", ""};
  if (err == nullptr) return r;
  const std::string cmd = TallyBinary() + " plan " + args + " 2>/dev/fd/" + std::to_string(fileno(err));
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  r.out = ReadAll(p);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::rewind(err);
  r.err = ReadAll(err);
  std::fclose(err);
  return r;
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(PlanCli, PrintsTheFiguresOfOneJob) {
  const CliRun r = Plan("--workers 8 --servers 4 --gbps 25 --img-per-s 2800 --wire fp16");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* part : {"4 servers", "step time", "compute 91.43 ms", "img/s for the job", "efficiency",
                           "51.1 MB pushed", "busiest"}) {
    EXPECT_TRUE(Has(r.out, part)) << part << " missing from:\n" << r.out;
  }
}

TEST(PlanCli, JsonIsOneObjectWithTheSplit) {
  const CliRun r = Plan("--workers 8 --servers 4 --gbps 25 --img-per-s 2800 --wire fp32 --overlap 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["servers"], 4);
  EXPECT_EQ(j["wire"], "fp32");
  EXPECT_EQ(j["overlap"], false);
  EXPECT_DOUBLE_EQ(j["bytes_per_worker"].get<double>(), 25557032.0 * 4);
  const double step = j["step_ms"], compute = j["compute_ms"], exposed = j["exposed_ms"];
  EXPECT_NEAR(step, compute + exposed, 1e-9);
  EXPECT_NEAR(j["img_per_s"].get<double>(), 8 * 256 / (step / 1e3), 1e-6);
  EXPECT_NEAR(j["efficiency"].get<double>(), j["img_per_s"].get<double>() / (8 * 2800), 1e-12);
}

TEST(PlanCli, WithoutServersEveryCountIsPredictedAndOneRecommended) {
  CliRun r = Plan("--workers 8 --gbps 25 --img-per-s 2800");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(Has(r.out, "<- recommended")) << r.out;
  EXPECT_TRUE(Has(r.out, "recommended: ")) << r.out;
  r = Plan("--workers 8 --servers 0 --gbps 25 --img-per-s 2800 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["predictions"].size(), 8u);
  EXPECT_GE(j["recommended_servers"].get<int>(), 1);
  EXPECT_LE(j["recommended_servers"].get<int>(), 8);
}

TEST(PlanCli, RefusalsNameTheFlag) {
  const std::pair<const char*, const char*> cases[] = {
      {"--workers 8 --servers 4 --gbps 0 --img-per-s 2800 --wire fp16", "--gbps"},
      {"--workers 8 --servers 4 --gbps 25 --img-per-s 2800 --wire int8", "--wire"},
      {"--servers 4 --gbps 25 --img-per-s 2800", "--workers"},
      {"--workers 8 --servers -2 --gbps 25 --img-per-s 2800", "--servers"},
      {"--workers 8 --gbps 25", "--img-per-s"},
  };
  for (const auto& [args, flag] : cases) {
    const CliRun r = Plan(args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_TRUE(Has(r.err, flag)) << args << ": " << r.err;
  }
}

TEST(PlanCli, HelpListsTheFlags) {
  const CliRun r = Plan("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--gbps", "--img-per-s", "--wire", "--overlap", "--latency-us", "--server-gbs", "--table"}) {
    EXPECT_TRUE(Has(r.out, flag)) << flag;
  }
}

}  // namespace
