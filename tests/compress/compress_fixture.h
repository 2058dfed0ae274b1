// Reads tests/fixtures/gradient_compression.json (tools/make_compression_fixtures.py): for
// each case, each push of each worker, the gradient, the packed bits and the residual after
// it, and the server's sum of the workers' dequantised pushes.
//
//   std::vector<CompressionCase> cases = LoadCompressionFixtures();
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compress/compress.h"

namespace tally {
namespace testing {

struct CompressionPush {
  std::vector<std::vector<float>> grads, residuals;  // by worker
  std::vector<std::vector<uint8_t>> packed;          // by worker
  std::vector<float> sum;
};

struct CompressionCase {
  std::string name;
  CompressionConfig config;
  int64_t n = 0;
  std::vector<CompressionPush> pushes;
};

inline std::vector<float> FloatsFromHex(const nlohmann::json& a) {
  std::vector<float> out;
  for (const auto& h : a) {
    const uint32_t bits = static_cast<uint32_t>(std::stoul(h.get<std::string>(), nullptr, 16));
    float f;
    std::memcpy(&f, &bits, 4);
    out.push_back(f);
  }
  return out;
}

inline std::vector<uint8_t> BytesFromHex(const std::string& h) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<uint8_t>(std::stoul(h.substr(i, 2), nullptr, 16)));
  return out;
}

inline std::vector<CompressionCase> LoadCompressionFixtures() {
  std::ifstream f(std::string(TALLY_SOURCE_DIR) + "/tests/fixtures/gradient_compression.json");
  EXPECT_TRUE(f.good()) << "tests/fixtures/gradient_compression.json is missing";
  const nlohmann::json doc = nlohmann::json::parse(f);
  std::vector<CompressionCase> cases;
  for (const auto& c : doc["cases"]) {
    CompressionCase k;
    k.name = c["name"];
    EXPECT_TRUE(ParseCompression(c["type"], c["threshold"].get<float>(), &k.config).ok()) << k.name;
    k.n = c["n"];
    for (const auto& p : c["pushes"]) {
      CompressionPush push;
      for (const auto& w : p["workers"]) {
        push.grads.push_back(FloatsFromHex(w["grad"]));
        push.residuals.push_back(FloatsFromHex(w["residual"]));
        push.packed.push_back(BytesFromHex(w["packed"]));
      }
      push.sum = FloatsFromHex(p["sum"]);
      k.pushes.push_back(std::move(push));
    }
    cases.push_back(std::move(k));
  }
  return cases;
}

// Equal bit for bit (a float's == would take -0 for 0).
inline bool SameBits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

}  // namespace testing
}  // namespace tally
