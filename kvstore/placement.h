// Placement: which server holds which part of every key, a pure function of the key sizes
// and the server count, computed identically on every node.
//
//   std::vector<int64_t> sizes = {9408, 64, 64, ..., 2048000, 1000};   // elements per key
//   Placement p = Placement::Compute(sizes, /*num_servers=*/4);
//   for (const Placement::Slice& s : p.slices(key)) { send [s.offset, s.offset + s.length) to s.server }
//
// Rule: a key larger than the slicing bound is cut into one contiguous slice per server
// (lengths differ by at most one element, server 0 first). Each other key goes whole to the
// server holding the fewest elements so far, taken in order of decreasing size (ties: the
// lower key, the lower server). The bound is MXNet's 10^6 elements, lowered to 2% of a
// server's mean load (but not below 4096) when that is smaller: greedy placement ends
// within one whole key of the mean, so no whole key may be larger than the imbalance
// allowed (ResNet-50: max/mean <= 1.02 at 2 to 16 servers).
//
// Finally a slice longer than kPartElements (2^20) is cut into that many equal consecutive
// parts as it needs, all on its server, so that a large key streams as several requests.
//
// Example, 2 servers, sizes {3000000, 500, 400, 300}: the bound is max(4096, 2% of
// 1500600) = 30012, so key 0 is cut: server 0 [0, 1500000), server 1 [1500000, 3000000).
// Key 1 (500) -> server 0 (equal loads: the lower rank); key 2 (400) -> server 1; key 3
// (300) -> server 1, which holds 1500400 elements to server 0's 1500500. Key 0's two
// slices of 1500000 are then each cut in two parts of 750000.
#pragma once

#include <cstdint>
#include <vector>

namespace tally {

class Placement {
 public:
  static constexpr int64_t kSliceAbove = 1000000;  // MXNet's bigarray bound
  static constexpr int64_t kMinSliceBound = 4096;
  static constexpr double kMaxImbalance = 0.02;
  // Longer slices are cut into equal consecutive parts on their server (4 MB of fp32).
  static constexpr int64_t kPartElements = 1 << 20;

  struct Slice {
    int server;
    int64_t offset;  // elements from the key's start
    int64_t length;
  };

  // REQUIRES: num_servers >= 1, sizes >= 0.
  static Placement Compute(const std::vector<int64_t>& key_sizes, int num_servers);

  const std::vector<Slice>& slices(int key) const { return slices_[key]; }
  int num_keys() const { return static_cast<int>(slices_.size()); }
  int num_servers() const { return num_servers_; }
  int64_t slice_bound() const { return slice_bound_; }
  // Elements held by each server.
  std::vector<int64_t> ServerLoads() const;

 private:
  static std::vector<Slice> CutIntoParts(const std::vector<Slice>& slices);

  int num_servers_ = 1;
  int64_t slice_bound_ = kSliceAbove;
  std::vector<std::vector<Slice>> slices_;
};

}  // namespace tally
