#include "data/loader.h"

#include <unistd.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/temp_dir.h"

namespace tally {
namespace {

enum class Damage { kNone, kTruncated, kGarbage, kAbsurdSize };

// Writes `n` image records whose label is the record's index into dir/name.{rec,idx};
// `damage` spoils some. Returns dir/name.
std::string WritePack(const ScopedTempDir& dir, const std::string& name, int n,
                      const std::map<int, Damage>& damage = {}) {
  const std::string rec = dir.Path(name + ".rec");
  std::unique_ptr<RecordWriter> w;
  EXPECT_TRUE(RecordWriter::Open(rec, &w).ok());
  for (int i = 0; i < n; ++i) {
    Image img;
    img.Resize(24 + i % 5, 32);
    for (size_t p = 0; p < img.pixels.size(); ++p) img.pixels[p] = static_cast<uint8_t>(i * 11 + p % 97);
    std::string jpeg;
    EXPECT_TRUE(EncodeJpeg(img, 90, &jpeg).ok());
    auto d = damage.find(i);
    if (d != damage.end()) {
      if (d->second == Damage::kTruncated) jpeg.resize(jpeg.size() / 2);
      if (d->second == Damage::kGarbage) jpeg = "this is not an image at all";
      if (d->second == Damage::kAbsurdSize) {
        // SOF0's height and width both 65000: refused before any allocation.
        for (size_t k = 2; k + 9 < jpeg.size();) {
          if (static_cast<uint8_t>(jpeg[k + 1]) == 0xc0) {
            jpeg[k + 5] = jpeg[k + 7] = static_cast<char>(0xfd);
            jpeg[k + 6] = jpeg[k + 8] = static_cast<char>(0xe8);
            break;
          }
          k += 2 + (static_cast<uint8_t>(jpeg[k + 2]) << 8 | static_cast<uint8_t>(jpeg[k + 3]));
        }
      }
    }
    ImageRecordHeader h;
    h.label = static_cast<float>(i);
    h.id = i;
    EXPECT_TRUE(w->Write(PackImageRecord(h, jpeg), i).ok());
  }
  EXPECT_TRUE(w->Close(dir.Path(name + ".idx")).ok());
  return dir.Path(name);
}

LoaderConfig SmallConfig(const std::string& pack) {
  LoaderConfig c;
  c.rec_path = pack + ".rec";
  c.idx_path = pack + ".idx";
  c.batch_size = 8;
  c.threads = 2;
  c.prefetch = 3;
  c.seed = 5;
  c.output = OutputType::kU8;
  c.augment = AugmentParams::ImageNetTrain(16);
  return c;
}

struct Seen {
  std::vector<int> labels;  // in delivery order, padded samples included
  std::vector<int> pads;    // per batch
  std::vector<uint8_t> pixels;
};

Seen ReadEpochs(const LoaderConfig& c, int epochs) {
  std::unique_ptr<Loader> loader;
  Status s = Loader::Create(c, &loader);
  EXPECT_TRUE(s.ok()) << s;
  Seen seen;
  if (!s.ok()) return seen;
  for (int64_t b = 0; b < epochs * loader->batches_per_epoch(); ++b) {
    Batch batch;
    s = loader->NextBatch(&batch);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) break;
    EXPECT_EQ(batch.epoch, b / loader->batches_per_epoch());
    EXPECT_EQ(batch.index, b % loader->batches_per_epoch());
    for (int j = 0; j < c.batch_size; ++j) seen.labels.push_back(batch.labels.data<int32_t>()[j]);
    seen.pads.push_back(batch.pad);
    const uint8_t* px = batch.images.data<uint8_t>();
    seen.pixels.insert(seen.pixels.end(), px, px + batch.images.nbytes());
  }
  return seen;
}

TEST(Loader, EveryPartGetsTheSameNumberOfBatches) {
  ScopedTempDir dir("loader_test");
  const std::string pack = WritePack(dir, "uneven", 103);
  for (bool round : {true, false}) {
    std::set<int64_t> counts;
    for (int part = 0; part < 3; ++part) {
      LoaderConfig c = SmallConfig(pack);
      c.num_parts = 3, c.part_index = part, c.round_batch = round;
      std::unique_ptr<Loader> loader;
      ASSERT_TRUE(Loader::Create(c, &loader).ok());
      counts.insert(loader->batches_per_epoch());
      // Every batch a part promises is delivered, full, and the next epoch follows.
      for (int64_t b = 0; b <= loader->batches_per_epoch(); ++b) {
        Batch batch;
        ASSERT_TRUE(loader->NextBatch(&batch).ok());
        ASSERT_EQ(batch.images.dim(0), 8);
      }
    }
    ASSERT_EQ(counts.size(), 1u);
    EXPECT_EQ(*counts.begin(), round ? 5 : 4);  // 103 / 3 -> 35 (ceil) or 34 (floor) records
  }
}

TEST(Loader, EveryRecordOncePerEpochAcrossParts) {
  ScopedTempDir dir("loader_test");
  const std::string pack = WritePack(dir, "cover", 103);
  for (int epoch_count : {2}) {
    std::vector<std::multiset<int>> per_epoch(epoch_count);
    for (int part = 0; part < 3; ++part) {
      LoaderConfig c = SmallConfig(pack);
      c.num_parts = 3, c.part_index = part;
      Seen seen = ReadEpochs(c, epoch_count);
      const size_t per_epoch_samples = seen.labels.size() / epoch_count;
      for (size_t b = 0; b < seen.pads.size(); ++b) {
        // Padded samples sit at the end of a batch; the rest are each record's one visit.
        for (int j = 0; j < c.batch_size - seen.pads[b]; ++j) {
          size_t i = b * c.batch_size + j;
          per_epoch[i / per_epoch_samples].insert(seen.labels[i]);
        }
      }
    }
    for (const std::multiset<int>& labels : per_epoch) {
      ASSERT_EQ(labels.size(), 103u);
      for (int r = 0; r < 103; ++r) EXPECT_EQ(labels.count(r), 1u) << r;
    }
  }
}

TEST(Loader, APlanReadsTheForecastPositionsThroughTheEpochsPermutation) {
  // --elastic: a part's batches as ElasticShards forecasts them from step 4 of a cut over
  // ranks 0 and 3, the records being the epoch's permutation at those positions.
  ScopedTempDir dir("loader_test");
  const std::string pack = WritePack(dir, "plan", 50);
  ElasticShards shards(50, 8, {0, 3});
  for (int i = 0; i < 5; ++i) shards.Advance();
  LoaderConfig c = SmallConfig(pack);
  c.num_parts = 2, c.part_index = 1;
  c.plan = shards.ForecastOf(3);
  c.plan_first_step = 4;
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(Loader::Create(c, &loader).ok());
  for (int64_t step = 4; step < 12; ++step) {
    int64_t epoch = 0, index = 0;
    const ShardBatch want = c.plan->At(step, &epoch, &index);
    Batch batch;
    ASSERT_TRUE(loader->NextBatch(&batch).ok());
    EXPECT_EQ(batch.epoch, epoch);
    EXPECT_EQ(batch.index, index);
    EXPECT_EQ(batch.pad, want.pad);
    const std::vector<uint32_t> perm = EpochPermutation(50, true, c.seed, epoch);
    for (int j = 0; j < 8; ++j) {
      ASSERT_EQ(batch.labels.data<int32_t>()[j], static_cast<int32_t>(perm[want.positions[j]])) << "step " << step;
    }
  }
}

TEST(Loader, ShuffleIsPerEpochAndDeterministicWhateverTheThreads) {
  ScopedTempDir dir("loader_test");
  const std::string pack = WritePack(dir, "shuffle", 64);
  LoaderConfig c = SmallConfig(pack);
  c.threads = 1;
  Seen a = ReadEpochs(c, 2);
  c.threads = 3;
  c.prefetch = 2;
  Seen b = ReadEpochs(c, 2);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_TRUE(a.pixels == b.pixels);  // the same augmentation, sample for sample
  const std::vector<int> first(a.labels.begin(), a.labels.begin() + 64), second(a.labels.begin() + 64, a.labels.end());
  EXPECT_NE(first, second);
  EXPECT_EQ(std::set<int>(first.begin(), first.end()), std::set<int>(second.begin(), second.end()));
  c.seed = 6;
  EXPECT_NE(ReadEpochs(c, 1).labels, first);
  c.shuffle = false;
  std::vector<int> in_order = ReadEpochs(c, 1).labels;
  for (int i = 0; i < 64; ++i) EXPECT_EQ(in_order[i], i);
}

TEST(Loader, CorruptRecordsAreSkippedAndCounted) {
  const std::map<int, Damage> damage = {{3, Damage::kTruncated}, {17, Damage::kGarbage}, {40, Damage::kAbsurdSize}};
  ScopedTempDir dir("loader_test");
  const std::string pack = WritePack(dir, "corrupt", 64, damage);
  LoaderConfig c = SmallConfig(pack);
  c.max_bad_fraction = 0.1;
  c.output = OutputType::kF32;
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(Loader::Create(c, &loader).ok());
  std::multiset<int> labels;
  for (int64_t b = 0; b < loader->batches_per_epoch(); ++b) {
    Batch batch;
    Status s = loader->NextBatch(&batch);
    ASSERT_TRUE(s.ok()) << s;
    for (int j = 0; j < 8; ++j) labels.insert(batch.labels.data<int32_t>()[j]);
    const float* px = batch.images.data<float>();
    for (int64_t i = 0; i < batch.images.numel(); ++i) ASSERT_TRUE(std::isfinite(px[i]));
  }
  EXPECT_EQ(loader->stats().bad_records, 3);
  for (const auto& d : damage) EXPECT_EQ(labels.count(d.first), 0u);
  EXPECT_EQ(labels.size(), 64u);  // the bad ones' places were taken by good records
}

TEST(Loader, TooManyBadRecordsStopsWithAClearError) {
  std::map<int, Damage> damage;
  for (int i = 0; i < 64; i += 4) damage[i] = Damage::kGarbage;  // a quarter of the pack
  ScopedTempDir dir("loader_test");
  const std::string pack = WritePack(dir, "mostly_bad", 64, damage);
  LoaderConfig c = SmallConfig(pack);
  c.max_bad_fraction = 0.05;
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(Loader::Create(c, &loader).ok());
  Status s;
  for (int b = 0; b < 16 && s.ok(); ++b) {
    Batch batch;
    s = loader->NextBatch(&batch);
  }
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("max_bad_fraction"), std::string::npos) << s;
  EXPECT_NE(s.message().find("byte offset"), std::string::npos) << s;
  Batch batch;
  EXPECT_FALSE(loader->NextBatch(&batch).ok());  // and it stays failed
}

