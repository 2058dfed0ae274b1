#include "net/aead.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <sys/random.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include <glog/logging.h>

namespace tally {
namespace {

std::atomic<uint64_t> next_key_id{1};

// Each thread keeps cipher contexts for the last few keys it used, one per direction, with
// the key's schedule computed: setting a key costs more than sealing a small record, so a
// record only sets its nonce. A key is known by its id, never reused in the process.
class ContextCache {
 public:
  ~ContextCache() {
    for (Entry& e : entries_) EVP_CIPHER_CTX_free(e.ctx);
  }
  // A context ready for `key` in the direction asked, its nonce still to be set.
  EVP_CIPHER_CTX* Get(const AeadKey& key, bool encrypt) {
    for (Entry& e : entries_) {
      if (key.id != 0 && e.id == key.id && e.encrypt == encrypt) return e.ctx;
    }
    Entry& e = entries_[next_++ % kEntries];
    if (e.ctx == nullptr) e.ctx = EVP_CIPHER_CTX_new();
    CHECK(e.ctx != nullptr) << "EVP_CIPHER_CTX_new";
    const int ok = encrypt ? EVP_EncryptInit_ex(e.ctx, EVP_aes_256_gcm(), nullptr, key.bytes, nullptr)
                           : EVP_DecryptInit_ex(e.ctx, EVP_aes_256_gcm(), nullptr, key.bytes, nullptr);
    CHECK_EQ(ok, 1) << "set an AES-256-GCM key";
    e.id = key.id;
    e.encrypt = encrypt;
    return e.ctx;
  }

 private:
  static constexpr size_t kEntries = 8;
  struct Entry {
    EVP_CIPHER_CTX* ctx = nullptr;
    uint64_t id = 0;
    bool encrypt = false;
  };
  Entry entries_[kEntries];
  size_t next_ = 0;
};

EVP_CIPHER_CTX* ThreadContext(const AeadKey& key, bool encrypt) {
  thread_local ContextCache cache;
  return cache.Get(key, encrypt);
}

// OpenSSL's HKDF, looked up once: EVP_KDF_fetch searches the providers on every call.
EVP_KDF* Hkdf() {
  static EVP_KDF* const kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  CHECK(kdf != nullptr) << "this OpenSSL has no HKDF";
  return kdf;
}

EVP_MAC* Hmac() {
  static EVP_MAC* const mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  CHECK(mac != nullptr) << "this OpenSSL has no HMAC";
  return mac;
}

void PutLength(std::string* s, const std::string& name) {
  CHECK_LT(name.size(), 256u);
  s->push_back(static_cast<char>(name.size()));
  s->append(name);
}

// RFC 5869's extract step, by OpenSSL's HKDF: PRK = HMAC-SHA256(salt, secret).
void Extract(const std::string& job_secret, uint8_t prk[kHmacBytes]) {
  static const char kSalt[] = "tally aes-256-gcm v1";
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(Hkdf());
  CHECK(ctx != nullptr) << "EVP_KDF_CTX_new";
  char digest[] = "SHA256", mode[] = "EXTRACT_ONLY";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_MODE, mode, 0),
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<char*>(job_secret.data()), job_secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<char*>(kSalt), sizeof kSalt - 1),
      OSSL_PARAM_construct_end()};
  CHECK_EQ(EVP_KDF_derive(ctx, prk, kHmacBytes, params), 1) << "HKDF-SHA256 extract";
  EVP_KDF_CTX_free(ctx);
}

// The expand step's HMAC, keyed with the PRK of the last secret this thread derived from:
// a job has one secret, so each thread extracts once, and a derivation is two HMACs
// (where a whole EVP_KDF derivation, parameters parsed and the digest looked up by name,
// cost several times that: it is what every HELLO pays).
HmacSha256& ExpandMac(const std::string& job_secret) {
  thread_local std::string secret;
  thread_local std::unique_ptr<HmacSha256> mac;
  if (mac == nullptr || secret != job_secret) {
    uint8_t prk[kHmacBytes];
    Extract(job_secret, prk);
    mac = std::make_unique<HmacSha256>(prk);
    OPENSSL_cleanse(prk, sizeof prk);
    secret = job_secret;
  }
  return *mac;
}

}  // namespace

