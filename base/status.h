// Status: the result of an operation that can fail because of the outside world
// (a flag, a file, a peer, a malformed input). Broken invariants inside Tally are
// CHECK failures instead (glog), never a Status.
//
//   Status s = ParseDevice("cpu:1", &dev);
//   if (!s.ok()) { LOG(ERROR) << s; return 1; }
//
// Thread-safety: a Status is a value; copies are independent.
#pragma once

#include <ostream>
#include <string>
#include <utility>

namespace tally {

class Status {
 public:
  enum class Code { kOk = 0, kInvalidArgument, kNotFound, kIoError, kUnavailable, kInternal };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return Status(Code::kInvalidArgument, std::move(msg)); }
  static Status NotFound(std::string msg) { return Status(Code::kNotFound, std::move(msg)); }
  static Status IoError(std::string msg) { return Status(Code::kIoError, std::move(msg)); }
  static Status Unavailable(std::string msg) { return Status(Code::kUnavailable, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(Code::kInternal, std::move(msg)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const;

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

inline std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

}  // namespace tally

// Returns early from the calling function when `expr` yields a failed Status.
#define TALLY_RETURN_IF_ERROR(expr)          \
  do {                                       \
    ::tally::Status _tally_s = (expr);       \
    if (!_tally_s.ok()) return _tally_s;     \
  } while (0)
