// Test-only fault injection: a Transport that loses, repeats, delays and reorders what it
// sends, by the numbers of a FaultSpec and a seeded generator. Sits below the reliable
// layer (job_transport.cc), which must make up for all of it.
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <glog/logging.h>

#include "net/transport.h"

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

class FaultyTransport : public Transport {
 public:
  FaultyTransport(std::unique_ptr<Transport> inner, const FaultSpec& spec)
      : inner_(std::move(inner)), spec_(spec), rng_(spec.seed) {
    timer_ = std::thread([this] { TimerLoop(); });
  }
  ~FaultyTransport() override { Close(); }

  Status Bind(const std::string& host, int port, int* bound_port) override {
    return inner_->Bind(host, port, bound_port);
  }
  Status Connect(int id, const std::string& host, int port, const std::string& peer) override {
    return inner_->Connect(id, host, port, peer);
  }
  Status Recv(Message* msg, int timeout_ms) override { return inner_->Recv(msg, timeout_ms); }

  Status Send(int id, const Message& msg) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (Draw(spec_.drop)) {
      ++dropped_;
      return Status::Ok();
    }
    const int copies = Draw(spec_.dup) ? 2 : 1;
    for (int i = 0; i < copies; ++i) {
      int delay = 0;
      if (spec_.delay_max_ms > 0) {
        delay = std::uniform_int_distribution<int>(spec_.delay_min_ms, spec_.delay_max_ms)(rng_);
      }
      if (Draw(spec_.reorder)) delay = std::max(delay, kReorderHoldMs);
      if (delay > 0) {
        // Queued messages to one peer go out in due order, so a later message with a
        // shorter delay overtakes an earlier one: that is the reordering.
        queue_.emplace(Clock::now() + std::chrono::milliseconds(delay), Pending{id, msg});
        cv_.notify_all();
        continue;
      }
      lock.unlock();
      Status s = inner_->Send(id, msg);
      lock.lock();
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  void Close() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;
      closed_ = true;
      if (dropped_ > 0) LOG(INFO) << "fault injection dropped " << dropped_ << " messages";
    }
    cv_.notify_all();
    timer_.join();
    inner_->Close();
  }

 private:
  static constexpr int kReorderHoldMs = 30;
  struct Pending {
    int id;
    Message msg;
  };

  bool Draw(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  void TimerLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!closed_) {
      if (queue_.empty()) {
        cv_.wait(lock);
        continue;
      }
      auto due = queue_.begin()->first;
      if (Clock::now() < due) {
        cv_.wait_until(lock, due);
        continue;
      }
      Pending p = std::move(queue_.begin()->second);
      queue_.erase(queue_.begin());
      lock.unlock();
      Status s = inner_->Send(p.id, p.msg);
      if (!s.ok()) LOG(WARNING) << "fault injection: delayed send to node " << p.id << ": " << s.message();
      lock.lock();
    }
  }

  std::unique_ptr<Transport> inner_;
  const FaultSpec spec_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::mt19937_64 rng_;                            // GUARDED_BY(mu_)
  std::multimap<Clock::time_point, Pending> queue_;  // GUARDED_BY(mu_)
  bool closed_ = false;                            // GUARDED_BY(mu_)
  int64_t dropped_ = 0;                            // GUARDED_BY(mu_)
  std::thread timer_;
};

Status ParseProbability(const std::string& name, const std::string& value, double* out) {
  char* end = nullptr;
  double p = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(p >= 0 && p < 1)) {
    return Status::InvalidArgument("TALLY_TEST_FAULTS: " + name + "=" + value + " is not a probability in [0, 1)");
  }
  *out = p;
  return Status::Ok();
}

Status ParseCount(const std::string& what, const std::string& value, long long hi, long long* out) {
  char* end = nullptr;
  long long x = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || x < 0 || x > hi) {
    return Status::InvalidArgument("TALLY_TEST_FAULTS: " + what + " " + value + " is not an integer in [0, " +
                                   std::to_string(hi) + "]");
  }
  *out = x;
  return Status::Ok();
}

}  // namespace

std::string FaultSpec::ToString() const {
  std::ostringstream s;
  s << "drop=" << drop << ",dup=" << dup << ",reorder=" << reorder << ",delay_ms=" << delay_min_ms << "-"
    << delay_max_ms << ",seed=" << seed;
  return s.str();
}

Status ParseFaultSpec(const std::string& text, FaultSpec* spec) {
  FaultSpec out;
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) {
      return Status::InvalidArgument("TALLY_TEST_FAULTS: '" + item + "' is not name=value");
    }
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    if (name == "drop") {
      TALLY_RETURN_IF_ERROR(ParseProbability(name, value, &out.drop));
    } else if (name == "dup") {
      TALLY_RETURN_IF_ERROR(ParseProbability(name, value, &out.dup));
    } else if (name == "reorder") {
      TALLY_RETURN_IF_ERROR(ParseProbability(name, value, &out.reorder));
    } else if (name == "delay_ms") {
      const size_t dash = value.find('-');
      long long lo = 0, hi = 0;
      TALLY_RETURN_IF_ERROR(ParseCount("delay_ms", value.substr(0, dash), 60000, &lo));
      hi = lo;
      if (dash != std::string::npos) TALLY_RETURN_IF_ERROR(ParseCount("delay_ms", value.substr(dash + 1), 60000, &hi));
      if (hi < lo) return Status::InvalidArgument("TALLY_TEST_FAULTS: delay_ms=" + value + " ends before it starts");
      out.delay_min_ms = static_cast<int>(lo);
      out.delay_max_ms = static_cast<int>(hi);
    } else if (name == "seed") {
      long long seed = 0;
      TALLY_RETURN_IF_ERROR(ParseCount("seed", value, (1LL << 62), &seed));
      out.seed = static_cast<uint64_t>(seed);
    } else {
      return Status::InvalidArgument("TALLY_TEST_FAULTS: unknown fault '" + name +
                                     "' (expected drop, dup, reorder, delay_ms, seed)");
    }
  }
  *spec = out;
  return Status::Ok();
}

std::unique_ptr<Transport> NewFaultyTransport(std::unique_ptr<Transport> inner, const FaultSpec& spec) {
  return std::make_unique<FaultyTransport>(std::move(inner), spec);
}

}  // namespace tally
