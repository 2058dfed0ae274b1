#include "net/zmtp_receiver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <glog/logging.h>

#include "net/zmtp_connection.h"

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kListenerTag = 0, kWakeTag = 1;  // epoll tags; connections count from 2
constexpr int kListenerPauseMs = 100;                // after running out of file descriptors

std::string Address(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, host, sizeof host);
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof host);
    port = ntohs(v6.sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

class ReceiverImpl : public ZmtpReceiver, public ConnectionOwner {
 public:
  ReceiverImpl(const Options& options, int listen_fd, int epoll_fd, int wake_fd, int port)
      : options_(options), listen_fd_(listen_fd), epoll_fd_(epoll_fd), wake_fd_(wake_fd),
        landing_port_(options.responder == nullptr ? port : 0),
        staging_(kZmtpStagingBytes) {
    Register(listen_fd_, kListenerTag, EPOLLIN);
    Register(wake_fd_, kWakeTag, EPOLLIN);
    thread_ = std::thread([this] { Loop(); });
  }
  ~ReceiverImpl() override { Close(); }

  Status Take(Incoming* in, int timeout_ms) override;
  Counters counters() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return counters_;
  }
  void Close() override;

  // ConnectionOwner: for the connections, on the receiving thread.
  Responder* responder() const override { return options_.responder; }
  size_t max_frame_bytes() const override { return options_.max_frame_bytes; }
  bool reading_paused() const override { return reading_paused_; }
  void CountRejected() override {
    if (options_.rejected != nullptr) ++*options_.rejected;
  }
  void Count(int64_t Counters::*field) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++(counters_.*field);
  }
  void Enqueue(Incoming in) override;
  void Proved(Connection* c) override { unproved_.erase(c->unproved); }
  int landing_port() const override { return landing_port_; }
  void Watch(Connection* c) override;

 private:
  void Register(int fd, uint64_t tag, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = tag;
    PCHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) == 0) << "epoll_ctl";
  }
  void Loop();
  void Accept();
  bool Admit(int fd, const sockaddr_storage& addr);
  void Service(Connection* c, uint32_t events);
  void Drop(Connection* c, const std::string& why);
  void EvictOldestUnproved();
  void SyncPause();
  void LogCounters() const;

  const Options options_;
  const int listen_fd_, epoll_fd_, wake_fd_;
  const int landing_port_;  // plain: the bound port, under which landings are registered
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> closed_once_{false};  // Close has run

  // The receiving thread's.
  std::vector<uint8_t> staging_;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections_;
  std::list<uint64_t> unproved_;  // ids of connections that have not proved the secret, oldest first
  uint64_t next_id_ = 2;
  bool reading_paused_ = false;
  Clock::time_point listener_paused_until_{};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Incoming> queue_;  // GUARDED_BY(mu_)
  bool paused_ = false;         // GUARDED_BY(mu_): queue_ was full; proved connections wait
  bool closed_ = false;         // GUARDED_BY(mu_)
  Counters counters_;           // GUARDED_BY(mu_)
};

// ---- ReceiverImpl ----------------------------------------------------------------------

void ReceiverImpl::Loop() {
  epoll_event events[64];
  while (!stop_) {
    const int n = epoll_wait(epoll_fd_, events, 64, kListenerPauseMs);
    if (n < 0 && errno != EINTR) PLOG(FATAL) << "epoll_wait";
    for (int i = 0; i < n; ++i) {
      const uint64_t tag = events[i].data.u64;
      if (tag == kListenerTag) {
        Accept();
      } else if (tag == kWakeTag) {
        uint64_t count;
        while (read(wake_fd_, &count, sizeof count) > 0) {
        }
      } else if (auto it = connections_.find(tag); it != connections_.end()) {
        Service(it->second.get(), events[i].events);
      }
    }
    SyncPause();
    if (listener_paused_until_ != Clock::time_point{} && Clock::now() >= listener_paused_until_) {
      listener_paused_until_ = {};
      Register(listen_fd_, kListenerTag, EPOLLIN);
    }
  }
}

void ReceiverImpl::Accept() {
  for (int i = 0; i < 64; ++i) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      if (!Admit(fd, addr)) return;
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if ((errno == EMFILE || errno == ENFILE) && !unproved_.empty()) {
      EvictOldestUnproved();
      continue;
    }
    // Out of descriptors with none to take back, or worse: stop listening a moment rather
    // than spin on a listener that stays readable.
    LOG_EVERY_N(WARNING, 100) << "accept: " << std::strerror(errno);
    PCHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, listen_fd_, nullptr) == 0);
    listener_paused_until_ = Clock::now() + std::chrono::milliseconds(kListenerPauseMs);
    return;
  }
}

bool ReceiverImpl::Admit(int fd, const sockaddr_storage& addr) {
  const bool plain = options_.responder == nullptr;
  if (!plain && unproved_.size() >= kMaxUnprovedConnections) EvictOldestUnproved();
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto conn = std::make_unique<Connection>(this, next_id_++, fd, Address(addr), plain);
  Connection* c = conn.get();
  Register(fd, c->id(), EPOLLIN);
  c->watched = EPOLLIN;
  if (!plain) c->unproved = unproved_.insert(unproved_.end(), c->id());
  connections_.emplace(c->id(), std::move(conn));
  Count(&Counters::connections);
  std::string why;
  static const std::string greeting = ZmtpGreeting("ROUTER");
  if (!c->Send(greeting, &why)) Drop(c, why);
  return true;
}

