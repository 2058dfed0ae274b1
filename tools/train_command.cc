// `tally train`: MXNet image-classification's flags and log lines, over the Trainer.
// Data: a RecordIO pack (--data-train, tools/train_data.h) or synthetic, learnable images.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include <gflags/gflags.h>

#include "kvstore/cluster.h"
#include "ops/ops.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "tools/command.h"
#include "tools/train_data.h"
#include "worker/lr_schedule.h"
#include "worker/trainer.h"

DEFINE_string(network, "resnet", "the network family");
DEFINE_int32(num_layers, 20, "depth: 18/34/50/101/152 (ImageNet style) or 6n+2 such as 20, 56 (CIFAR style)");
DEFINE_int32(num_classes, 10, "number of classes");
DEFINE_string(image_shape, "3,32,32", "input image shape C,H,W");
DEFINE_int32(batch_size, 128, "batch size of this worker, split across its devices");
DEFINE_int32(num_epochs, 3, "epochs to train");
DEFINE_string(kv_store, "device", "kvstore type: local, device, dist_sync, dist_device_sync or dist_async");
DEFINE_string(gpus, "", "GPUs to use, such as 0,1; empty: CPU");
DEFINE_int32(cpu_devices, 1, "CPU devices this process drives when --gpus is empty");
DEFINE_double(lr, 0.1, "learning rate");
DEFINE_string(lr_scheduler, "step", "learning-rate schedule: step (--lr-factor at --lr-step-epochs), poly or cosine");
DEFINE_double(lr_factor, 0.1, "the ratio to reduce the lr by at each of --lr-step-epochs");
DEFINE_string(lr_step_epochs, "", "epochs to reduce the lr at, such as 30,60");
DEFINE_int32(warmup_epochs, 0, "epochs to ramp the lr up over before the schedule starts");
DEFINE_string(warmup_strategy, "linear", "linear (from 0) or constant (the unscaled --lr)");
DEFINE_int32(lr_batch_scale, 0, "when > 0, scale --lr by (batch size x workers) / this (0: off)");
DEFINE_double(mom, 0.9, "momentum");
DEFINE_double(wd, 1e-4, "weight decay");
DEFINE_string(optimizer, "sgd", "sgd or nag");
DEFINE_string(dtype, "float32", "precision: float32 (CPU); float16 and bfloat16 need --gpus");
DEFINE_int32(disp_batches, 20, "show progress every this many batches");
DEFINE_int32(top_k, 0, "report top-k accuracy too when > 0");
DEFINE_double(label_smoothing, 0.0, "label smoothing of the cross-entropy target");
DEFINE_bool(last_gamma, false, "zero the last BN gamma of every residual block");
DEFINE_int32(benchmark, 0, "1: train on one synthetic batch reused every step (compute only)");
DEFINE_uint64(seed, 0, "seed of initialisation and synthetic data");
DEFINE_int32(num_threads, 0, "CPU threads for the ops; 0: one per core");

