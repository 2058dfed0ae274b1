// `tally train --tensorboard DIR`: TensorBoard curves, one run folder per process that has
// some: DIR/worker-R (worker/fit_board.h: loss, accuracy, lr, speed, skipped steps, loss
// scale, data wait and comm share, each epoch's validation) and DIR/server-R (each step's
// sum and update time, requests, megabytes received and sent). tools/launch.py gives the
// flag to every process of the job with the rest of the command. docs/tensorboard.md.
//
//   std::unique_ptr<FitBoard> board;                       // a worker
//   TALLY_RETURN_IF_ERROR(OpenWorkerBoard(trainer, rank, top_k, &board));  // null without the flag
//   if (board) board->Attach(&callbacks);
//
//   ServerBoard server_board;                              // a server
//   server_board.Attach(&observer);                        // nothing without the flag
//   RunServer(c, std::move(transport), observer);          // server_board outlives it
#pragma once

#include <chrono>
#include <memory>

#include "server/server.h"
#include "tensorboard/event_writer.h"
#include "worker/fit_board.h"
#include "worker/trainer.h"

namespace tally {

// The worker's board in --tensorboard's DIR/worker-RANK, reading trainer's loss scale (the
// trainer must outlive it); *board stays null when the flag is empty. Fails naming the
// folder or file it cannot create.
Status OpenWorkerBoard(const Trainer* trainer, int rank, int top_k, std::unique_ptr<FitBoard>* board);

// The server's board: opened in DIR/server-RANK once the server has joined (its rank known),
// a step's scalars written with its record (ServerObserver::step, on the server's receive
// thread: the records go through a buffer written out at most once a second and at the end).
// A failure to open or write is printed once and the server serves on without the board.
class ServerBoard {
 public:
  // Wraps observer's joined and step (after the observer's own); nothing without --tensorboard.
  void Attach(ServerObserver* observer);

 private:
  void Open(int rank);
  void AddStep(const profile::StepRecord& record);
  void Report(const Status& s);

  std::unique_ptr<tensorboard::EventWriter> writer_;
  std::chrono::steady_clock::time_point flushed_;
};

}  // namespace tally