void ReceiverImpl::Service(Connection* c, uint32_t events) {
  std::string why;
  bool ok = true;
  if (events & EPOLLOUT) ok = c->Flush(&why);
  if (ok && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) ok = c->Read(staging_.data(), &why);
  if (!ok) Drop(c, why);
}

void ReceiverImpl::Drop(Connection* c, const std::string& why) {
  if (!why.empty()) {
    LOG_EVERY_N(WARNING, 100) << "closed the connection from " << c->from() << ": " << why << " ("
                              << google::COUNTER << " so far)";
  }
  if (c->over_budget()) {  // the message it was sending is dropped with it
    Count(&Counters::over_budget);
    CountRejected();
  }
  if (!c->proved()) unproved_.erase(c->unproved);
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd(), nullptr);
  connections_.erase(c->id());
}

// Closes the connection that has gone longest without proving the secret: a stranger's,
// most likely; a member mid-handshake sends its HELLO again.
void ReceiverImpl::EvictOldestUnproved() {
  auto it = connections_.find(unproved_.front());
  CHECK(it != connections_.end());
  Count(&Counters::evicted);
  Drop(it->second.get(), "");
}

void ReceiverImpl::Watch(Connection* c) {
  const uint32_t events = (c->proved() && reading_paused_ ? 0u : uint32_t{EPOLLIN}) |
                          (c->wants_output() ? uint32_t{EPOLLOUT} : 0u);
  if (events == c->watched) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = c->id();
  PCHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->fd(), &ev) == 0) << "epoll_ctl";
  c->watched = events;
}

// Follows Take's view of the queue: proved connections are read only while it has room.
void ReceiverImpl::SyncPause() {
  bool paused;
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused = paused_;
  }
  if (paused == reading_paused_) return;
  reading_paused_ = paused;
  for (auto& [id, c] : connections_) {
    if (c->proved()) Watch(c.get());
  }
}

void ReceiverImpl::Enqueue(Incoming in) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(in));
    if (queue_.size() >= kQueuedMessages) paused_ = true;
  }
  cv_.notify_one();
}

Status ReceiverImpl::Take(Incoming* in, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return closed_ || !queue_.empty(); };
  if (timeout_ms < 0) {
    cv_.wait(lock, ready);
  } else if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready)) {
    return Status::Unavailable("no message within " + std::to_string(timeout_ms) + " ms");
  }
  if (queue_.empty()) return Status::Unavailable("transport closed");
  *in = std::move(queue_.front());
  queue_.pop_front();
  if (paused_ && queue_.size() <= kQueuedMessages / 2) {
    paused_ = false;
    const uint64_t one = 1;
    PCHECK(write(wake_fd_, &one, sizeof one) == sizeof one) << "wake the receiver";
  }
  return Status::Ok();
}

void ReceiverImpl::LogCounters() const {
  if (options_.responder == nullptr) return;
  const Counters c = counters();
  LOG(INFO) << "receiver: " << c.connections << " connections, " << c.proved << " proved the job's secret, "
            << c.over_budget << " closed past the unproved budget, " << c.evicted << " closed to make room, "
            << c.rate_limited << " handshakes over the rate";
}

void ReceiverImpl::Close() {
  if (closed_once_.exchange(true)) return;
  stop_ = true;
  const uint64_t one = 1;
  PCHECK(write(wake_fd_, &one, sizeof one) == sizeof one) << "wake the receiver";
  thread_.join();
  connections_.clear();
  close(listen_fd_);
  close(epoll_fd_);
  close(wake_fd_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    for (Incoming& in : queue_) ReleaseFrames(&in.frames);
    queue_.clear();
  }
  cv_.notify_all();
  LogCounters();
}

Status ListenOn(const std::string& host, int port, int* fd, int* bound_port) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  // An address literal binds that interface only; a name (localhost, a host name) binds all.
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    len = sizeof *v6;
  } else {
    if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) != 1) v4->sin_addr.s_addr = htonl(INADDR_ANY);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    len = sizeof *v4;
  }
  const std::string endpoint = "tcp://" + host + ":" + std::to_string(port);
  *fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (*fd < 0) return Status::Unavailable("cannot bind " + endpoint + ": socket: " + std::strerror(errno));
  const int one = 1;
  setsockopt(*fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(*fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(*fd, 1024) != 0 ||
      getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    Status s = Status::Unavailable("cannot bind " + endpoint + ": " + std::strerror(errno));
    close(*fd);
    return s;
  }
  *bound_port = ntohs(addr.ss_family == AF_INET6 ? v6->sin6_port : v4->sin_port);
  return Status::Ok();
}

}  // namespace

Status ZmtpReceiver::Start(const std::string& host, int port, const Options& options,
                           std::unique_ptr<ZmtpReceiver>* out, int* bound_port) {
  int listen_fd = -1;
  TALLY_RETURN_IF_ERROR(ListenOn(host, port, &listen_fd, bound_port));
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  const int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  PCHECK(epoll_fd >= 0 && wake_fd >= 0) << "epoll_create1 / eventfd";
  *out = std::make_unique<ReceiverImpl>(options, listen_fd, epoll_fd, wake_fd, *bound_port);
  return Status::Ok();
}

}  // namespace tally