ConnectionKeys DeriveConnectionKeys(const std::string& job_secret, const std::string& client,
                                    const std::string& server, const uint8_t client_nonce[kNonceBytes],
                                    const uint8_t server_nonce[kNonceBytes]) {
  std::string info(reinterpret_cast<const char*>(client_nonce), kNonceBytes);
  info.append(reinterpret_cast<const char*>(server_nonce), kNonceBytes);
  PutLength(&info, client);
  PutLength(&info, server);
  // RFC 5869's expand for 64 bytes: T(1) = HMAC(PRK, info | 1), T(2) = HMAC(PRK, T(1) | info | 2).
  HmacSha256& mac = ExpandMac(job_secret);
  uint8_t okm[2 * kHmacBytes];
  std::string block = info + '\x01';
  mac.Compute(block.data(), block.size(), okm);
  block.assign(reinterpret_cast<const char*>(okm), kHmacBytes);
  block += info;
  block += '\x02';
  mac.Compute(block.data(), block.size(), okm + kHmacBytes);
  OPENSSL_cleanse(block.data(), kHmacBytes);
  static_assert(sizeof okm == 2 * kKeyBytes, "two AES-256 keys");
  ConnectionKeys keys;
  std::memcpy(keys.client_to_server.bytes, okm, kKeyBytes);
  std::memcpy(keys.server_to_client.bytes, okm + kKeyBytes, kKeyBytes);
  keys.client_to_server.id = next_key_id++;
  keys.server_to_client.id = next_key_id++;
  OPENSSL_cleanse(okm, sizeof okm);
  return keys;
}

void RecordIv(uint64_t counter, uint32_t index, uint8_t iv[kIvBytes]) {
  for (int i = 0; i < 8; ++i) iv[i] = static_cast<uint8_t>(counter >> (56 - 8 * i));
  for (int i = 0; i < 4; ++i) iv[8 + i] = static_cast<uint8_t>(index >> (24 - 8 * i));
}

void SealRecord(const AeadKey& key, const uint8_t iv[kIvBytes], const void* aad, size_t aad_len, const void* in,
                size_t n, void* out, uint8_t tag[kTagBytes]) {
  CHECK_LT(n, size_t{1} << 31);
  EVP_CIPHER_CTX* ctx = ThreadContext(key, /*encrypt=*/true);
  int len = 0;
  CHECK_EQ(EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, iv), 1);
  CHECK_EQ(EVP_EncryptUpdate(ctx, nullptr, &len, static_cast<const uint8_t*>(aad), static_cast<int>(aad_len)), 1);
  if (n > 0) {
    CHECK_EQ(EVP_EncryptUpdate(ctx, static_cast<uint8_t*>(out), &len, static_cast<const uint8_t*>(in),
                               static_cast<int>(n)), 1);
  }
  CHECK_EQ(EVP_EncryptFinal_ex(ctx, static_cast<uint8_t*>(out) + n, &len), 1);
  CHECK_EQ(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, tag), 1);
}

bool OpenRecord(const AeadKey& key, const uint8_t iv[kIvBytes], const void* aad, size_t aad_len, const void* in,
                size_t n, const uint8_t tag[kTagBytes], void* out) {
  if (n >= (size_t{1} << 31)) return false;
  EVP_CIPHER_CTX* ctx = ThreadContext(key, /*encrypt=*/false);
  int len = 0;
  if (EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, iv) != 1) return false;
  if (EVP_DecryptUpdate(ctx, nullptr, &len, static_cast<const uint8_t*>(aad), static_cast<int>(aad_len)) != 1) {
    return false;
  }
  if (n > 0 && EVP_DecryptUpdate(ctx, static_cast<uint8_t*>(out), &len, static_cast<const uint8_t*>(in),
                                 static_cast<int>(n)) != 1) {
    return false;
  }
  uint8_t expected[kTagBytes];
  std::memcpy(expected, tag, kTagBytes);  // the tag may lie where `out` is written
  if (EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kTagBytes, expected) != 1) return false;
  return EVP_DecryptFinal_ex(ctx, static_cast<uint8_t*>(out) + n, &len) == 1;
}

struct HmacSha256::State {
  EVP_MAC_CTX* ctx;
};

HmacSha256::HmacSha256(const uint8_t key[kKeyBytes]) : state_(new State{EVP_MAC_CTX_new(Hmac())}) {
  CHECK(state_->ctx != nullptr) << "EVP_MAC_CTX_new";
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  CHECK_EQ(EVP_MAC_init(state_->ctx, key, kKeyBytes, params), 1) << "HMAC-SHA256 key";
}

HmacSha256::~HmacSha256() {
  EVP_MAC_CTX_free(state_->ctx);  // cleanses the key's schedule
  delete state_;
}

void HmacSha256::Compute(const void* data, size_t n, uint8_t out[kHmacBytes]) {
  size_t len = 0;
  // A null key starts a new message under the key already set, without scheduling it again.
  CHECK_EQ(EVP_MAC_init(state_->ctx, nullptr, 0, nullptr), 1);
  CHECK_EQ(EVP_MAC_update(state_->ctx, static_cast<const uint8_t*>(data), n), 1);
  CHECK_EQ(EVP_MAC_final(state_->ctx, out, &len, kHmacBytes), 1);
  CHECK_EQ(len, kHmacBytes);
}

void RandomBytes(void* out, size_t n) {
  auto* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    const ssize_t got = getrandom(p, n, 0);
    if (got < 0 && errno == EINTR) continue;
    CHECK_GT(got, 0) << "getrandom: " << std::strerror(errno);
    p += got;
    n -= static_cast<size_t>(got);
  }
}


}  // namespace tally
