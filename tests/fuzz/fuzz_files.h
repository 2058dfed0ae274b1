// Real files for the harnesses of file formats (ndarray, safetensors, checkpoint): the
// readers open paths, and the writers write beside a path and rename, so the input goes
// through a directory of the process's own. It lies in /dev/shm when that is writable
// (tmpfs: the checkpoint writer's fsyncs cost nothing), else under $TMPDIR, and is removed
// at exit (libFuzzer's end of a time-bounded run calls exit).
//
//   static FuzzDir* dir = new FuzzDir("ndarray");
//   dir->Write("in.params", bytes);
//   ReadNDArrayFile(dir->Path("in.params"), &f);
//
// One per process; not thread-safe: a harness runs one input at a time.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <glog/logging.h>

namespace tally {
namespace fuzz {

class FuzzDir {
 public:
  explicit FuzzDir(const std::string& name) {
    const char* tmp = std::getenv("TMPDIR");
    const std::string root = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (tmp && *tmp ? tmp : "/tmp");
    std::string pattern = root + "/tally-fuzz-" + name + "-XXXXXX";
    PCHECK(mkdtemp(pattern.data()) != nullptr) << pattern;
    path_ = pattern;
    ToRemoveAtExit() = path_;
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(ToRemoveAtExit(), ignored);
    });
  }

  std::string Path(const std::string& name) const { return path_ + "/" + name; }

  void Write(const std::string& name, std::string_view bytes) const {
    std::ofstream out(Path(name), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    CHECK(out.good()) << "cannot write " << Path(name);
  }

  std::string Read(const std::string& name) const {
    std::ifstream in(Path(name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Removes every file in the directory (the writers' leftovers of the last input).
  void Clear() const {
    std::error_code ignored;
    for (const auto& e : std::filesystem::directory_iterator(path_, ignored)) std::filesystem::remove(e.path(), ignored);
  }

 private:
  // REQUIRES: one FuzzDir per process (a harness makes it once, at initialisation).
  static std::string& ToRemoveAtExit() {
    static std::string* dir = new std::string;  // never destroyed: used by the atexit handler
    return *dir;
  }

  std::string path_;
};

}  // namespace fuzz
}  // namespace tally
