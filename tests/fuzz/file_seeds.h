// The seed corpora of the file-format fuzzers, for make_seeds:
//
//   WriteFileSeeds(dir);   // dir/ndarray/*, dir/safetensors/*, dir/checkpoint/*
//
// Each seed is one input in its harness's layout (layouts.h, docs/fuzzing.md). Deterministic
// but for the checkpoint ids, which SaveCheckpoint draws at random.
#pragma once

#include <filesystem>
#include <string>

namespace tally {
namespace fuzz {

void WriteFileSeeds(const std::filesystem::path& dir);

// Writes bytes to dir/name, making dir; a failure is fatal (make_seeds runs at build time).
void WriteSeed(const std::filesystem::path& dir, const std::string& name, const std::string& bytes);

}  // namespace fuzz
}  // namespace tally
