// --wd-exclude: which parameters of a ResNet go without weight decay, and that every store
// (local, device on CPU devices and on a GPU, dist_sync through its servers) updates those
// keys without it and the others with it.
#include "worker/wd_exclude.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "kvstore/kvstore.h"
#include "ops/device.h"
#include "tests/ops/cuda_compare.h"
#include "tests/local_job.h"

namespace tally {
namespace {

TEST(WdExclude, ParsesTheListAndNamesTheFlag) {
  WdExclude e;
  ASSERT_TRUE(ParseWdExclude("", &e).ok());
  EXPECT_FALSE(e.bn || e.bias);
  ASSERT_TRUE(ParseWdExclude("bn", &e).ok());
  EXPECT_TRUE(e.bn && !e.bias);
  ASSERT_TRUE(ParseWdExclude("bias,bn", &e).ok());
  EXPECT_TRUE(e.bn && e.bias);
  for (const char* bad : {"bn,", "gamma", "bn,,bias", ",bn", "BN"}) {
    Status s = ParseWdExclude(bad, &e);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("--wd-exclude"), std::string::npos) << bad << ": " << s;
  }
}

std::vector<std::string> Names(const std::vector<Parameter*>& params, const std::set<int>& keys) {
  std::vector<std::string> names;
  for (int k : keys) names.push_back(params[k]->name);
  return names;
}

bool Has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// ResNet-50 has 161 trainable arrays: 53 convolutions, 53 batch norms (gamma and beta) and
// the fc's weight and bias. bn,bias leaves weight decay on the 53 convolutions and fc.weight.
TEST(WdExclude, ResNet50KeysByKind) {
  ModelConfig cfg;
  cfg.num_layers = 50;
  cfg.num_classes = 10;
  cfg.image_shape = {3, 32, 32};
  std::unique_ptr<Network> net;
  ASSERT_TRUE(CreateNetwork(cfg, &net).ok());
  const std::vector<Parameter*>& params = net->Parameters();
  WdExclude both{true, true}, bn{true, false}, bias{false, true};

  const std::vector<std::string> all = Names(params, NoWdKeys(params, both));
  EXPECT_EQ(all.size(), 107u);
  for (const char* n : {"bn1.weight", "bn1.bias", "layer1.0.bn3.weight", "layer4.2.bn2.bias",
                        "layer1.0.downsample.1.weight", "layer3.0.downsample.1.bias", "fc.bias"}) {
    EXPECT_TRUE(Has(all, n)) << n;
  }
  for (const char* n : {"conv1.weight", "layer1.0.conv2.weight", "layer1.0.downsample.0.weight", "fc.weight",
                        "bn1.running_mean", "bn1.running_var"}) {
    EXPECT_FALSE(Has(all, n)) << n;
  }
  const std::vector<std::string> only_bn = Names(params, NoWdKeys(params, bn));
  EXPECT_EQ(only_bn.size(), 106u);
  EXPECT_FALSE(Has(only_bn, "fc.bias"));
  EXPECT_EQ(Names(params, NoWdKeys(params, bias)), std::vector<std::string>{"fc.bias"});
  EXPECT_TRUE(NoWdKeys(params, WdExclude()).empty());
}

// Key 0 (sliced across both servers in dist_sync) goes without weight decay, key 1 with it.
// A zero gradient leaves only the decay: w - lr * wd * w.
constexpr int64_t kBig = 100003;
constexpr float kLr = 0.5f, kWd = 0.1f, kW = 2.0f;

OptimizerConfig ExcludingKey0() {
  OptimizerConfig opt;
  opt.lr = kLr;
  opt.momentum = 0.0f;
  opt.wd = kWd;
  opt.no_wd_keys = {0};
  return opt;
}

void PushZerosAndCheck(KVStore* kv, const std::vector<Device>& devices) {
  const std::vector<int64_t> sizes = {kBig, 7};
  std::vector<Tensor> init;
  for (int64_t n : sizes) {
    init.push_back(Tensor::Empty({n}, DType::kF32));
    init.back().Fill(kW);
  }
  ASSERT_TRUE(kv->SetOptimizer(ExcludingKey0()).ok());
  ASSERT_TRUE(kv->Init({0, 1}, init).ok());
  for (int key = 0; key < 2; ++key) {
    std::vector<Tensor> grads, outs;
    for (const Device& d : devices) {
      grads.push_back(Tensor::Zeros({sizes[key]}, DType::kF32, d));
      outs.push_back(Tensor::Zeros({sizes[key]}, DType::kF32, d));
    }
    ASSERT_TRUE(kv->Push(key, grads).ok());
    ASSERT_TRUE(kv->Pull(key, outs).ok());
    ASSERT_TRUE(kv->WaitAll().ok());
    const float want = key == 0 ? kW : kW - kLr * (kWd * kW);
    for (const Tensor& out : outs) {
      Tensor host = Tensor::Empty(out.shape(), DType::kF32);
      host.CopyFrom(out);
      for (int64_t i = 0; i < sizes[key]; i += 997) {
        ASSERT_FLOAT_EQ(host.data<float>()[i], want) << "key " << key << " at " << i << " on " << out.device().ToString();
      }
    }
  }
}

TEST(WdExclude, LocalAndDeviceStoresOnCpuDevices) {
  for (KVStoreType type : {KVStoreType::kLocal, KVStoreType::kDevice}) {
    KVStoreSpec spec;
    spec.type = type;
    spec.num_devices = 2;
    std::unique_ptr<KVStore> kv;
    ASSERT_TRUE(KVStore::Create(spec, &kv).ok());
    PushZerosAndCheck(kv.get(), {Device::Cpu(0), Device::Cpu(1)});
  }
}

TEST(WdExclude, DeviceStoreOnAGpu) {
  TALLY_REQUIRE_GPU();
  const Device gpu{Device::Kind::kCuda, 0};
  KVStoreSpec spec;
  spec.type = KVStoreType::kDevice;
  spec.gpus = {gpu};
  std::unique_ptr<KVStore> kv;
  ASSERT_TRUE(KVStore::Create(spec, &kv).ok());
  PushZerosAndCheck(kv.get(), {gpu});
}

// The keys travel in SET_OPTIMIZER; the servers, which update slices, look each up by key.
TEST(WdExclude, DistSyncServersSkipDecayOnTheExcludedKeys) {
  LocalJob job(/*zmq=*/false, 2, 2);
  job.Run([](int, Cluster* cluster) {
    KVStoreSpec spec;
    spec.type = KVStoreType::kDistSync;
    spec.num_devices = 1;
    spec.cluster = cluster;
    std::unique_ptr<KVStore> kv;
    ASSERT_TRUE(KVStore::Create(spec, &kv).ok());
    PushZerosAndCheck(kv.get(), {Device::Cpu(0)});
  });
}

}  // namespace
}  // namespace tally
