// The byte layouts of the secure transport (docs/wire.md, "Secured messages"): the
// handshake's four messages and the sealed form of a Message's frames. Pure functions
// over bytes, so the fuzzer drives them directly.
//
//   std::string hello = EncodeHello({client_nonce, "worker 0", "server 1"});
//   Hello h;
//   if (!ParseHello(hello.data(), hello.size(), &h)) ...            // never trusts the bytes
//
//   TALLY_RETURN_IF_ERROR(CheckSealable(plain_sizes));   // before allocating anything
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
#include "base/status.h"

namespace tally {

// Every secured frame of the first part starts with these 4 bytes, then a type byte. The
// digit is the layout's version: a node of another version is refused, not misread.
constexpr char kSecureMagic[4] = {'T', 'L', 'Y', '2'};
enum class SecureType : uint8_t { kHello = 1, kWelcome = 2, kSealed = 3, kRefuse = 4, kConfirm = 5 };

// A sealed part is cut into records of at most this many bytes, each with its own tag, so
// that several threads can seal or open one large part.
constexpr size_t kRecordBytes = 256 << 10;
constexpr size_t kSealedHeaderBytes = 20;  // magic, type, 3 zero bytes, counter, parts
constexpr size_t kMaxNameBytes = 64;
// A record's nonce holds part << 14 | record: at most 2^14 records (4 GiB) per part and
// 2^18 parts per message, so that no two records of a message share a nonce.
constexpr size_t kMaxRecordsPerPart = size_t{1} << 14;
constexpr size_t kMaxSealedParts = size_t{1} << 18;
constexpr size_t kMaxSealedPartBytes = kMaxRecordsPerPart * kRecordBytes;
// No HELLO or CONFIRM is longer (names of kMaxNameBytes): what a receiver keeps of a
// connection's frames before the connection has proved the secret.
constexpr size_t kMaxHandshakeBytes = 256;

struct Hello {
  uint8_t client_nonce[kNonceBytes];
  std::string client, server;  // the names the client claims and expects
};
std::string EncodeHello(const Hello& h);
bool ParseHello(const void* data, size_t n, Hello* h);

struct Welcome {
  uint8_t client_nonce[kNonceBytes];  // the HELLO it answers
  uint8_t server_nonce[kNonceBytes];  // the receiver's cookie (docs/security.md)
  uint64_t window = 0;                // the cookie's time window, echoed by the CONFIRM
  uint8_t proof[kTagBytes];           // WelcomeProof: the server holds the job's secret
};
std::string EncodeWelcome(const Welcome& w);
bool ParseWelcome(const void* data, size_t n, Welcome* w);
// The tag of an empty record under the server-to-client key, nonce RecordIv(0, 0), with the
// HELLO's bytes and the WELCOME's bytes before the proof as associated data.
void WelcomeProof(const ConnectionKeys& keys, const std::string& hello, const Welcome& w, uint8_t proof[kTagBytes]);

// The client's third message: it repeats what the receiver needs to derive the cookie and
// the keys again, which it kept nothing of, and proves the client holds the keys.
struct Confirm {
  uint8_t client_nonce[kNonceBytes];
  uint64_t window = 0;
  std::string client, server;
  uint8_t tag[kTagBytes];  // ConfirmTag
};
std::string EncodeConfirm(const Confirm& c);
bool ParseConfirm(const void* data, size_t n, Confirm* c);
// The tag of an empty record under the client-to-server key, nonce RecordIv(0, 0) (sealed
// messages count from 1), with the CONFIRM's bytes before the tag as associated data.
void ConfirmTag(const ConnectionKeys& keys, const Confirm& c, uint8_t tag[kTagBytes]);

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

// The nonce index of record `record` of part `part`: part << 14 | record. False when it
// would not fit (a part of more than 4 GiB, a message of more than 2^18 parts), so that
// it never wraps onto another record's.
bool RecordIndex(size_t part, size_t record, uint32_t* index);
// Whether a message whose parts hold these plain byte counts can be sealed: an error
// naming the part that cannot. Needs only the sizes, so it runs before anything is allocated.
Status CheckSealable(const std::vector<size_t>& plain_sizes);

// One part to seal or open: `plain` bytes at `in`, written to `out` (sealing: the
// ciphertext, then one tag per record; opening: the plain bytes, the tags read after the
// ciphertext at `in`). Part 0 is the Meta; part i > 0 the i-th data frame. Opening works in
// place (in == out), leaving the plain bytes at the start, or into another buffer.
struct PartJob {
  const void* in;
  size_t plain;
  uint8_t* out;
};
// Record r of part p has nonce RecordIv(counter, p << 14 | r) and as associated data the 20
// header bytes, p (4 bytes) and the part's plain length (8 bytes): a part cut short or
// grown at a record boundary opens no record. REQUIRES for sealing: parts.size() ==
// header's parts and CheckSealable(their sizes); opening refuses parts that fail it.
void SealParts(const AeadKey& key, const uint8_t header[kSealedHeaderBytes], const std::vector<PartJob>& parts);
// Opening may take the parts in turns, [first, last) at a time (the Meta first, to learn
// where the data goes); every part must be opened before the message is used.
bool OpenParts(const AeadKey& key, const uint8_t header[kSealedHeaderBytes], const std::vector<PartJob>& parts,
               size_t first = 0, size_t last = SIZE_MAX);

}  // namespace tally
