#include "net/secure_frames.h"

#include <atomic>
#include <cstring>

#include <glog/logging.h>

#include "base/parallel.h"

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

void PutBe(uint64_t v, int bytes, std::string* s) {
  for (int i = bytes - 1; i >= 0; --i) s->push_back(static_cast<char>(v >> (8 * i)));
}

void PutBe(uint64_t v, int bytes, uint8_t* out) {
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(v >> (8 * (bytes - 1 - i)));
}

uint64_t GetBe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = v << 8 | p[i];
  return v;
}

// One record of one part: what SealParts and OpenParts hand to the threads.
struct RecordJob {
  const PartJob* part;
  uint32_t index;  // part << 14 | record
  size_t offset, len;
  uint8_t* tag;
};

// Every record of parts [first, last); false if some record's index would not fit
// (RecordIndex). The tags follow the ciphertext: in `out` when sealing, in `in` when opening
// (which may write the plain bytes elsewhere).
bool Records(const std::vector<PartJob>& parts, size_t first, size_t last, bool opening, std::vector<RecordJob>* jobs,
             size_t* total) {
  *total = 0;
  for (size_t p = first; p < last; ++p) {
    const size_t n = parts[p].plain, records = RecordCount(n);
    uint8_t* sealed = opening ? static_cast<uint8_t*>(const_cast<void*>(parts[p].in)) : parts[p].out;
    *total += n;
    for (size_t r = 0; r < records; ++r) {
      uint32_t index = 0;
      if (!RecordIndex(p, r, &index)) return false;
      const size_t offset = r * kRecordBytes;
      jobs->push_back({&parts[p], index, offset, std::min(kRecordBytes, n - offset), sealed + n + r * kTagBytes});
    }
  }
  return true;
}

// A record's associated data: the message header, its part's index and plain length.
constexpr size_t kRecordAadBytes = kSealedHeaderBytes + 4 + 8;
void RecordAad(const uint8_t header[kSealedHeaderBytes], const RecordJob& j, uint8_t aad[kRecordAadBytes]) {
  std::memcpy(aad, header, kSealedHeaderBytes);
  PutBe(j.index >> 14, 4, aad + kSealedHeaderBytes);
  PutBe(j.part->plain, 8, aad + kSealedHeaderBytes + 4);
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
  PutBe(w.window, 8, &s);
  s.append(reinterpret_cast<const char*>(w.proof), kTagBytes);
  return s;
}

bool ParseWelcome(const void* data, size_t n, Welcome* w) {
  if (!HasHead(data, n, SecureType::kWelcome) || n != 5 + 2 * kNonceBytes + 8 + kTagBytes) return false;
  const uint8_t* p = static_cast<const uint8_t*>(data) + 5;
  std::memcpy(w->client_nonce, p, kNonceBytes);
  std::memcpy(w->server_nonce, p + kNonceBytes, kNonceBytes);
  w->window = GetBe(p + 2 * kNonceBytes, 8);
  std::memcpy(w->proof, p + 2 * kNonceBytes + 8, kTagBytes);
  return true;
}

void WelcomeProof(const ConnectionKeys& keys, const std::string& hello, const Welcome& w, uint8_t proof[kTagBytes]) {
  std::string aad = hello + EncodeWelcome(w);
  aad.resize(aad.size() - kTagBytes);  // all of the WELCOME but its proof
  uint8_t iv[kIvBytes];
  RecordIv(0, 0, iv);
  uint8_t none[1];
  SealRecord(keys.server_to_client, iv, aad.data(), aad.size(), nullptr, 0, none, proof);
}

std::string EncodeConfirm(const Confirm& c) {
  std::string s = Head(SecureType::kConfirm);
  s.append(reinterpret_cast<const char*>(c.client_nonce), kNonceBytes);
  PutBe(c.window, 8, &s);
  PutName(&s, c.client);
  PutName(&s, c.server);
  s.append(reinterpret_cast<const char*>(c.tag), kTagBytes);
  return s;
}

bool ParseConfirm(const void* data, size_t n, Confirm* c) {
  if (!HasHead(data, n, SecureType::kConfirm) || n < 5 + kNonceBytes + 8 + kTagBytes) return false;
  const uint8_t* p = static_cast<const uint8_t*>(data) + 5;
  const uint8_t* end = static_cast<const uint8_t*>(data) + n - kTagBytes;
  std::memcpy(c->client_nonce, p, kNonceBytes);
  c->window = GetBe(p + kNonceBytes, 8);
  p += kNonceBytes + 8;
  if (!TakeName(&p, end, &c->client) || !TakeName(&p, end, &c->server) || p != end) return false;
  std::memcpy(c->tag, end, kTagBytes);
  return true;
}

void ConfirmTag(const ConnectionKeys& keys, const Confirm& c, uint8_t tag[kTagBytes]) {
  std::string aad = EncodeConfirm(c);
  aad.resize(aad.size() - kTagBytes);
  uint8_t iv[kIvBytes];
  RecordIv(0, 0, iv);
  uint8_t none[1];
  SealRecord(keys.client_to_server, iv, aad.data(), aad.size(), nullptr, 0, none, tag);
}

