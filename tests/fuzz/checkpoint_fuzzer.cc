// libFuzzer harness: hostile checkpoints (a .params and its .states, and their metadata)
// through LoadCheckpoint, as `tally train --load-epoch` and `--resume auto` read them.
//
// Each input is a flags byte, the .params bytes (length-prefixed) and the .states bytes
// (layout in docs/fuzzing.md). The harness writes them as checkpoint 1 of a prefix (the
// .states as .states.prev when the flags say so, as a writer killed between its renames
// leaves it) and loads it.
//
// Besides crashes, leaks and undefined behaviour, it checks what a loaded checkpoint
// promises its users: the epoch is the number asked for, batch and step are not negative,
// every tensor is defined and no larger than the input, the file bookkeeping (format,
// version, checkpoint id, position) is not in `info`, and LatestCheckpoint finds the same
// checkpoint.
#include <cstdint>
#include <string>

#include <glog/logging.h>

#include "tests/fuzz/fuzz_files.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/layouts.h"
#include "worker/checkpoint.h"

namespace tally {
namespace fuzz {
namespace {

FuzzDir* dir;

void CheckLoaded(const Checkpoint& c, size_t size) {
  CHECK_EQ(c.epoch, 1);
  CHECK_GE(c.batch, 0);
  CHECK_GE(c.step, 0);
  for (const auto* list : {&c.params, &c.states}) {
    for (const NamedTensor& t : *list) {
      CHECK(t.tensor.defined()) << t.name;
      CHECK_LE(t.tensor.nbytes(), size) << t.name << ": " << t.tensor.ToString();
    }
  }
  for (const char* key : {"format", "version", "checkpoint", "epoch", "batch", "step"}) {
    CHECK_EQ(c.info.count(key), 0u) << "'" << key << "' leaked into info";
  }
  int64_t latest = -1;
  const Status s = LatestCheckpoint(dir->Path("m"), &latest);
  CHECK(s.ok() && latest == 1) << "LatestCheckpoint does not find the checkpoint that loads: " << s;
}

}  // namespace

int FuzzOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t flags = in.Byte();
  const std::string_view params = in.Bytes(in.Le16());
  const std::string_view states = in.Rest();
  dir->Clear();
  dir->Write("m-0001.params", params);
  dir->Write((flags & kCheckpointStatesAsPrev) ? "m-0001.states.prev" : "m-0001.states", states);
  Checkpoint c;
  if (LoadCheckpoint(dir->Path("m"), 1, &c).ok()) CheckLoaded(c, size);
  return 0;
}

}  // namespace fuzz
}  // namespace tally

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  FLAGS_logtostderr = true;
  tally::fuzz::dir = new tally::fuzz::FuzzDir("checkpoint");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tally::fuzz::FuzzOneInput(data, size);
}
