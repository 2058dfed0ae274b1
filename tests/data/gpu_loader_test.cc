// The GPU input path (data/gpu_loader.h) against the CPU Loader, its reference.
//
// Tolerance of the comparison, in normalised units ((x - mean) / std, std ~57 grey levels):
// both loaders choose the same records, crops, mirrors and colour factors, so the outputs
// differ only where the two JPEG decoders do: libjpeg-turbo and nvJPEG round their IDCTs
// differently (±1-2 levels) and may upsample the 4:2:0 chroma differently (libjpeg's
// "fancy" triangle filter vs. replication), which moves colour edges by up to tens of levels
// on a few pixels. Colour jitter scales differences by up to ~2. Asserted: mean |diff| below
// 0.05 (about 3 grey levels) and max |diff| below 1.0 (57 levels, a chroma edge at most);
// the measured values are printed for docs/gpu.md.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>

#ifdef TALLY_HAVE_NVJPEG
#include <cuda_runtime.h>
#endif

#include "data/elastic_shard.h"
#include "data/gpu_loader.h"
#include "data/loader.h"
#include "ops/device.h"
#include "ops/random.h"
#include "tests/ops/cuda_compare.h"
#include "tests/temp_dir.h"

namespace tally {
namespace {

// A smooth, textured RGB image of w x h (photo-like enough for JPEG to behave as on photos).
Image Synthetic(int w, int h, uint64_t seed) {
  Rng rng(seed);
  Image img;
  img.Resize(h, w);
  const float base = 40 + 150 * rng.Uniform(), fx = 0.05f + 0.2f * rng.Uniform(), fy = 0.05f + 0.2f * rng.Uniform();
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        float v = base + 50 * std::sin(fx * x + c) * std::cos(fy * y - c) + 40.0f * x / w - 20 * c +
                  10 * (rng.Uniform() - 0.5f);
        img.row(y)[3 * x + c] = static_cast<uint8_t>(std::fmin(std::fmax(v, 0.0f), 255.0f));
      }
    }
  }
  return img;
}

// n records (label = record index) of various sizes in dir; record 5 is a PNG (decoded on
// the CPU). Returns dir.
std::string WritePack(const ScopedTempDir& tmp, int n) {
  const std::string& dir = tmp.path();
  std::unique_ptr<RecordWriter> writer;
  EXPECT_TRUE(RecordWriter::Open(dir + "/p.rec", &writer).ok());
  for (int i = 0; i < n; ++i) {
    Image img = Synthetic(120 + 17 * (i % 5), 90 + 13 * (i % 4), i);
    std::string bytes;
    Status s = i == 5 ? EncodePng(img, &bytes) : EncodeJpeg(img, 90, &bytes);
    EXPECT_TRUE(s.ok()) << s.ToString();
    ImageRecordHeader header;
    header.label = static_cast<float>(i);
    header.id = i;
    EXPECT_TRUE(writer->Write(PackImageRecord(header, bytes), i).ok());
  }
  EXPECT_TRUE(writer->Close(dir + "/p.idx").ok());
  return dir;
}

GpuLoaderConfig ConfigFor(const std::string& dir) {
  GpuLoaderConfig cfg;
  cfg.loader.rec_path = dir + "/p.rec";
  cfg.loader.idx_path = dir + "/p.idx";
  cfg.loader.batch_size = 8;
  cfg.loader.seed = 7;
  cfg.loader.threads = 2;
  cfg.loader.augment = AugmentParams::ImageNetTrain(64);
  cfg.loader.augment.dct_scaling = false;  // the GPU decodes at full size
  return cfg;
}

