// EventWriter: one TensorBoard event file of scalar curves, in a run's folder, that
// TensorBoard (`tensorboard --logdir DIR`) and its EventAccumulator read.
//
//   std::unique_ptr<tensorboard::EventWriter> writer;
//   TALLY_RETURN_IF_ERROR(tensorboard::EventWriter::Open("runs/job/worker-0", &writer));
//   TALLY_RETURN_IF_ERROR(writer->AddScalars(step, {{"train/loss", 0.71}, {"train/accuracy", 0.62}}));
//   TALLY_RETURN_IF_ERROR(writer->Flush());  // readers see them now
//
// Open creates the folder (and its parents) and the file events.out.tfevents.SECS.HOST
// (".PID" added when a file of that name exists already), whose first record is the event
// with file_version "brain.Event:2" (docs/tensorboard.md). Each AddScalars is one event of
// one Summary holding every value. Records go through a buffer: Flush, or the destructor,
// writes them out. After a failure (a full disk), every later call returns that failure
// and writes nothing more. Not thread-safe: one thread at a time.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace tally {
namespace tensorboard {

class Event;

struct Scalar {
  std::string tag;  // the curve: "train/loss"; '/' groups curves in TensorBoard's page
  double value = 0;  // stored as a float (TensorFlow's simple_value)
};

class EventWriter {
 public:
  static Status Open(const std::string& dir, std::unique_ptr<EventWriter>* out);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One event at `step` (the curves' x axis), stamped with the wall-clock time now.
  Status AddScalars(int64_t step, const std::vector<Scalar>& scalars);
  Status Flush();
  const std::string& path() const { return path_; }

 private:
  EventWriter(FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  Status Append(const Event& event);

  FILE* file_;
  std::string path_;
  uint64_t offset_ = 0;  // of the next record, for the failure's message
  Status failed_;
};

// Seconds since 1970-01-01 UTC, with the fraction: an event's wall_time.
double WallTimeSeconds();

}  // namespace tensorboard
}  // namespace tally
