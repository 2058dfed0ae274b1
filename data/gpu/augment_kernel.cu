// Crop + bilinear resize + mirror + colour + normalisation for a batch, one thread per
// output pixel. The arithmetic follows data/augment.cc step for step (same taps, same
// order of the two linear passes, same affine map) so that the GPU and CPU outputs differ
// only by the decoders and by float contraction.
#include "data/gpu/augment_kernel.h"

#include "ops/cuda/check.h"
#include "ops/cuda/dtype.cuh"

namespace tally {
namespace {

// data/augment.cc's constants; kept equal by tests/data/gpu_loader_test.cc's comparison.
__constant__ float kGreyWeights[3] = {0.299f, 0.587f, 0.114f};

struct Tap {
  int i0, i1;
  float w;
};

// MakeTaps in data/augment.cc, for output pixel i.
__device__ Tap TapAt(float start, float length, int out, int src_size, int i) {
  const float scale = length / out;
  const float lo = fmaxf(0.0f, start), hi = fminf(static_cast<float>(src_size - 1), start + length - 1);
  const float s = fminf(fmaxf(start + (i + 0.5f) * scale - 0.5f, lo), fmaxf(lo, hi));
  Tap t;
  t.i0 = min(static_cast<int>(s), src_size - 1);
  t.i1 = min(t.i0 + 1, src_size - 1);
  t.w = s - t.i0;
  return t;
}

// The bilinear RGB value of output pixel (x, y) of sample s, before any colour change.
__device__ void Resample(const GpuAugmentSample& s, const GpuAugmentArgs& a, int x, int y,
                         float rgb[3]) {
  const int xi = s.mirror ? a.out_w - 1 - x : x;
  const Tap tx = TapAt(s.crop_x, s.crop_w, a.out_w, s.width, xi);
  const Tap ty = TapAt(s.crop_y, s.crop_h, a.out_h, s.height, y);
  float a0[3], b0[3], a1[3], b1[3];
  FetchRgb(s, tx.i0, ty.i0, a0);
  FetchRgb(s, tx.i1, ty.i0, b0);
  FetchRgb(s, tx.i0, ty.i1, a1);
  FetchRgb(s, tx.i1, ty.i1, b1);
  for (int c = 0; c < 3; ++c) {
    const float h0 = a0[c] + tx.w * (b0[c] - a0[c]);
    const float h1 = a1[c] + tx.w * (b1[c] - a1[c]);
    rgb[c] = h0 + ty.w * (h1 - h0);
  }
}

// Contrast blends with the mean grey of the resampled crop: one block per sample sums it.
__global__ void GreyMeanKernel(const GpuAugmentSample* samples, GpuAugmentArgs a,
                               float* grey) {
  const GpuAugmentSample s = samples[blockIdx.x];
  __shared__ double partial[256];
  double sum = 0;
  if (s.contrast != 1.0f) {
    for (int p = threadIdx.x; p < a.out_h * a.out_w; p += blockDim.x) {
      float rgb[3];
      Resample(s, a, p % a.out_w, p / a.out_w, rgb);
      sum += kGreyWeights[0] * rgb[0] + kGreyWeights[1] * rgb[1] + kGreyWeights[2] * rgb[2];
    }
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    grey[blockIdx.x] = static_cast<float>(s.brightness * partial[0] / (static_cast<double>(a.out_w) * a.out_h));
  }
}

template <typename T>
__global__ void AugmentKernel(const GpuAugmentSample* samples, const float* grey,
                              GpuAugmentArgs a, T* out) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= a.out_h * a.out_w) return;
  const int n = blockIdx.y;
  const GpuAugmentSample s = samples[n];
  float v[3];
  Resample(s, a, p % a.out_w, p / a.out_w, v);
  // Augmenter::Apply's affine map v' = M v + t (brightness, contrast, saturation, PCA).
  const float bc = s.brightness * s.contrast, sat = s.saturation;
  const float grey_mean = s.contrast != 1.0f ? grey[n] : 0.0f;
  float r[3];
  for (int i = 0; i < 3; ++i) {
    float m[3];
    for (int c = 0; c < 3; ++c) m[c] = bc * ((i == c ? sat : 0) + (1 - sat) * kGreyWeights[c]);
    const float t = (1 - s.contrast) * grey_mean + s.pca_rgb[i];
    r[i] = fminf(fmaxf(m[0] * v[0] + m[1] * v[1] + m[2] * v[2] + t, 0.0f), 255.0f);
  }
  T* dst = out + (static_cast<size_t>(n) * a.out_h * a.out_w + p) * a.channels;
  for (int c = 0; c < 3; ++c) cuda::Store(&dst[c], (r[c] - a.mean[c]) * a.inv_std[c]);
  if (a.channels == 4) cuda::Store(&dst[3], 0.0f);
}

}  // namespace

GpuAugmentArgs GpuAugmentArgsFor(const AugmentParams& params, DType dtype, int channels) {
  GpuAugmentArgs a;
  a.out_h = params.data_h;
  a.out_w = params.data_w;
  a.channels = channels;
  a.dtype = dtype;
  const float mean[3] = {params.mean_r, params.mean_g, params.mean_b};
  const float std[3] = {params.std_r, params.std_g, params.std_b};
  for (int c = 0; c < 3; ++c) a.mean[c] = mean[c], a.inv_std[c] = 1 / std[c];
  a.any_contrast = params.contrast > 0;
  return a;
}

GpuAugmentSample GpuSampleFor(const AugmentPlan& plan, int width, int height, const uint8_t* pixels) {
  GpuAugmentSample s;
  s.pixels = pixels;
  s.width = width;
  s.height = height;
  s.crop_x = plan.crop_x, s.crop_y = plan.crop_y, s.crop_w = plan.crop_w, s.crop_h = plan.crop_h;
  s.mirror = plan.mirror ? 1 : 0;
  s.brightness = plan.brightness, s.contrast = plan.contrast, s.saturation = plan.saturation;
  for (int c = 0; c < 3; ++c) s.pca_rgb[c] = plan.pca_rgb[c];
  return s;
}

void LaunchGpuAugment(const GpuAugmentSample* samples, int n, float* grey_scratch,
                      const GpuAugmentArgs& args, void* out, cudaStream_t stream) {
  if (n == 0) return;
  if (args.any_contrast) {
    GreyMeanKernel<<<n, 256, 0, stream>>>(samples, args, grey_scratch);
    TALLY_LAUNCH_CHECK();
  }
  constexpr int kThreads = 256;
  const dim3 grid((args.out_h * args.out_w + kThreads - 1) / kThreads, n);
  TALLY_DISPATCH_FLOAT(args.dtype, "GPU augmentation", T, {
    AugmentKernel<T><<<grid, kThreads, 0, stream>>>(samples, grey_scratch, args, static_cast<T*>(out));
  });
  TALLY_LAUNCH_CHECK();
}

}  // namespace tally
