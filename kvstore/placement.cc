#include "kvstore/placement.h"

#include <algorithm>
#include <numeric>

#include <glog/logging.h>

namespace tally {

Placement Placement::Compute(const std::vector<int64_t>& key_sizes, int num_servers) {
  CHECK_GE(num_servers, 1);
  Placement p;
  p.num_servers_ = num_servers;
  p.slices_.resize(key_sizes.size());
  const int64_t total = std::accumulate(key_sizes.begin(), key_sizes.end(), int64_t{0});
  const auto allowed = static_cast<int64_t>(kMaxImbalance * static_cast<double>(total) / num_servers);
  p.slice_bound_ = std::min(kSliceAbove, std::max(kMinSliceBound, allowed));

  std::vector<int64_t> load(num_servers, 0);
  std::vector<int> whole;
  for (size_t k = 0; k < key_sizes.size(); ++k) {
    const int64_t n = key_sizes[k];
    CHECK_GE(n, 0) << "key " << k;
    if (n <= p.slice_bound_ || num_servers == 1) {
      whole.push_back(static_cast<int>(k));
      continue;
    }
    int64_t offset = 0;
    for (int s = 0; s < num_servers; ++s) {
      const int64_t len = n / num_servers + (s < n % num_servers ? 1 : 0);
      p.slices_[k].push_back({s, offset, len});
      load[s] += len;
      offset += len;
    }
  }
  std::stable_sort(whole.begin(), whole.end(),
                   [&](int a, int b) { return key_sizes[a] > key_sizes[b]; });
  for (int k : whole) {
    const int s = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    p.slices_[k].push_back({s, 0, key_sizes[k]});
    load[s] += key_sizes[k];
  }
  for (auto& key : p.slices_) key = CutIntoParts(key);
  return p;
}

// A slice longer than kPartElements becomes consecutive parts of at most that many, on the
// same server: each part is a request of its own, so the server sums and updates one part
// while the next is on the wire, and the sender seals the next while one is sent.
std::vector<Placement::Slice> Placement::CutIntoParts(const std::vector<Slice>& slices) {
  std::vector<Slice> parts;
  for (const Slice& s : slices) {
    const int64_t n = (s.length + kPartElements - 1) / kPartElements;
    if (n <= 1) {
      parts.push_back(s);
      continue;
    }
    int64_t offset = s.offset;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t len = s.length / n + (i < s.length % n ? 1 : 0);
      parts.push_back({s.server, offset, len});
      offset += len;
    }
  }
  return parts;
}

std::vector<int64_t> Placement::ServerLoads() const {
  std::vector<int64_t> load(num_servers_, 0);
  for (const auto& key : slices_) {
    for (const Slice& s : key) load[s.server] += s.length;
  }
  return load;
}

}  // namespace tally
