#include "tools/train_board.h"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <gflags/gflags.h>

#include "net/cluster.h"
#include "worker/trainer.h"

DEFINE_string(tensorboard, "", "write TensorBoard event files of the training curves under this folder, one run "
              "folder per worker (worker-R) and server (server-R): tensorboard --logdir DIR");

namespace tally {

Status OpenWorkerBoard(const Trainer* trainer, int rank, int top_k, std::unique_ptr<FitBoard>* board) {
  board->reset();
  if (FLAGS_tensorboard.empty()) return Status::Ok();
  std::unique_ptr<tensorboard::EventWriter> writer;
  Status s = tensorboard::EventWriter::Open(FLAGS_tensorboard + "/worker-" + std::to_string(rank), &writer);
  if (!s.ok()) return Status::IoError("--tensorboard: " + s.message());
  board->reset(new FitBoard(std::move(writer), [trainer] { return trainer->loss_scaler().scale(); }, top_k));
  return Status::Ok();
}

void ServerBoard::Attach(ServerObserver* observer) {
  if (FLAGS_tensorboard.empty()) return;
  auto joined = std::move(observer->joined);
  observer->joined = [this, joined](const Cluster& cluster) {
    if (joined) joined(cluster);
    Open(cluster.me().rank());
  };
  auto step = std::move(observer->step);
  observer->step = [this, step](const profile::StepRecord& r) {
    if (step) step(r);
    AddStep(r);
  };
}

void ServerBoard::Open(int rank) {
  Status s = tensorboard::EventWriter::Open(FLAGS_tensorboard + "/server-" + std::to_string(rank), &writer_);
  if (!s.ok()) Report(s);
  flushed_ = std::chrono::steady_clock::now();
}

void ServerBoard::AddStep(const profile::StepRecord& r) {
  if (writer_ == nullptr) return;
  using profile::Phase;
  constexpr double kMs = 1e-3, kMb = 1.0 / (1 << 20);
  Status s = writer_->AddScalars(r.step, {{"server/step_ms", r.dur_us * kMs},
                                          {"server/sum_ms", r.phase(Phase::kSum) * kMs},
                                          {"server/update_ms", r.phase(Phase::kUpdate) * kMs},
                                          {"server/requests", static_cast<double>(r.requests)},
                                          {"server/received_mb", r.bytes_in * kMb},
                                          {"server/sent_mb", r.bytes_out * kMb}});
  const auto now = std::chrono::steady_clock::now();
  if (s.ok() && now - flushed_ >= std::chrono::seconds(1)) {
    s = writer_->Flush();
    flushed_ = now;
  }
  if (!s.ok()) Report(s);
}

void ServerBoard::Report(const Status& s) {
  std::fprintf(stderr, "tally server: --tensorboard: %s; no more curves are written, serving goes on\n",
               s.ToString().c_str());
  writer_.reset();
}

}  // namespace tally