TEST(GpuLoader, RefusesWhatItDoesNotSupport) {
  GpuLoaderConfig cfg = ConfigFor("/nonexistent");
  EXPECT_TRUE(CheckGpuLoaderConfig(cfg).ok());
  GpuLoaderConfig bad = cfg;
  bad.dtype = DType::kI32;
  EXPECT_NE(CheckGpuLoaderConfig(bad).message().find("int32 is not supported"), std::string::npos);
  bad = cfg;
  bad.channels = 5;
  EXPECT_NE(CheckGpuLoaderConfig(bad).message().find("channels must be 3, or 4"), std::string::npos);
  for (int buffers : {1, 5}) {
    bad = cfg;
    bad.buffers = buffers;
    EXPECT_NE(CheckGpuLoaderConfig(bad).message().find("buffers must be 2, 3 or 4, not " + std::to_string(buffers)),
              std::string::npos);
  }
  bad = cfg;
  bad.tuning.decode_threads = 3;  // with 3 buffers: one is in use, two can be decoded ahead
  EXPECT_NE(CheckGpuLoaderConfig(bad).message().find("3 decode threads need more than 3 buffers"), std::string::npos);
  bad.tuning.decode_threads = 2;
  EXPECT_TRUE(CheckGpuLoaderConfig(bad).ok());
  bad.tuning.shared_state = true;  // one state cannot serve two threads at once
  EXPECT_NE(CheckGpuLoaderConfig(bad).message().find("shared-state) is for one decode thread, not 2"),
            std::string::npos);
  bad = cfg;
  bad.loader.label_width = 2;
  EXPECT_NE(CheckGpuLoaderConfig(bad).message().find("label_width"), std::string::npos);
  std::unique_ptr<GpuLoader> loader;
  EXPECT_FALSE(GpuLoader::Create(bad, &loader).ok());
}

TEST(GpuDecodeTuning, ParsesEverySettingAndNamesWhatItRefuses) {
  GpuDecodeTuning t;
  ASSERT_TRUE(ParseGpuDecodeTuning("default", &t).ok());
  EXPECT_EQ(DescribeGpuDecodeTuning(t), "default");
  const GpuDecodeTuning defaults;
  EXPECT_FALSE(t.shared_handle);
  EXPECT_EQ(t.decode_threads, 0);
  EXPECT_TRUE(t.high_priority && t.pooled_memory && t.preallocate);
  EXPECT_FALSE(t.probe_handle || t.pinned_input || t.yuv_output || t.init_once);
  const std::string all =
      "shared-handle,shared-state,default-priority,cuda-malloc,probe-handle,pinned-input,no-preallocate,yuv-output,"
      "init-once,threads=2";
  ASSERT_TRUE(ParseGpuDecodeTuning(all, &t).ok());
  EXPECT_TRUE(t.shared_handle && t.shared_state && t.probe_handle && t.pinned_input && t.yuv_output && t.init_once);
  EXPECT_EQ(t.decode_threads, 2);
  EXPECT_FALSE(t.high_priority || t.pooled_memory || t.preallocate);
  EXPECT_EQ(DescribeGpuDecodeTuning(t), all);  // the words, in ParseGpuDecodeTuning's order
  ASSERT_TRUE(ParseGpuDecodeTuning("standalone,pinned-input", &t).ok());
  EXPECT_EQ(DescribeGpuDecodeTuning(t),
            "shared-handle,shared-state,default-priority,probe-handle,pinned-input,threads=1");
  for (const char* bad : {"threads=0", "threads=4", "threads=x", "threads=", "fast"}) {
    t = defaults;
    t.pinned_input = true;
    Status s = ParseGpuDecodeTuning(std::string("shared-handle,") + bad, &t);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find(bad), std::string::npos) << s.ToString();
    EXPECT_TRUE(t.pinned_input && !t.shared_handle) << "a refused spec leaves the tuning as it was: " << bad;
  }
}

