#include "tensorboard/event_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "tensorboard/event.pb.h"
#include "tensorboard/record_format.h"

namespace tally {
namespace tensorboard {
namespace {

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

// Creates `path` for writing, failing if it exists: two writers never share a file (a run
// resumed within the same second on the same host gets its own).
Status CreateNew(const std::string& path, FILE** file) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError(path + ": " + std::strerror(errno));
  *file = fdopen(fd, "wb");
  if (*file == nullptr) {
    const Status s = Status::IoError(path + ": " + std::strerror(errno));
    close(fd);
    return s;
  }
  return Status::Ok();
}

}  // namespace

double WallTimeSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Status EventWriter::Open(const std::string& dir, std::unique_ptr<EventWriter>* out) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError("cannot create the folder " + dir + ": " + ec.message());
  const double now = WallTimeSeconds();
  const std::string base = dir + "/" + kFilePrefix + std::to_string(static_cast<int64_t>(now)) + "." + HostName();
  FILE* file = nullptr;
  std::string path = base;
  Status s = CreateNew(path, &file);
  if (!s.ok()) {
    path = base + "." + std::to_string(getpid());
    s = CreateNew(path, &file);
  }
  if (!s.ok()) return Status::IoError("cannot create an event file: " + s.message());
  std::unique_ptr<EventWriter> writer(new EventWriter(file, path));
  Event first;
  first.set_wall_time(now);
  first.set_file_version(kFileVersion);
  TALLY_RETURN_IF_ERROR(writer->Append(first));
  TALLY_RETURN_IF_ERROR(writer->Flush());
  *out = std::move(writer);
  return Status::Ok();
}

EventWriter::~EventWriter() {
  if (failed_.ok()) Flush();
  std::fclose(file_);
}

Status EventWriter::AddScalars(int64_t step, const std::vector<Scalar>& scalars) {
  Event event;
  event.set_wall_time(WallTimeSeconds());
  event.set_step(step);
  Summary* summary = event.mutable_summary();
  for (const Scalar& s : scalars) {
    Summary::Value* v = summary->add_value();
    v->set_tag(s.tag);
    v->set_simple_value(static_cast<float>(s.value));
  }
  return Append(event);
}

Status EventWriter::Append(const Event& event) {
  if (!failed_.ok()) return failed_;
  const std::string record = FrameRecord(event.SerializeAsString());
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size()) {
    failed_ = Status::IoError(path_ + ": writing the record at byte " + std::to_string(offset_) + ": " +
                              std::strerror(errno));
    return failed_;
  }
  offset_ += record.size();
  return Status::Ok();
}

Status EventWriter::Flush() {
  if (!failed_.ok()) return failed_;
  if (std::fflush(file_) != 0) {
    failed_ = Status::IoError(path_ + ": writing the records before byte " + std::to_string(offset_) + ": " +
                              std::strerror(errno));
  }
  return failed_;
}

}  // namespace tensorboard
}  // namespace tally