// A .rec without its .idx, as MXNet's ImageRecordIter reads one: the same batches, parts
// and shuffle as through the index.
TEST(Loader, ABareRecReadsAsWithItsIndex) {
  ScopedTempDir dir("loader_test");
  const std::string pack = WritePack(dir, "bare", 40);
  LoaderConfig c = SmallConfig(pack);
  c.num_parts = 2;
  c.part_index = 1;
  const Seen indexed = ReadEpochs(c, 2);
  c.idx_path = "";
  const Seen bare = ReadEpochs(c, 2);
  EXPECT_EQ(bare.labels, indexed.labels);
  EXPECT_TRUE(bare.pixels == indexed.pixels);
}

TEST(Loader, BadConfigurationAndMissingFilesAreStatuses) {
  ScopedTempDir dir("loader_test");
  const std::string pack = WritePack(dir, "config", 10);
  LoaderConfig c = SmallConfig(pack);
  std::unique_ptr<Loader> loader;
  c.part_index = 1;
  EXPECT_FALSE(Loader::Create(c, &loader).ok());
  c = SmallConfig(pack);
  c.rec_path = pack + ".missing";
  EXPECT_FALSE(Loader::Create(c, &loader).ok());
  c = SmallConfig(pack);
  c.round_batch = false;
  c.batch_size = 16;  // 10 records make no full batch
  EXPECT_FALSE(Loader::Create(c, &loader).ok());
}

TEST(Loader, StopsPromptlyWithAFullQueue) {
  ScopedTempDir dir("loader_test");
  const std::string pack = WritePack(dir, "stop", 40);
  LoaderConfig c = SmallConfig(pack);
  c.output = OutputType::kF16;
  std::unique_ptr<Loader> loader;
  ASSERT_TRUE(Loader::Create(c, &loader).ok());
  Batch batch;
  ASSERT_TRUE(loader->NextBatch(&batch).ok());
  EXPECT_EQ(batch.images.dtype(), DType::kF16);
  usleep(50 * 1000);  // the threads fill the queue and wait
  loader.reset();     // joins them
}

}  // namespace
}  // namespace tally
