// AES-256-GCM records and HKDF-SHA256 key derivation, from OpenSSL's EVP interface: the
// primitives under the secure transport (docs/security.md, "Keys"; docs/wire.md, "Secured
// messages").
//
//   ConnectionKeys k = DeriveConnectionKeys(job_secret, "worker 0", "server 1", client_nonce, server_nonce);
//   uint8_t iv[kIvBytes];
//   RecordIv(counter, index, iv);
//   SealRecord(k.client_to_server, iv, aad, aad_len, plain, n, out, out + n);   // out: n + kTagBytes
//   bool ok = OpenRecord(k.client_to_server, iv, aad, aad_len, out, n, out + n, plain_again);
//
//   HmacSha256 mac(key32);                    // keyed once
//   uint8_t digest[kHmacBytes];
//   mac.Compute(bytes, n, digest);
//
// Every function is thread-safe: each call uses its own thread's cipher contexts. An
// HmacSha256 object is not: each thread uses its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace tally {

constexpr size_t kKeyBytes = 32;     // AES-256
constexpr size_t kIvBytes = 12;      // GCM's 96-bit nonce
constexpr size_t kTagBytes = 16;     // GCM's full tag
constexpr size_t kNonceBytes = 32;   // each side's handshake nonce
constexpr size_t kHmacBytes = 32;    // HMAC-SHA256's output

struct AeadKey {
  uint8_t bytes[kKeyBytes];
  // Set by DeriveConnectionKeys, unique in the process: lets each thread keep the key's
  // expanded schedule between records. 0: none (the schedule is computed for each record).
  uint64_t id = 0;
};

// The keys of one connection. Both directions are derived; data flows client to server
// only (every node sends on its own connections), the server's key proves it in the
// handshake.
struct ConnectionKeys {
  AeadKey client_to_server, server_to_client;
};

// HKDF-SHA256 (RFC 5869): extract with the fixed salt "tally aes-256-gcm v1" from the job's
// secret, expand with info = client nonce | server nonce | len | client name | len | server
// name, 64 bytes: the client-to-server key, then the server-to-client key. OpenSSL's HKDF
// is looked up once per process and extracts once per thread; each call expands (two
// HMAC-SHA256), so answering a stranger's HELLO costs a few microseconds.
ConnectionKeys DeriveConnectionKeys(const std::string& job_secret, const std::string& client,
                                    const std::string& server, const uint8_t client_nonce[kNonceBytes],
                                    const uint8_t server_nonce[kNonceBytes]);

// The nonce of one record: the message counter (8 bytes, big-endian), then the record's
// index within the message (4 bytes, big-endian). Unique under a key as long as the counter
// never repeats, which the sender guarantees by counting up from 1.
void RecordIv(uint64_t counter, uint32_t index, uint8_t iv[kIvBytes]);

// Encrypts n bytes (n < 2^31) and authenticates them with aad; in and out may be the same.
void SealRecord(const AeadKey& key, const uint8_t iv[kIvBytes], const void* aad, size_t aad_len, const void* in,
                size_t n, void* out, uint8_t tag[kTagBytes]);

// Decrypts and verifies; false (and out's contents undefined) if anything was altered.
bool OpenRecord(const AeadKey& key, const uint8_t iv[kIvBytes], const void* aad, size_t aad_len, const void* in,
                size_t n, const uint8_t tag[kTagBytes], void* out);

// HMAC-SHA256 under one key (the handshake's cookie, docs/security.md): the key's schedule
// is computed once, each Compute costs two SHA-256 passes over the message.
class HmacSha256 {
 public:
  explicit HmacSha256(const uint8_t key[kKeyBytes]);
  ~HmacSha256();
  HmacSha256(const HmacSha256&) = delete;
  HmacSha256& operator=(const HmacSha256&) = delete;
  void Compute(const void* data, size_t n, uint8_t out[kHmacBytes]);

 private:
  struct State;
  State* state_;
};

// Fills n bytes from the operating system's generator.
void RandomBytes(void* out, size_t n);

}  // namespace tally
