// Writing a file whole or not at all: the bytes go to PATH.tmp, which is renamed over PATH
// once written, so that a reader never sees half a file (a killed writer leaves at most the
// .tmp behind, never a damaged PATH).
//
//   Status s = WriteFileAtomically("/tmp/m-symbol.json", [&](std::ostream& out) { out << json; });
//
// Fails naming the file when it cannot be opened, written (a full disk) or renamed; the
// .tmp is removed then.
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "base/status.h"

namespace tally {

Status WriteFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write);

}  // namespace tally
