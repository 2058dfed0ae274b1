// The byte layouts of the secure transport (docs/wire.md, "Secured messages"): the
// handshake's three messages and the sealed form of a Message's frames. Pure functions
// over bytes, so the fuzzer drives them directly.
//
//   std::string hello = EncodeHello({client_nonce, "worker 0", "server 1"});
//   Hello h;
//   if (!ParseHello(hello.data(), hello.size(), &h)) ...            // never trusts the bytes
//
//   SealedHeader header{counter, parts};
//   uint8_t head[kSealedHeaderBytes];
//   PutSealedHeader(header, head);
//   SealParts(key, head, jobs);      // every part's records, in parallel when large
//   bool ok = OpenParts(key, head, jobs);   // in place
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "net/aead.h"

namespace tally {

// Every secured frame of the first part starts with these 4 bytes, then a type byte.
constexpr char kSecureMagic[4] = {'T', 'L', 'Y', '1'};
enum class SecureType : uint8_t { kHello = 1, kWelcome = 2, kSealed = 3, kRefuse = 4 };

// A sealed part is cut into records of at most this many bytes, each with its own tag, so
// that several threads can seal or open one large part.
constexpr size_t kRecordBytes = 256 << 10;
constexpr size_t kSealedHeaderBytes = 20;  // magic, type, 3 zero bytes, counter, parts
constexpr size_t kMaxNameBytes = 64;

struct Hello {
  uint8_t client_nonce[kNonceBytes];
  std::string client, server;  // the names the client claims and expects
};
std::string EncodeHello(const Hello& h);
bool ParseHello(const void* data, size_t n, Hello* h);

struct Welcome {
  uint8_t client_nonce[kNonceBytes];  // the HELLO it answers
  uint8_t server_nonce[kNonceBytes];
  uint8_t proof[kTagBytes];           // WelcomeProof: the server holds the job's secret
};
std::string EncodeWelcome(const Welcome& w);
bool ParseWelcome(const void* data, size_t n, Welcome* w);
// The tag of an empty record under the server-to-client key, nonce RecordIv(0, 0), with the
// HELLO's bytes and the WELCOME's two nonces as associated data.
void WelcomeProof(const ConnectionKeys& keys, const std::string& hello, const Welcome& w, uint8_t proof[kTagBytes]);

enum class RefuseReason : uint8_t { kNoSession = 1, kNotAMember = 2, kNotThisNode = 3 };
std::string EncodeRefuse(RefuseReason why);
bool ParseRefuse(const void* data, size_t n, RefuseReason* why);
std::string DescribeRefuse(RefuseReason why);

// The type of a first frame, or 0 if it does not start with kSecureMagic.
uint8_t SecureTypeOf(const void* data, size_t n);

struct SealedHeader {
  uint64_t counter = 0;  // counts the connection's messages from 1; never repeats under a key
  uint32_t parts = 0;    // the message's frames, the first included
};
void PutSealedHeader(const SealedHeader& h, uint8_t out[kSealedHeaderBytes]);
bool ParseSealedHeader(const void* data, size_t n, SealedHeader* h);

// Sizes: a part of n plain bytes seals to n + kTagBytes per record (at least one record,
// so an empty part is authenticated too). PlainBytes inverts SealedBytes; false if no n
// seals to `sealed` bytes.
size_t RecordCount(size_t plain);
size_t SealedBytes(size_t plain);
bool PlainBytes(size_t sealed, size_t* plain);

// One part to seal or open: `plain` bytes at `in`, written to `out` (the ciphertext, then
// one tag per record). Part 0 is the Meta; part i > 0 the i-th data frame. Opening works in
// place (in == out), leaving the plain bytes at the start.
struct PartJob {
  const void* in;
  size_t plain;
  uint8_t* out;
};
// Record r of part p has nonce RecordIv(counter, p << 14 | r) and the 20 header bytes as
// associated data. REQUIRES: parts.size() == header's parts, each plain < 4 GiB.
void SealParts(const AeadKey& key, const uint8_t header[kSealedHeaderBytes], const std::vector<PartJob>& parts);
bool OpenParts(const AeadKey& key, const uint8_t header[kSealedHeaderBytes], const std::vector<PartJob>& parts);

}  // namespace tally
