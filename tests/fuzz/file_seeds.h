// The seed corpora of the file-format fuzzers, for make_seeds:
//
//   WriteFileSeeds(dir);   // dir/ndarray/*, dir/safetensors/*, dir/checkpoint/*
//
// Each seed is one input in its harness's layout (layouts.h, docs/fuzzing.md). Deterministic
// but for the checkpoint ids, which SaveCheckpoint draws at random.
#pragma once

#include <filesystem>

namespace tally {
namespace fuzz {

void WriteFileSeeds(const std::filesystem::path& dir);

}  // namespace fuzz
}  // namespace tally
