#include "net/landing.h"

#include <chrono>

#include <glog/logging.h>

#include "net/wire.pb.h"

namespace tally {

bool AnswerMayLand(int port, const wire::Meta& m, LandingKey* key) {
  if (m.command() != wire::RESPONSE || m.slices_size() != 1 || !m.error().empty()) return false;
  *key = LandingKey{port, m.receiver_id(), m.request_id()};
  return true;
}

Landings& Landings::Get() {
  static Landings* landings = new Landings;  // never destroyed: receivers may outlive main's locals
  return *landings;
}

int64_t Landings::Count(int port) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = per_port_.find(port);
  return it == per_port_.end() ? 0 : it->second;
}

void Landings::Add(const LandingKey& key, void* dst, size_t bytes, int dtype) {
  std::lock_guard<std::mutex> l(mu_);
  auto [it, fresh] = landings_.try_emplace(key);
  if (!fresh) return;  // the same request registered twice: the first stands
  it->second.dst = dst;
  it->second.bytes = bytes;
  it->second.dtype = dtype;
  if (per_port_[key.port]++ == 0) ports_with_landings_.fetch_add(1, std::memory_order_relaxed);
}

void* Landings::Claim(const LandingKey& key, size_t bytes, int dtype) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = landings_.find(key);
  if (it == landings_.end()) return nullptr;
  Landing& d = it->second;
  if (d.state != State::kFree || d.removed || d.bytes != bytes || d.dtype != dtype) return nullptr;
  d.state = State::kReading;
  return d.dst;
}

void Landings::Landed(const LandingKey& key) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = landings_.find(key);
    if (it == landings_.end() || it->second.state != State::kReading) return;
    it->second.state = State::kDone;
    landed_.fetch_add(1, std::memory_order_relaxed);
    if (it->second.removed) EraseLocked(it);
  }
  landed_cv_.notify_all();
}

void Landings::EraseLocked(std::map<LandingKey, Landing>::iterator it) {
  auto p = per_port_.find(it->first.port);
  if (--p->second == 0) {
    per_port_.erase(p);
    ports_with_landings_.fetch_sub(1, std::memory_order_relaxed);
  }
  landings_.erase(it);
}

void Landings::Remove(const LandingKey& key, bool wait) {
  std::unique_lock<std::mutex> l(mu_);
  auto it = landings_.find(key);
  if (it == landings_.end()) return;
  if (it->second.state == State::kReading) {
    if (!wait) {
      it->second.removed = true;
      return;
    }
    // A frame is being read into it: its answer is on the wire (the request was dropped or
    // failed meanwhile). Its connection ends the frame or closes; a minute is far beyond.
    const bool done = landed_cv_.wait_for(l, std::chrono::minutes(1), [&] {
      auto now = landings_.find(key);
      return now == landings_.end() || now->second.state != State::kReading;
    });
    it = landings_.find(key);
    if (it == landings_.end()) return;
    if (!done) {
      LOG(WARNING) << "kvstore: a frame for request " << key.request << " still arriving a minute after the request "
                   << "was finished; leaving it";
      it->second.removed = true;
      return;
    }
  }
  EraseLocked(it);
}

}  // namespace tally