TEST(GpuLoader, FailsClearlyWithoutNvjpegOrGpu) {
  ScopedTempDir dir("gpu_loader_test");  // before the loader: removed after it stops
  std::unique_ptr<GpuLoader> loader;
  Status s = GpuLoader::Create(ConfigFor(WritePack(dir, 16)), &loader);
  if (!GpuDecodeBuilt()) {
    EXPECT_NE(s.message().find("built without nvJPEG"), std::string::npos) << s.ToString();
  } else if (CudaDeviceCount() == 0) {
    EXPECT_NE(s.message().find("no cuda:0"), std::string::npos) << s.ToString();
  } else {
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
}

// The same batches as the CPU Loader: labels, epoch, index and pad exactly, images within
// the tolerance above. Runs past two epochs, so every output buffer is reused.
// With plan, both read --elastic's forecast batches of worker 1 from step 3 of a cut over
// workers 0, 1 and 2 that worker 2 left at step 1 (LoaderConfig::plan).
void CompareWithCpu(DType dtype, int channels, int buffers, const std::string& tuning = "default",
                    bool plan = false) {
  TALLY_REQUIRE_GPU();
  if (!GpuDecodeBuilt()) GTEST_SKIP() << "skipped: this build has no nvJPEG";
  ScopedTempDir pack_dir("gpu_loader_test");  // before the loaders: removed after they stop
  GpuLoaderConfig cfg = ConfigFor(WritePack(pack_dir, 20));
  cfg.dtype = dtype;
  cfg.channels = channels;
  cfg.buffers = buffers;
  if (plan) {
    ElasticShards shards(20, cfg.loader.batch_size, {0, 1, 2});
    ASSERT_TRUE(shards.AddChange(/*from_step=*/1, {0, 1}).ok());
    for (int step = 0; step <= 3; ++step) shards.Advance();  // applied at step 1 + the lag
    cfg.loader.num_parts = 3;
    cfg.loader.part_index = 1;
    cfg.loader.plan = shards.ForecastOf(1);
    cfg.loader.plan_first_step = 3;
  }
  ASSERT_TRUE(ParseGpuDecodeTuning(tuning, &cfg.tuning).ok()) << tuning;
  std::unique_ptr<GpuLoader> gpu;
  Status s = GpuLoader::Create(cfg, &gpu);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::printf("nvJPEG decoder: %s, tuning %s\n", gpu->decoder().c_str(), tuning.c_str());
  std::unique_ptr<Loader> cpu;
  ASSERT_TRUE(Loader::Create(cfg.loader, &cpu).ok());
  ASSERT_EQ(gpu->batches_per_epoch(), cpu->batches_per_epoch());
  const int64_t batches = 2 * cpu->batches_per_epoch() + 1;
  double sum = 0, worst = 0;
  int64_t count = 0;
  for (int64_t b = 0; b < batches; ++b) {
    Batch g, c;
    ASSERT_TRUE(gpu->NextBatch(&g).ok());
    ASSERT_TRUE(cpu->NextBatch(&c).ok());
    ASSERT_EQ(g.epoch, c.epoch);
    ASSERT_EQ(g.index, c.index);
    ASSERT_EQ(g.pad, c.pad);
    for (int j = 0; j < cfg.loader.batch_size; ++j) ASSERT_EQ(g.labels.data<int32_t>()[j], c.labels.data<int32_t>()[j]);
    ASSERT_EQ(g.images.device().kind, Device::Kind::kCuda);
    Tensor host = Tensor::Empty(g.images.shape(), DType::kF32);
    host.CopyFrom(g.images);  // on the device stream, after the batch; waits for it
    const float* gp = host.data<float>();
    const float* cp = c.images.data<float>();
    const int64_t pixels = c.images.numel() / 3;
    for (int64_t p = 0; p < pixels; ++p) {
      for (int ch = 0; ch < 3; ++ch) {
        const double d = std::fabs(double{gp[p * channels + ch]} - cp[p * 3 + ch]);
        sum += d;
        worst = std::fmax(worst, d);
        ++count;
      }
      if (channels == 4) {
        ASSERT_EQ(gp[p * 4 + 3], 0.0f) << "the 4th channel must be zero";
      }
    }
  }
  const double mean = sum / count;
  std::printf("GPU vs CPU (%s, %d channels): mean |diff| %.4f, max |diff| %.4f (normalised units)\n",
              DTypeName(dtype), channels, mean, worst);
  EXPECT_LT(mean, 0.05);
  EXPECT_LT(worst, 1.0);
  GpuLoaderStats st = gpu->stats();
  EXPECT_GT(st.gpu_decoded, 0) << "nvJPEG decoded nothing";
  EXPECT_GT(st.cpu_decoded, 0) << "the PNG record should have been decoded on the CPU";
  std::printf("%d buffers: %s\n", buffers, DescribeGpuLoaderStats(st).c_str());
  EXPECT_GT(st.cuda_allocations, 0);
  EXPECT_GT(st.decode_s, 0);
}

// A batch's decode must not wait for unrelated work on the device, such as the training step
// on the device's stream: a decoder that waited for the whole device would run after each
// step instead of beside it. The unrelated work here is a 2 s host function on a stream of
// its own; four batches are asked for meanwhile. With the hardware decoder this fails today
// (2.0 s on an H200, all of it inside nvjpegDecodeBatched) although nvJPEG's hardware decoder
// alone, driven from one thread, does not wait (docs/gpu-results.md): something in how the
// loader drives it does, and this test is the check for the fix.
void DecodeBesideOtherWork(bool hardware_decoder) {
  TALLY_REQUIRE_GPU();
  if (!GpuDecodeBuilt()) GTEST_SKIP() << "skipped: this build has no nvJPEG";
#ifdef TALLY_HAVE_NVJPEG
  ScopedTempDir pack_dir("gpu_loader_test");  // before the loader: removed after it stops
  GpuLoaderConfig cfg = ConfigFor(WritePack(pack_dir, 20));
  cfg.hardware_decoder = hardware_decoder;
  std::unique_ptr<GpuLoader> gpu;
  Status s = GpuLoader::Create(cfg, &gpu);
  ASSERT_TRUE(s.ok()) << s.ToString();
  Batch b;
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(gpu->NextBatch(&b).ok());
  Synchronize(Device{Device::Kind::kCuda, 0});
  cudaStream_t busy = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking), cudaSuccess);
  auto sleep = [](void*) { std::this_thread::sleep_for(std::chrono::seconds(2)); };
  ASSERT_EQ(cudaLaunchHostFunc(busy, sleep, nullptr), cudaSuccess);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(gpu->NextBatch(&b).ok());
  Synchronize(Device{Device::Kind::kCuda, 0});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(cudaStreamSynchronize(busy), cudaSuccess);
  cudaStreamDestroy(busy);
  std::printf("%s decoder: 4 batches beside a 2 s host function: %.3f s; %s\n", gpu->decoder().c_str(), seconds,
              DescribeGpuLoaderStats(gpu->stats()).c_str());
  EXPECT_LT(seconds, 1.0) << "the GPU loader waited for work on another stream";
