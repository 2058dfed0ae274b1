// Little-endian helpers shared by the RecordIO sources. Not a public header.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace tally {

inline uint32_t GetLe32(const char* p) {
  const unsigned char* u = reinterpret_cast<const unsigned char*>(p);
  return uint32_t{u[0]} | uint32_t{u[1]} << 8 | uint32_t{u[2]} << 16 | uint32_t{u[3]} << 24;
}

inline uint64_t GetLe64(const char* p) { return uint64_t{GetLe32(p)} | uint64_t{GetLe32(p + 4)} << 32; }

inline void PutLe32(uint32_t v, std::string* out) {
  const char b[4] = {static_cast<char>(v), static_cast<char>(v >> 8), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 24)};
  out->append(b, 4);
}

inline void PutLe64(uint64_t v, std::string* out) {
  PutLe32(static_cast<uint32_t>(v), out);
  PutLe32(static_cast<uint32_t>(v >> 32), out);
}

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace tally
