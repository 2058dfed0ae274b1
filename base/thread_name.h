// NameThisThread: names the calling thread as `ps -L`, top's thread view, perf and
// tools/bench/thread_load.py show it, so that a thread's CPU per step can be told apart
// (the serving thread from the pool's, the sending thread from the receiving one).
//
//   thread_ = std::thread([this] { NameThisThread("tally-send"); Loop(); });
//
// Linux keeps 15 bytes of a name: longer ones are cut.
#pragma once

#include <pthread.h>

#include <string>

namespace tally {

inline void NameThisThread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace tally
