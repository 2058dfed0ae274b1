// How a node takes the job's secret (ClusterConfigFromEnv): from TALLY_JOB_SECRET_FILE only a
// regular file of its own user with no group or other permission, opened without following
// a symbolic link; and, once read, no variable of the secret is left for its children.
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "net/cluster.h"

namespace tally {
namespace {

const std::string kHex = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

// A scheduler's environment (no rank needed) with the secret in a file of mode 600 in a
// directory of its own.
class JobSecretTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("DMLC_ROLE", "scheduler", 1);
    setenv("DMLC_PS_ROOT_URI", "127.0.0.1", 1);
    setenv("DMLC_PS_ROOT_PORT", "9000", 1);
    setenv("DMLC_NUM_WORKER", "1", 1);
    setenv("DMLC_NUM_SERVER", "1", 1);
    unsetenv("TALLY_PLAIN");
    unsetenv("TALLY_JOB_SECRET");
    char dir[] = "/tmp/tally-job-secret-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    file_ = dir_ + "/secret";
    std::ofstream(file_) << kHex << "\n";
    ASSERT_EQ(chmod(file_.c_str(), 0600), 0);
  }
  void TearDown() override { ASSERT_EQ(std::system(("rm -rf " + dir_).c_str()), 0); }

  // ClusterConfigFromEnv with TALLY_JOB_SECRET_FILE=path; a refusal must name the variable
  // and the file.
  Status ReadFrom(const std::string& path) {
    setenv("TALLY_JOB_SECRET_FILE", path.c_str(), 1);
    ClusterConfig c;
    Status s = ClusterConfigFromEnv(&c);
    if (!s.ok()) {
      EXPECT_NE(s.message().find("TALLY_JOB_SECRET_FILE " + path), std::string::npos) << s;
    }
    return s;
  }

  std::string dir_, file_;
};

TEST_F(JobSecretTest, ReadsAPrivateFileAndLeavesNoVariableForChildren) {
  ClusterConfig c;
  setenv("TALLY_JOB_SECRET_FILE", file_.c_str(), 1);
  ASSERT_TRUE(ClusterConfigFromEnv(&c).ok());
  EXPECT_EQ(c.job_secret.size(), 32u);
  EXPECT_EQ(c.job_secret[1], '\x11');
  EXPECT_EQ(std::getenv("TALLY_JOB_SECRET_FILE"), nullptr);
  // A program the node starts sees neither variable.
  EXPECT_EQ(std::system("test -z \"${TALLY_JOB_SECRET_FILE+set}${TALLY_JOB_SECRET+set}\""), 0);
  // A later reader in the same process (tally.bench's roles as threads, a second
  // tally.kv.create) still gets the job's secret.
  ClusterConfig again;
  ASSERT_TRUE(ClusterConfigFromEnv(&again).ok());
  EXPECT_EQ(again.job_secret, c.job_secret);
  // Plain stays plain: a remembered secret does not override TALLY_PLAIN=1.
  setenv("TALLY_PLAIN", "1", 1);
  ClusterConfig plain;
  ASSERT_TRUE(ClusterConfigFromEnv(&plain).ok());
  EXPECT_TRUE(plain.job_secret.empty());
}

TEST_F(JobSecretTest, TheVariableItselfIsAlsoRemoved) {
  unsetenv("TALLY_JOB_SECRET_FILE");
  setenv("TALLY_JOB_SECRET", kHex.c_str(), 1);
  ClusterConfig c;
  ASSERT_TRUE(ClusterConfigFromEnv(&c).ok());
  EXPECT_EQ(c.job_secret[1], '\x11');
  EXPECT_EQ(std::getenv("TALLY_JOB_SECRET"), nullptr);
  EXPECT_EQ(std::system("test -z \"${TALLY_JOB_SECRET+set}\""), 0);
}

TEST_F(JobSecretTest, RefusesASymbolicLink) {
  const std::string link = dir_ + "/link";
  ASSERT_EQ(symlink(file_.c_str(), link.c_str()), 0);
  Status s = ReadFrom(link);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is a symbolic link"), std::string::npos) << s;
  EXPECT_NE(std::getenv("TALLY_JOB_SECRET_FILE"), nullptr) << "nothing was read";
  EXPECT_TRUE(ReadFrom(file_).ok()) << "the file itself is fine";
}

TEST_F(JobSecretTest, RefusesAFileItsGroupOrOthersMayUse) {
  for (mode_t mode : {0640, 0604, 0620, 0601}) {
    ASSERT_EQ(chmod(file_.c_str(), mode), 0);
    Status s = ReadFrom(file_);
    ASSERT_FALSE(s.ok()) << std::oct << mode;
    char expected[32];
    std::snprintf(expected, sizeof(expected), "has mode %04o", static_cast<unsigned>(mode));
    EXPECT_NE(s.message().find(expected), std::string::npos) << s;
  }
  ASSERT_EQ(chmod(file_.c_str(), 0400), 0);
  EXPECT_TRUE(ReadFrom(file_).ok());
}

TEST_F(JobSecretTest, RefusesAFileOfAnotherUser) {
  if (geteuid() != 0) GTEST_SKIP() << "making a file of another user needs root";
  const passwd* nobody = getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  ASSERT_EQ(chown(file_.c_str(), nobody->pw_uid, nobody->pw_gid), 0);
  Status s = ReadFrom(file_);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is owned by uid " + std::to_string(nobody->pw_uid) + ", not by this process's user (uid 0)"),
            std::string::npos) << s;
}

TEST_F(JobSecretTest, RefusesWhatIsNotARegularFileWithoutWaitingOnIt) {
  const std::string fifo = dir_ + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  Status s = ReadFrom(fifo);  // a blocking open would wait here for a writer
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is not a regular file"), std::string::npos) << s;
  s = ReadFrom(dir_);
  EXPECT_NE(s.message().find("is not a regular file"), std::string::npos) << s;
  s = ReadFrom(dir_ + "/none");
  EXPECT_NE(s.message().find("no such file"), std::string::npos) << s;
}

TEST_F(JobSecretTest, RefusesAFileThatIsNotASecret) {
  std::ofstream(file_, std::ios::trunc) << std::string(1000, 'a');
  Status s = ReadFrom(file_);
  EXPECT_NE(s.message().find("is longer than 256 bytes"), std::string::npos) << s;
  std::ofstream(file_, std::ios::trunc) << "abc\n";
  s = ReadFrom(file_);
  EXPECT_NE(s.message().find("must hold 64 hex digits"), std::string::npos) << s;
}

}  // namespace
}  // namespace tally