namespace tally {
namespace {

Status BuildConfig(TrainerConfig* cfg) {
  if (!FLAGS_gpus.empty()) {
    return Status::InvalidArgument("--gpus " + FLAGS_gpus + ": this Tally has no GPU ops yet; leave --gpus empty to train on the CPU");
  }
  DType dtype;
  Status parsed = ParseDType(FLAGS_dtype, &dtype);
  if (!parsed.ok()) return Status::InvalidArgument("--dtype: " + parsed.message());
  if (dtype != DType::kF32) {
    return Status::InvalidArgument("--dtype " + FLAGS_dtype + " needs --gpus; CPU workers compute in float32");
  }
  if (FLAGS_cpu_devices < 1 || FLAGS_cpu_devices > 64) return Status::InvalidArgument("--cpu-devices must be in 1..64");
  if (FLAGS_num_epochs < 1) return Status::InvalidArgument("--num-epochs must be positive");
  if (FLAGS_disp_batches < 1) return Status::InvalidArgument("--disp-batches must be positive");
  if (FLAGS_num_classes < 2) return Status::InvalidArgument("--num-classes must be at least 2");
  if (FLAGS_top_k < 0 || FLAGS_top_k > FLAGS_num_classes) return Status::InvalidArgument("--top-k must be in 0..--num-classes");
  if (FLAGS_label_smoothing < 0 || FLAGS_label_smoothing >= 1) return Status::InvalidArgument("--label-smoothing must be in [0, 1)");
  TALLY_RETURN_IF_ERROR(CheckBatchSplit(FLAGS_batch_size, FLAGS_cpu_devices));

  cfg->model.network = FLAGS_network;
  cfg->model.num_layers = FLAGS_num_layers;
  cfg->model.num_classes = FLAGS_num_classes;
  TALLY_RETURN_IF_ERROR(ParseImageShape(FLAGS_image_shape, &cfg->model.image_shape));
  cfg->model.zero_last_gamma = FLAGS_last_gamma;
  cfg->model.seed = FLAGS_seed;
  cfg->num_devices = FLAGS_cpu_devices;
  cfg->kv_store = FLAGS_kv_store;
  cfg->optimizer.type = FLAGS_optimizer;
  cfg->optimizer.lr = static_cast<float>(FLAGS_lr);
  cfg->optimizer.momentum = static_cast<float>(FLAGS_mom);
  cfg->optimizer.wd = static_cast<float>(FLAGS_wd);
  cfg->label_smoothing = static_cast<float>(FLAGS_label_smoothing);
  cfg->top_k = FLAGS_top_k;
  return Status::Ok();
}

// The schedule's flags; base lr, batch count and warm-up lr come once the job and data are
// known (FinishLrSchedule). Checked here too so that bad flags fail before joining a job.
Status BuildLrSchedule(LrScheduleConfig* lr) {
  lr->base_lr = FLAGS_lr;
  lr->num_epochs = FLAGS_num_epochs;
  lr->scheduler = FLAGS_lr_scheduler;
  lr->factor = FLAGS_lr_factor;
  TALLY_RETURN_IF_ERROR(ParseLrStepEpochs(FLAGS_lr_step_epochs, &lr->step_epochs));
  lr->warmup_epochs = FLAGS_warmup_epochs;
  lr->warmup_strategy = FLAGS_warmup_strategy;
  double one_worker_lr;
  TALLY_RETURN_IF_ERROR(BatchScaledLr(FLAGS_lr, FLAGS_batch_size, FLAGS_lr_batch_scale, &one_worker_lr));
  return ValidateLrSchedule(*lr);
}

// Linear warm-up starts from 0 as in MXNet. Constant warm-up holds the unscaled --lr, the lr
// of the reference batch (Goyal et al.), never above the scaled one.
Status FinishLrSchedule(int num_workers, int64_t batches_per_epoch, LrScheduleConfig* lr) {
  const int64_t global_batch = static_cast<int64_t>(FLAGS_batch_size) * num_workers;
  TALLY_RETURN_IF_ERROR(BatchScaledLr(FLAGS_lr, global_batch, FLAGS_lr_batch_scale, &lr->base_lr));
  lr->batches_per_epoch = batches_per_epoch;
  lr->warmup_begin_lr = lr->warmup_strategy == "constant" ? std::min(FLAGS_lr, lr->base_lr) : 0.0;
  return ValidateLrSchedule(*lr);
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// MXNet's metric text: "\taccuracy=0.500000[\ttop_k_accuracy_5=...]\tcross-entropy=...".
std::string Metrics(const StepStats& s, int top_k) {
  char buf[160];
  double n = s.samples > 0 ? static_cast<double>(s.samples) : 1.0;
  int len = std::snprintf(buf, sizeof buf, "accuracy=%f", s.correct / n);
  if (top_k > 1) len += std::snprintf(buf + len, sizeof buf - len, "\ttop_k_accuracy_%d=%f", top_k, s.topk_correct / n);
  std::snprintf(buf + len, sizeof buf - len, "\tcross-entropy=%f", s.loss_sum / n);
  return buf;
}

std::string Prefixed(const char* prefix, const StepStats& s, int top_k) {
  std::string m = Metrics(s, top_k), out;
  size_t start = 0;
  while (start <= m.size()) {
    size_t tab = m.find('\t', start);
    out += (out.empty() ? "" : "\t") + std::string(prefix) + m.substr(start, tab - start);
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  return out;
}

// As in MXNet, the training command started by tools/launch.py as a scheduler or a server
// runs that role instead, until the job ends.
int RunRole(const ClusterConfig& c) {
  Status s = c.role == wire::SCHEDULER ? RunScheduler(c, NewZmqTransport()) : RunServer(c, NewZmqTransport());
  if (!s.ok()) {
    std::fprintf(stderr, "tally %s: %s\n", c.role == wire::SCHEDULER ? "scheduler" : "server", s.ToString().c_str());
    return 1;
  }
  return 0;
}

// Joins the job as a worker when the kvstore is distributed.
Status JoinIfDistributed(std::unique_ptr<Cluster>* cluster, TrainerConfig* cfg) {
  if (FLAGS_kv_store.rfind("dist_", 0) != 0) return Status::Ok();
  if (std::getenv("DMLC_ROLE") == nullptr) {
    return Status::InvalidArgument("--kv-store " + FLAGS_kv_store +
                                   " needs the DMLC_* environment of a job: start it with tools/launch.py");
  }
  ClusterConfig c;
  TALLY_RETURN_IF_ERROR(ClusterConfigFromEnv(&c));
  TALLY_RETURN_IF_ERROR(Cluster::Join(c, NewZmqTransport(), cluster));
  cfg->cluster = cluster->get();
  return Status::Ok();
}

// Workers that share a host share its cores: each takes its part of them (0: all, the
// OpenMP default, when the process is alone).
int ThreadsPerWorker(const Cluster* cluster) {
  if (cluster == nullptr) return 0;
  int local = 0;
  for (int r = 0; r < cluster->num_workers(); ++r) {
    local += cluster->node(cluster->WorkerId(r)).host() == cluster->me().host();
  }
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, local));
}

}  // namespace

int TrainCommand(int argc, char** argv) {
  ParseFlags("tally train [--network=resnet --num-layers=20 --batch-size=128 ...]", &argc, &argv);
  const char* role = std::getenv("DMLC_ROLE");
  if (role != nullptr && std::string(role) != "worker") {
    ClusterConfig c;
    Status s = ClusterConfigFromEnv(&c);
    if (!s.ok()) {
      std::fprintf(stderr, "tally train: %s\n", s.ToString().c_str());
      return 2;
    }
    return RunRole(c);
  }
  TrainerConfig cfg;
  LrScheduleConfig lr_schedule;
  Status s = BuildConfig(&cfg);
  if (s.ok()) s = BuildLrSchedule(&lr_schedule);
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Trainer> trainer;
  if (s.ok()) s = JoinIfDistributed(&cluster, &cfg);
  if (s.ok()) {
    SetNumThreads(FLAGS_num_threads > 0 ? FLAGS_num_threads : ThreadsPerWorker(cluster.get()));
    s = Trainer::Create(cfg, &trainer);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "tally train: %s\n", s.ToString().c_str());
    return 2;
  }
  const int rank = cluster ? cluster->me().rank() : 0;
  std::printf("tally train: %s-%d, %d classes, image %s, batch %d on %d cpu device(s), kvstore %s, %d threads\n",
              FLAGS_network.c_str(), FLAGS_num_layers, FLAGS_num_classes, FLAGS_image_shape.c_str(),
              FLAGS_batch_size, FLAGS_cpu_devices, FLAGS_kv_store.c_str(), NumThreads());
  std::fflush(stdout);

