#include "models/atomic_file.h"

#include <cstdio>
#include <fstream>

namespace tally {

Status WriteFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return Status::IoError(tmp + ": cannot open for writing");
    write(f);
    f.flush();
    if (!f) {
      f.close();
      std::remove(tmp.c_str());
      return Status::IoError(tmp + ": write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::IoError(path + ": cannot rename " + tmp + " into place");
  }
  return Status::Ok();
}

}  // namespace tally
