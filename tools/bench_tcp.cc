// The physical limits `tally bench ps` compares against, measured in the same run: the
// bandwidth of one plain TCP stream on loopback, and a plain TCP request/response round trip.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include <glog/logging.h>

#include "tools/bench.h"

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

// A connected pair of loopback TCP sockets.
void SocketPair(int* client, int* server) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  CHECK_EQ(listen(listener, 1), 0);
  *client = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_EQ(connect(*client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  *server = accept(listener, nullptr, nullptr);
  close(listener);
  int one = 1;
  setsockopt(*client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(*server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    CHECK_GT(w, 0);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    CHECK_GT(r, 0);
    p += r;
    n -= static_cast<size_t>(r);
  }
}

}  // namespace

double TcpStreamGBps(size_t total_bytes) {
  int a, b;
  SocketPair(&a, &b);
  const size_t chunk = 4 << 20;
  std::vector<char> out(chunk, 1), in(chunk);
  auto t0 = Clock::now();
  std::thread reader([&] {
    for (size_t got = 0; got < total_bytes; got += chunk) ReadAll(b, in.data(), chunk);
  });
  for (size_t sent = 0; sent < total_bytes; sent += chunk) WriteAll(a, out.data(), chunk);
  reader.join();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  close(a);
  close(b);
  return static_cast<double>(total_bytes) / s / 1e9;
}

double TcpRoundTripMedianUs(size_t bytes, int iterations) {
  int a, b;
  SocketPair(&a, &b);
  std::vector<char> buf(bytes, 1), echo(bytes);
  std::thread server([&] {
    for (int i = 0; i < iterations; ++i) {
      ReadAll(b, echo.data(), bytes);
      WriteAll(b, echo.data(), bytes);
    }
  });
  std::vector<double> us;
  for (int i = 0; i < iterations; ++i) {
    auto t0 = Clock::now();
    WriteAll(a, buf.data(), bytes);
    ReadAll(a, buf.data(), bytes);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  server.join();
  close(a);
  close(b);
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace tally