std::string EncodeRefuse(RefuseReason why) {
  std::string s = Head(SecureType::kRefuse);
  s.push_back(static_cast<char>(why));
  return s;
}

bool ParseRefuse(const void* data, size_t n, RefuseReason* why) {
  if (!HasHead(data, n, SecureType::kRefuse) || n != 6) return false;
  const uint8_t r = static_cast<const uint8_t*>(data)[5];
  if (r < uint8_t(RefuseReason::kNoSession) || r > uint8_t(RefuseReason::kNotThisNode)) return false;
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
  PutBe(h.counter, 8, out + 8);
  PutBe(h.parts, 4, out + 16);
}

bool ParseSealedHeader(const void* data, size_t n, SealedHeader* h) {
  if (!HasHead(data, n, SecureType::kSealed) || n < kSealedHeaderBytes) return false;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (p[5] != 0 || p[6] != 0 || p[7] != 0) return false;
  h->counter = GetBe(p + 8, 8);
  h->parts = static_cast<uint32_t>(GetBe(p + 16, 4));
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

bool RecordIndex(size_t part, size_t record, uint32_t* index) {
  if (part >= kMaxSealedParts || record >= kMaxRecordsPerPart) return false;
  *index = static_cast<uint32_t>(part << 14 | record);
  return true;
}

Status CheckSealable(const std::vector<size_t>& plain_sizes) {
  if (plain_sizes.empty() || plain_sizes.size() > kMaxSealedParts) {
    return Status::InvalidArgument("cannot seal a message of " + std::to_string(plain_sizes.size()) +
                                   " frames: a sealed message has 1 to " + std::to_string(kMaxSealedParts));
  }
  for (size_t p = 0; p < plain_sizes.size(); ++p) {
    if (plain_sizes[p] > kMaxSealedPartBytes) {
      return Status::InvalidArgument("cannot seal frame " + std::to_string(p) + " of " +
                                     std::to_string(plain_sizes[p]) + " bytes: a sealed frame holds at most " +
                                     std::to_string(kMaxSealedPartBytes) + " (its records' nonces would repeat)");
    }
  }
  return Status::Ok();
}

namespace {

// Calls fn(record, its nonce) for every record of the parts: on this thread for a small
// message, spread over the crypto threads for a large one. False, calling nothing, if the
// parts cannot be sealed (CheckSealable).
template <typename Fn>
bool ForEachRecord(const std::vector<PartJob>& parts, size_t first, size_t last, bool opening, uint64_t counter,
                   Fn fn) {
  size_t total = 0;
  std::vector<RecordJob> jobs;
  if (!Records(parts, first, last, opening, &jobs, &total)) return false;
  auto one = [&](size_t i) {
    uint8_t iv[kIvBytes];
    RecordIv(counter, jobs[i].index, iv);
    fn(jobs[i], iv);
  };
  if (total < kParallelBytes) {
    for (size_t i = 0; i < jobs.size(); ++i) one(i);
  } else {
    ParallelFor(jobs.size(), one);  // the records of one message are independent
  }
  return true;
}

}  // namespace

void SealParts(const AeadKey& key, const uint8_t header[kSealedHeaderBytes], const std::vector<PartJob>& parts) {
  SealedHeader h;
  CHECK(ParseSealedHeader(header, kSealedHeaderBytes, &h));
  CHECK_EQ(h.parts, parts.size());
  const bool sealed = ForEachRecord(parts, 0, parts.size(), /*opening=*/false, h.counter,
                                    [&](const RecordJob& j, const uint8_t* iv) {
    uint8_t aad[kRecordAadBytes];
    RecordAad(header, j, aad);
    SealRecord(key, iv, aad, sizeof aad, static_cast<const uint8_t*>(j.part->in) + j.offset, j.len,
               j.part->out + j.offset, j.tag);
  });
  CHECK(sealed) << "SealParts without CheckSealable";
}

bool OpenParts(const AeadKey& key, const uint8_t header[kSealedHeaderBytes], const std::vector<PartJob>& parts,
               size_t first, size_t last) {
  SealedHeader h;
  last = std::min(last, parts.size());
  if (!ParseSealedHeader(header, kSealedHeaderBytes, &h) || h.parts != parts.size() || first > last) return false;
  std::atomic<bool> all_open{true};
  const bool indexed = ForEachRecord(parts, first, last, /*opening=*/true, h.counter,
                                     [&](const RecordJob& j, const uint8_t* iv) {
    uint8_t aad[kRecordAadBytes];
    RecordAad(header, j, aad);
    if (!OpenRecord(key, iv, aad, sizeof aad, static_cast<const uint8_t*>(j.part->in) + j.offset, j.len, j.tag,
                    j.part->out + j.offset)) {
      all_open = false;
    }
  });
  return indexed && all_open;
}

}  // namespace tally