  // Every worker draws its own training images; all validate on the same ones.
  const int num_workers = cluster ? cluster->num_workers() : 1;
  std::unique_ptr<BatchSource> train_data, val_data;
  s = MakeTrainSource(cfg, rank, num_workers, &train_data);
  if (s.ok()) s = MakeValSource(cfg, &val_data);
  if (s.ok()) s = FinishLrSchedule(num_workers, train_data->batches_per_epoch(), &lr_schedule);
  if (!s.ok()) {
    std::fprintf(stderr, "tally train: %s\n", s.ToString().c_str());
    return 2;
  }
  const int64_t batches = train_data->batches_per_epoch();
  Tensor images, labels;
  // Changes only: in dist modes every change is a message to the servers.
  float applied_lr = cfg.optimizer.lr;
  for (int epoch = 0; epoch < FLAGS_num_epochs; ++epoch) {
    StepStats epoch_stats, window;
    std::printf("Epoch[%d] lr=%f\n", epoch, LearningRate(epoch * batches, lr_schedule));
    double epoch_start = Now(), tic = epoch_start;
    for (int64_t b = 0; b < batches; ++b) {
      const float lr = static_cast<float>(LearningRate(epoch * batches + b, lr_schedule));
      if (lr != applied_lr) {
        trainer->SetLearningRate(lr);
        applied_lr = lr;
      }
      s = train_data->Next(&images, &labels);
      StepStats step;
      if (s.ok()) s = trainer->Step(images, labels, &step);
      if (!s.ok()) {
        std::fprintf(stderr, "tally train: worker %d, epoch %d batch %ld: %s\n", rank, epoch, static_cast<long>(b),
                     s.ToString().c_str());
        return 1;
      }
      epoch_stats.Add(step);
      window.Add(step);
      if ((b + 1) % FLAGS_disp_batches == 0) {
        double now = Now();
        std::printf("Epoch[%d] Batch [%ld-%ld]\tSpeed: %.2f samples/sec\t%s\n", epoch,
                    static_cast<long>(b + 1 - FLAGS_disp_batches), static_cast<long>(b + 1),
                    window.samples / (now - tic), Metrics(window, FLAGS_top_k).c_str());
        std::fflush(stdout);
        window = StepStats();
        tic = now;
      }
    }
    std::printf("Epoch[%d] %s\n", epoch, Prefixed("Train-", epoch_stats, FLAGS_top_k).c_str());
    std::printf("Epoch[%d] Time cost=%.3f\n", epoch, Now() - epoch_start);
    if (val_data) {
      StepStats val;
      for (int64_t b = 0; b < val_data->batches_per_epoch() && s.ok(); ++b) {
        s = val_data->Next(&images, &labels);
        if (s.ok()) s = trainer->Evaluate(images, labels, &val);
      }
      if (!s.ok()) {
        std::fprintf(stderr, "tally train: validation after epoch %d: %s\n", epoch, s.ToString().c_str());
        return 1;
      }
      std::printf("Epoch[%d] %s\n", epoch, Prefixed("Validation-", val, FLAGS_top_k).c_str());
    }
    std::fflush(stdout);
  }
  if (cluster) {
    s = cluster->Finish(/*timeout_ms=*/60000);
    if (!s.ok()) {
      std::fprintf(stderr, "tally train: worker %d: %s\n", rank, s.ToString().c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace tally
