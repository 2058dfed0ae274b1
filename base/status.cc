#include "base/status.h"

namespace tally {

std::string Status::ToString() const {
  switch (code_) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "invalid argument: " + message_;
    case Code::kNotFound: return "not found: " + message_;
    case Code::kIoError: return "I/O error: " + message_;
    case Code::kUnavailable: return "unavailable: " + message_;
    case Code::kInternal: return "internal error: " + message_;
  }
  return message_;
}

}  // namespace tally
