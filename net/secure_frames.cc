#include "net/secure_frames.h"

#include <atomic>
#include <cstring>

#include <glog/logging.h>

namespace tally {
namespace {

// Below this many bytes in all, a message is sealed on the calling thread: handing small
// records to the pool costs more than it saves.
constexpr size_t kParallelBytes = 2 * kRecordBytes;

std::string Head(SecureType t) {
  std::string s(kSecureMagic, 4);
  s.push_back(static_cast<char>(t));
  return s;
}

bool HasHead(const void* data, size_t n, SecureType t) {
  return n >= 5 && std::memcmp(data, kSecureMagic, 4) == 0 && static_cast<const uint8_t*>(data)[4] == uint8_t(t);
}

void PutName(std::string* s, const std::string& name) {
  CHECK_LE(name.size(), kMaxNameBytes);
  s->push_back(static_cast<char>(name.size()));
  s->append(name);
}

bool TakeName(const uint8_t** p, const uint8_t* end, std::string* name) {
  if (*p >= end) return false;
  const size_t len = **p;
  ++*p;
  if (len > kMaxNameBytes || static_cast<size_t>(end - *p) < len) return false;
  name->assign(reinterpret_cast<const char*>(*p), len);
  *p += len;
  return true;
}

// One record of one part: what SealParts and OpenParts hand to the threads.
struct RecordJob {
  const PartJob* part;
  uint32_t index;  // part << 14 | record
  size_t offset, len;
};

std::vector<RecordJob> Records(const std::vector<PartJob>& parts, size_t* total) {
  std::vector<RecordJob> jobs;
  *total = 0;
  for (size_t p = 0; p < parts.size(); ++p) {
    const size_t n = parts[p].plain, records = RecordCount(n);
    *total += n;
    for (size_t r = 0; r < records; ++r) {
      const size_t offset = r * kRecordBytes;
      jobs.push_back({&parts[p], static_cast<uint32_t>(p << 14 | r), offset, std::min(kRecordBytes, n - offset)});
    }
  }
  return jobs;
}

uint8_t* TagOf(const RecordJob& j) {
  return j.part->out + j.part->plain + (j.index & ((1u << 14) - 1)) * kTagBytes;
}

}  // namespace

std::string EncodeHello(const Hello& h) {
  std::string s = Head(SecureType::kHello);
  s.append(reinterpret_cast<const char*>(h.client_nonce), kNonceBytes);
  PutName(&s, h.client);
  PutName(&s, h.server);
  return s;
}

bool ParseHello(const void* data, size_t n, Hello* h) {
  if (!HasHead(data, n, SecureType::kHello) || n < 5 + kNonceBytes) return false;
  const uint8_t* p = static_cast<const uint8_t*>(data) + 5;
  const uint8_t* end = static_cast<const uint8_t*>(data) + n;
  std::memcpy(h->client_nonce, p, kNonceBytes);
  p += kNonceBytes;
  return TakeName(&p, end, &h->client) && TakeName(&p, end, &h->server) && p == end;
}

std::string EncodeWelcome(const Welcome& w) {
  std::string s = Head(SecureType::kWelcome);
  s.append(reinterpret_cast<const char*>(w.client_nonce), kNonceBytes);
  s.append(reinterpret_cast<const char*>(w.server_nonce), kNonceBytes);
  s.append(reinterpret_cast<const char*>(w.proof), kTagBytes);
  return s;
}

bool ParseWelcome(const void* data, size_t n, Welcome* w) {
  if (!HasHead(data, n, SecureType::kWelcome) || n != 5 + 2 * kNonceBytes + kTagBytes) return false;
  const uint8_t* p = static_cast<const uint8_t*>(data) + 5;
  std::memcpy(w->client_nonce, p, kNonceBytes);
  std::memcpy(w->server_nonce, p + kNonceBytes, kNonceBytes);
  std::memcpy(w->proof, p + 2 * kNonceBytes, kTagBytes);
  return true;
}

void WelcomeProof(const ConnectionKeys& keys, const std::string& hello, const Welcome& w, uint8_t proof[kTagBytes]) {
  std::string aad = hello;
  aad.append(reinterpret_cast<const char*>(w.client_nonce), kNonceBytes);
  aad.append(reinterpret_cast<const char*>(w.server_nonce), kNonceBytes);
  uint8_t iv[kIvBytes];
  RecordIv(0, 0, iv);
  uint8_t none[1];
  SealRecord(keys.server_to_client, iv, aad.data(), aad.size(), nullptr, 0, none, proof);
}

std::string EncodeRefuse(RefuseReason why) {
  std::string s = Head(SecureType::kRefuse);
  s.push_back(static_cast<char>(why));
  return s;
}

bool ParseRefuse(const void* data, size_t n, RefuseReason* why) {
  if (!HasHead(data, n, SecureType::kRefuse) || n != 6) return false;
  const uint8_t r = static_cast<const uint8_t*>(data)[5];
  if (r < 1 || r > 3) return false;
  *why = static_cast<RefuseReason>(r);
  return true;
}

std::string DescribeRefuse(RefuseReason why) {
  switch (why) {
    case RefuseReason::kNoSession: return "it holds no session for this connection (it restarted?)";
    case RefuseReason::kNotAMember: return "this node's name is not one of the job's";
    case RefuseReason::kNotThisNode: return "it is not the node this one meant to reach";
  }
  return "unknown reason";
}

uint8_t SecureTypeOf(const void* data, size_t n) {
  if (n < 5 || std::memcmp(data, kSecureMagic, 4) != 0) return 0;
  return static_cast<const uint8_t*>(data)[4];
}

void PutSealedHeader(const SealedHeader& h, uint8_t out[kSealedHeaderBytes]) {
  std::memcpy(out, kSecureMagic, 4);
  out[4] = static_cast<uint8_t>(SecureType::kSealed);
  out[5] = out[6] = out[7] = 0;
  for (int i = 0; i < 8; ++i) out[8 + i] = static_cast<uint8_t>(h.counter >> (56 - 8 * i));
  for (int i = 0; i < 4; ++i) out[16 + i] = static_cast<uint8_t>(h.parts >> (24 - 8 * i));
}

bool ParseSealedHeader(const void* data, size_t n, SealedHeader* h) {
  if (!HasHead(data, n, SecureType::kSealed) || n < kSealedHeaderBytes) return false;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (p[5] != 0 || p[6] != 0 || p[7] != 0) return false;
  h->counter = 0;
  for (int i = 0; i < 8; ++i) h->counter = h->counter << 8 | p[8 + i];
  h->parts = 0;
  for (int i = 0; i < 4; ++i) h->parts = h->parts << 8 | p[16 + i];
  return h->counter > 0 && h->parts > 0;
}

size_t RecordCount(size_t plain) { return plain == 0 ? 1 : (plain + kRecordBytes - 1) / kRecordBytes; }

size_t SealedBytes(size_t plain) { return plain + kTagBytes * RecordCount(plain); }

bool PlainBytes(size_t sealed, size_t* plain) {
  const size_t records = std::max<size_t>(1, (sealed + kRecordBytes + kTagBytes - 1) / (kRecordBytes + kTagBytes));
  if (sealed < records * kTagBytes) return false;
  *plain = sealed - records * kTagBytes;
  return SealedBytes(*plain) == sealed;
}

namespace {

// Calls fn(record, its nonce) for every record of the parts: on this thread for a small
// message, spread over the crypto threads for a large one.
template <typename Fn>
void ForEachRecord(const std::vector<PartJob>& parts, uint64_t counter, Fn fn) {
  size_t total = 0;
  const std::vector<RecordJob> jobs = Records(parts, &total);
  auto one = [&](size_t i) {
    uint8_t iv[kIvBytes];
    RecordIv(counter, jobs[i].index, iv);
    fn(jobs[i], iv);
  };
  if (total < kParallelBytes) {
    for (size_t i = 0; i < jobs.size(); ++i) one(i);
  } else {
    ParallelRecords(jobs.size(), one);
  }
}

}  // namespace

void SealParts(const AeadKey& key, const uint8_t header[kSealedHeaderBytes], const std::vector<PartJob>& parts) {
  SealedHeader h;
  CHECK(ParseSealedHeader(header, kSealedHeaderBytes, &h));
  CHECK_EQ(h.parts, parts.size());
  ForEachRecord(parts, h.counter, [&](const RecordJob& j, const uint8_t* iv) {
    SealRecord(key, iv, header, kSealedHeaderBytes, static_cast<const uint8_t*>(j.part->in) + j.offset, j.len,
               j.part->out + j.offset, TagOf(j));
  });
}

bool OpenParts(const AeadKey& key, const uint8_t header[kSealedHeaderBytes], const std::vector<PartJob>& parts) {
  SealedHeader h;
  if (!ParseSealedHeader(header, kSealedHeaderBytes, &h) || h.parts != parts.size()) return false;
  std::atomic<bool> all_open{true};
  ForEachRecord(parts, h.counter, [&](const RecordJob& j, const uint8_t* iv) {
    if (!OpenRecord(key, iv, header, kSealedHeaderBytes, static_cast<const uint8_t*>(j.part->in) + j.offset, j.len,
                    TagOf(j), j.part->out + j.offset)) {
      all_open = false;
    }
  });
  return all_open;
}

}  // namespace tally
