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
// Every function is thread-safe: each call uses its own thread's cipher contexts.
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
// name, 64 bytes: the client-to-server key, then the server-to-client key.
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

// Fills n bytes from the operating system's generator.
void RandomBytes(void* out, size_t n);

// Runs fn(0) ... fn(n - 1), spread over a pool of crypto threads (one fewer than the cores,
// at most 7) and the caller; returns when all are done. The records of one message are
// independent, so sealing and opening a large message uses every core.
void ParallelRecords(size_t n, const std::function<void(size_t)>& fn);

}  // namespace tally
