// ScopedTempDir: a directory of one test's own, removed with everything in it when the
// object goes out of scope. It lies under gtest's temporary directory (::testing::TempDir():
// $TEST_TMPDIR, else /tmp) with a unique name (mkdtemp), so tests leave nothing behind and
// two runs of the suite at once never share a file.
//
//   ScopedTempDir dir("loader_test");
//   const std::string rec = dir.Path("uneven.rec");   // <tmp>/tally-loader_test-XXXXXX/uneven.rec
//   ...                                                // removed at the end of the scope
//
// Not thread-safe to share between threads that create files while it is destroyed.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

namespace tally {

class ScopedTempDir {
 public:
  explicit ScopedTempDir(const std::string& name) {
    std::string root = ::testing::TempDir();
    if (!root.empty() && root.back() != '/') root += '/';
    const std::string pattern = root + "tally-" + name + "-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (mkdtemp(buffer.data()) == nullptr) {
      ADD_FAILURE() << "cannot create a directory like " << pattern;
    }
    path_ = buffer.data();
  }
  ~ScopedTempDir() {
    std::error_code ignored;  // a test that failed half-way may have left it half-made
    std::filesystem::remove_all(path_, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  // `name` inside the directory.
  std::string Path(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace tally
