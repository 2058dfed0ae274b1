// libFuzzer harness: hostile frames through DecodeMessage into a KVServer.
//
// Each input is a job (servers, workers, step recorder) and a sequence of messages, each a
// list of frames (layout in docs/fuzzing.md). Every frame is copied into a buffer of its
// own, exactly sized so that AddressSanitizer sees any read past it and at the
// misalignment the input asks for (ZeroMQ hands over small frames wherever they lay in its
// receive buffer), and released through WireFrame::release as the transport does. Messages
// that decode go to one KVServer, which lives for the whole input, so that sequences
// (INIT, PUSH from every worker, PULL of a later step, ...) reach the server's deeper states.
//
// Besides crashes, leaks and undefined behaviour, the harness checks what the server
// promises (server.h): every answer goes to the request's sender as a RESPONSE, decodes
// again, and answers (with the pulls still waiting) never outnumber the requests.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <glog/logging.h>
#include <google/protobuf/stubs/logging.h>

#include "server/server.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/layouts.h"

namespace tally {
namespace fuzz {
namespace {

// One received frame: `size` bytes at `misalign` past a fresh allocation's start.
WireFrame CopyFrame(std::string_view bytes, int misalign) {
  char* block = new char[bytes.size() + misalign];
  std::memcpy(block + misalign, bytes.data(), bytes.size());
  return WireFrame{block + misalign, bytes.size(), [block] { delete[] block; }};
}

// The frames of a message that was sent, as the peer would receive them.
std::vector<WireFrame> Received(const Message& msg) {
  std::vector<WireFrame> frames;
  for (const std::string& f : MessageFrames(msg)) frames.push_back(CopyFrame(f, 0));
  return frames;
}

void CheckAnswer(int to, const Message& answer, const std::set<std::pair<int, uint64_t>>& requests) {
  CHECK_EQ(answer.meta.command(), wire::RESPONSE);
  CHECK_EQ(to, answer.meta.receiver_id());
  CHECK(requests.count({to, answer.meta.request_id()}))
      << "an answer to request " << answer.meta.request_id() << " of node " << to << ", which it never sent";
  Message back;
  Status s = DecodeMessage(Received(answer), &back);
  CHECK(s.ok()) << "the server's answer does not decode: " << s;
  CHECK_EQ(back.meta.SerializeAsString(), answer.meta.SerializeAsString());
  CHECK_EQ(back.data.size(), answer.data.size());
  for (size_t i = 0; i < back.data.size(); ++i) {
    CHECK_EQ(std::memcmp(back.data[i].raw_data(), answer.data[i].raw_data(), answer.data[i].nbytes()), 0);
  }
}

}  // namespace

int FuzzOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  const uint8_t job = in.Byte();
  const int num_servers = 1 + (job & 1);
  const int num_workers = 1 + ((job >> 1) & 3);

  std::set<std::pair<int, uint64_t>> requests;  // (sender, request id) of every request handled
  size_t handled = 0, answers = 0;
  KVServer server(num_servers, num_workers, [&](int id, Message msg) {
    CheckAnswer(id, msg, requests);
    ++answers;
    return Status::Ok();
  });
  if (job & 8) server.SetStepRecorder([](const profile::StepRecord&) {});

  while (!in.empty()) {
    const uint8_t head = in.Byte();
    const int num_frames = head & 7;
    const int misalign = (head >> 3) & 3;
    std::vector<WireFrame> frames;
    for (int i = 0; i < num_frames; ++i) {
      const size_t n = in.Le16();
      frames.push_back(CopyFrame(in.Bytes(n), i == 0 ? 0 : misalign));
    }
    Message msg;
    if (!DecodeMessage(std::move(frames), &msg).ok()) continue;
    if (msg.meta.command() != wire::RESPONSE) {
      requests.insert({msg.meta.sender_id(), msg.meta.request_id()});
      ++handled;
    }
    server.Handle(std::move(msg));
    // A duplicate may go unanswered (its first copy was), but no request gets two answers.
    CHECK_LE(answers + static_cast<size_t>(server.NumWaitingPulls()), handled)
        << "more answers than requests (" << answers << " answers, " << server.NumWaitingPulls()
        << " pulls waiting, " << handled << " requests)";
  }
  server.FlushSteps();
  return 0;
}

}  // namespace fuzz
}  // namespace tally

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Every refused message logs a warning, and protobuf an error for each string field that
  // is not UTF-8: shown only when reproducing by hand.
  if (!std::getenv("TALLY_FUZZ_LOG")) {
    FLAGS_minloglevel = google::GLOG_ERROR;
    google::protobuf::SetLogHandler(nullptr);
  }
  FLAGS_logtostderr = true;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return tally::fuzz::FuzzOneInput(data, size);
}
