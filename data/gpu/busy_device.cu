#include "data/gpu/busy_device.h"

#include <chrono>
#include <cstdint>
#include <thread>

#include "ops/cuda/check.h"

namespace tally {
namespace {

constexpr int kThreads = 256;
constexpr uint64_t kBlockNs = 100000;  // each block spins 0.1 ms
constexpr int kWaves = 50;             // a kernel is about 50 blocks' turns: 5 ms

__device__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SpinKernel(uint64_t ns) {
  const uint64_t t0 = GlobalTimerNs();
  while (GlobalTimerNs() - t0 < ns) {
  }
}

void CUDART_CB Sleep(void* seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(*static_cast<double*>(seconds)));
}

}  // namespace

BusyDevice::BusyDevice(int device) : device_(device) {
  TALLY_CUDA_CHECK(cudaSetDevice(device_));
  TALLY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TALLY_CUDA_CHECK(cudaEventCreate(&start_));
  TALLY_CUDA_CHECK(cudaEventCreate(&end_));
}

BusyDevice::~BusyDevice() {
  cudaStreamSynchronize(stream_);
  cudaEventDestroy(start_);
  cudaEventDestroy(end_);
  cudaStreamDestroy(stream_);
}

void BusyDevice::Kernels(double seconds) {
  TALLY_CUDA_CHECK(cudaSetDevice(device_));
  int sms = 0, per_sm = 0;
  TALLY_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device_));
  TALLY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, SpinKernel, kThreads, 0));
  const double kernel_s = kWaves * kBlockNs * 1e-9;
  const int launches = seconds <= 0 ? 0 : static_cast<int>(seconds / kernel_s + 0.5) + 1;
  TALLY_CUDA_CHECK(cudaEventRecord(start_, stream_));
  for (int i = 0; i < launches; ++i) {
    SpinKernel<<<sms * per_sm * kWaves, kThreads, 0, stream_>>>(kBlockNs);
    TALLY_CUDA_CHECK(cudaGetLastError());
  }
  TALLY_CUDA_CHECK(cudaEventRecord(end_, stream_));
}

void BusyDevice::HostFunction(double seconds) {
  TALLY_CUDA_CHECK(cudaSetDevice(device_));
  host_seconds_ = seconds;
  TALLY_CUDA_CHECK(cudaEventRecord(start_, stream_));
  TALLY_CUDA_CHECK(cudaLaunchHostFunc(stream_, Sleep, &host_seconds_));
  TALLY_CUDA_CHECK(cudaEventRecord(end_, stream_));
}

double BusyDevice::Wait() {
  TALLY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  float ms = 0;
  TALLY_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, end_));
  return ms * 1e-3;
}

}  // namespace tally