#endif
}

TEST(GpuLoader, DecodesBesideOtherWorkOnTheDevice) { DecodeBesideOtherWork(/*hardware_decoder=*/true); }
TEST(GpuLoader, TheCudaDecoderDecodesBesideOtherWorkOnTheDevice) { DecodeBesideOtherWork(/*hardware_decoder=*/false); }

TEST(GpuLoader, MatchesCpuLoaderF32TwoBuffers) { CompareWithCpu(DType::kF32, 3, 2); }
TEST(GpuLoader, MatchesCpuLoaderF16FourChannels) { CompareWithCpu(DType::kF16, 4, 3); }
TEST(GpuLoader, MatchesCpuLoaderBF16FourBuffers) { CompareWithCpu(DType::kBF16, 3, 4); }
// --elastic's batches (a plan) decoded on the GPU: the records the CPU Loader reads for it.
TEST(GpuLoader, MatchesCpuLoaderReadingAnElasticPlan) { CompareWithCpu(DType::kF16, 4, 3, "default", /*plan=*/true); }
// Every way of driving nvJPEG that bench io --gpu --decode-overlap measures decodes the same.
TEST(GpuLoader, MatchesCpuLoaderWithEveryDecodeTuning) {
  TALLY_REQUIRE_GPU();
  if (!GpuDecodeBuilt()) GTEST_SKIP() << "skipped: this build has no nvJPEG";
  for (const char* t : {"standalone,pinned-input", "shared-handle", "shared-state", "threads=1", "default-priority",
                        "cuda-malloc", "probe-handle", "no-preallocate", "yuv-output", "standalone,yuv-output",
                        "init-once"}) {
    SCOPED_TRACE(t);
    CompareWithCpu(DType::kF16, 4, 3, t);
  }
}

}  // namespace
}  // namespace tally
