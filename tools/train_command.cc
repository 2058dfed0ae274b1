// `tally train`: MXNet image-classification's flags and log lines, over the Trainer. This
// file turns flags into a TrainerConfig and FitOptions and wires the profiler, checkpoints
// and the progress bar to Fit (worker/fit.h), which holds the epoch and batch loop.
// Data: a RecordIO pack (--data-train, tools/train_data.h) or synthetic, learnable images.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <cstdio>
#include <string>
#include <thread>

#include <gflags/gflags.h>

#include "net/cluster.h"
#include "ops/ops.h"
#include "profile/node_profiler.h"
#include "profile/trace.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "tools/command.h"
#include "tools/optimizer_flags.h"
#include "tools/progress.h"
#include "tools/train_board.h"
#include "tools/train_checkpoints.h"
#include "tools/train_data.h"
#include "tools/train_elastic.h"
#include "worker/checkpoint.h"
#include "worker/fit.h"
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
DEFINE_int64(warmup_steps, 0, "updates to ramp the lr up over (MXNet's warmup_steps); > 0: instead of --warmup-epochs");
DEFINE_double(lr_poly_power, 2.0, "--lr-scheduler poly: the power of the decay (MXNet's pwr)");
DEFINE_double(final_lr, 0.0, "--lr-scheduler poly or cosine: the lr the decay ends at (MXNet's final_lr)");
DEFINE_int32(lr_batch_scale, 0, "when > 0, scale --lr by (batch size x workers) / this (0: off)");
DEFINE_double(mom, 0.9, "momentum");
DEFINE_string(gradient_compression, "", "with a dist_* or device --kv-store: 2bit or 1bit, MXNet's gradient compression "
              "(pushes send packed bits, each worker keeps the rest per key); empty: none");
DEFINE_double(gc_threshold, 0.5, "--gradient-compression's threshold (2bit sends +t, -t or 0), in MXNet's units: "
              "gradients summed over the worker's batch");
DEFINE_double(wd, 1e-4, "weight decay");
DEFINE_string(wd_exclude, "", "parameters trained without weight decay: bn (batch-norm gamma and beta), bias, or "
              "bn,bias (MXNet's wd_mult 0 by name)");
DEFINE_string(optimizer, "sgd", "sgd, nag, adam, adamw, adagrad, rmsprop, signum, lars or lamb (their parameters: "
                                "tools/optimizer_flags.cc)");
DEFINE_string(dtype, "float32", "precision: float32 (CPU); float16 and bfloat16 need --gpus");
DEFINE_int32(disp_batches, 20, "show progress every this many batches");
DEFINE_int32(top_k, 0, "report top-k accuracy too when > 0");
DEFINE_double(label_smoothing, 0.0, "label smoothing of the cross-entropy target, MXNet's smooth_alpha: 1 - s "
              "for the label, s / (classes - 1) for each other class");
DEFINE_bool(last_gamma, false, "zero the last BN gamma of every residual block");
DEFINE_int32(benchmark, 0, "1: train on one synthetic batch reused every step (compute only)");
DEFINE_bool(cuda_graph, true, "with --gpus and --kv-store local/device: record the training step as a CUDA "
            "graph after its first step and replay it");
DEFINE_bool(overlap, true, "with a dist_* --kv-store: the next forward pass waits for each weight just before its "
            "layer instead of every pull at the step's end");
DEFINE_uint64(seed, 0, "seed of initialisation and synthetic data");
DEFINE_int32(num_threads, 0, "CPU threads for the ops; 0: one per core");
DEFINE_string(model_prefix, "", "checkpoint files PREFIX-NNNN.params and .states (empty: none)");
DEFINE_int32(save_period, 1, "save a checkpoint every this many epochs (and after the last)");
DEFINE_int32(load_epoch, -1, "resume from checkpoint PREFIX-NNNN of --model-prefix (-1: a fresh start)");
DEFINE_string(resume, "", "auto: resume from the latest loadable checkpoint of --model-prefix, if any");
DEFINE_string(pretrained, "", "start from the weights of this .params file (MXNet Module checkpoint, Gluon resnet_v1 "
              "or GluonCV resnet_v1b, or Tally's) when there is no checkpoint to resume; the fc is initialised "
              "afresh when --num-classes differs");
DECLARE_string(data_train);
DECLARE_int32(data_nthreads);
DEFINE_bool(progress, true, "draw a live progress bar with ETA when stderr is a terminal");

namespace tally {
namespace {

Status BuildConfig(TrainerConfig* cfg) {
  if (!FLAGS_gpus.empty()) TALLY_RETURN_IF_ERROR(ParseGpus(FLAGS_gpus, &cfg->gpus));
  DType dtype;
  Status parsed = ParseDType(FLAGS_dtype, &dtype);
  if (!parsed.ok()) return Status::InvalidArgument("--dtype: " + parsed.message());
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return Status::InvalidArgument("--dtype " + FLAGS_dtype + ": training computes in float32, float16 or bfloat16");
  }
  if (dtype != DType::kF32 && cfg->gpus.empty()) {
    return Status::InvalidArgument("--dtype " + FLAGS_dtype + " needs --gpus; CPU workers compute in float32");
  }
  cfg->dtype = dtype;
  cfg->reuse_device_batch = FLAGS_benchmark != 0;
  cfg->cuda_graph = FLAGS_cuda_graph;
  cfg->overlap = FLAGS_overlap;
  if (FLAGS_cpu_devices < 1 || FLAGS_cpu_devices > 64) return Status::InvalidArgument("--cpu-devices must be in 1..64");
  if (FLAGS_num_epochs < 1) return Status::InvalidArgument("--num-epochs must be positive");
  if (FLAGS_disp_batches < 1) return Status::InvalidArgument("--disp-batches must be positive");
  if (FLAGS_num_classes < 2) return Status::InvalidArgument("--num-classes must be at least 2");
  if (FLAGS_top_k < 0 || FLAGS_top_k > FLAGS_num_classes) return Status::InvalidArgument("--top-k must be in 0..--num-classes");
  if (FLAGS_label_smoothing < 0 || FLAGS_label_smoothing >= 1) return Status::InvalidArgument("--label-smoothing must be in [0, 1)");
  TALLY_RETURN_IF_ERROR(CheckBatchSplit(
      FLAGS_batch_size, cfg->gpus.empty() ? FLAGS_cpu_devices : static_cast<int>(cfg->gpus.size())));
  if (FLAGS_save_period < 1) return Status::InvalidArgument("--save-period must be positive");
  if (FLAGS_resume != "" && FLAGS_resume != "auto") {
    return Status::InvalidArgument("--resume '" + FLAGS_resume + "': the only value is auto");
  }
  if (FLAGS_load_epoch < -1) return Status::InvalidArgument("--load-epoch must be a checkpoint number (>= 0)");
  if (FLAGS_load_epoch >= 0 && !FLAGS_resume.empty()) {
    return Status::InvalidArgument("--load-epoch and --resume auto both say where to resume from: give one");
  }
  if ((FLAGS_load_epoch >= 0 || !FLAGS_resume.empty()) && FLAGS_model_prefix.empty()) {
    return Status::InvalidArgument(std::string(FLAGS_load_epoch >= 0 ? "--load-epoch" : "--resume") +
                                   " needs --model-prefix, the checkpoints' path prefix");
  }
  if (FLAGS_load_epoch >= 0 && !FLAGS_pretrained.empty()) {
    return Status::InvalidArgument("--load-epoch and --pretrained both say which weights to start from: give one");
  }
  if (!FLAGS_pretrained.empty() && access(FLAGS_pretrained.c_str(), R_OK) != 0) {
    return Status::InvalidArgument("--pretrained " + FLAGS_pretrained + ": cannot read it");
  }
  if (FLAGS_load_epoch >= FLAGS_num_epochs) {
    return Status::InvalidArgument("--load-epoch " + std::to_string(FLAGS_load_epoch) + " is not before --num-epochs " +
                                   std::to_string(FLAGS_num_epochs) + ": nothing would be left to train");
  }

  cfg->model.network = FLAGS_network;
  cfg->model.num_layers = FLAGS_num_layers;
  cfg->model.num_classes = FLAGS_num_classes;
  TALLY_RETURN_IF_ERROR(ParseImageShape(FLAGS_image_shape, &cfg->model.image_shape));
  cfg->model.zero_last_gamma = FLAGS_last_gamma;
  cfg->model.seed = FLAGS_seed;
  cfg->num_devices = FLAGS_cpu_devices;
  TALLY_RETURN_IF_ERROR(ParseKVStoreType(FLAGS_kv_store, &cfg->kv_store));
  TALLY_RETURN_IF_ERROR(ParseCompression(FLAGS_gradient_compression, static_cast<float>(FLAGS_gc_threshold),
                                         &cfg->gradient_compression));
  TALLY_RETURN_IF_ERROR(OptimizerFromFlags(&cfg->optimizer));
  TALLY_RETURN_IF_ERROR(ParseWdExclude(FLAGS_wd_exclude, &cfg->wd_exclude));
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
  lr->pwr = FLAGS_lr_poly_power;
  lr->final_lr = FLAGS_final_lr;
  if (FLAGS_warmup_steps < 0) return Status::InvalidArgument("--warmup-steps must not be negative");
  double one_worker_lr;
  TALLY_RETURN_IF_ERROR(BatchScaledLr(FLAGS_lr, FLAGS_batch_size, FLAGS_lr_batch_scale, &one_worker_lr));
  // The updates of an epoch are not known yet: warm-up in updates is checked against them
  // once they are (FinishLrSchedule).
  TALLY_RETURN_IF_ERROR(ValidateLrSchedule(*lr));
  lr->warmup_steps = FLAGS_warmup_steps;
  return Status::Ok();
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

// Who this process is, for the profiler's files.
profile::NodeMeta MakeNodeMeta(const std::string& role, int rank, const std::string& host) {
  profile::NodeMeta m;
  m.role = role;
  m.rank = rank;
  m.node = profile::NodeName(role, rank);
  m.host = host;
  m.pid = static_cast<int>(getpid());
  m.config = {{"network", FLAGS_network},        {"num_layers", std::to_string(FLAGS_num_layers)},
              {"image_shape", FLAGS_image_shape}, {"batch_size", std::to_string(FLAGS_batch_size)},
              {"kv_store", FLAGS_kv_store},        {"data_nthreads", std::to_string(FLAGS_data_nthreads)},
              {"dtype", FLAGS_dtype},              {"data_train", FLAGS_data_train},
              {"gpus", FLAGS_gpus}};
  return m;
}

// --gc-threshold is in MXNet's units: its Module pushes gradients summed over the worker's
// batch and rescales them by 1 / batch on the servers (times the workers, synchronous). The
// trainer pushes them already divided so (trainer_step.cc): the store multiplies them back
// before quantising and the servers divide the sum again, so that the same values cross the
// threshold, and the same +-t (+-1) arrive, as in MXNet.
void CompressInMXNetUnits(int num_workers, TrainerConfig* cfg) {
  const int per_push = FLAGS_batch_size * (IsDistributedSync(cfg->kv_store) ? num_workers : 1);
  cfg->gradient_compression.scale = static_cast<float>(per_push);
}

// Joins the job as a worker when the kvstore is distributed; `rejoin`: this process left it
// (a --membership-replay) and joins it again as a new process would (TALLY_JOIN=1).
Status JoinIfDistributed(bool rejoin, std::unique_ptr<Cluster>* cluster, TrainerConfig* cfg) {
  if (!IsDistributed(cfg->kv_store)) return Status::Ok();
  if (std::getenv("DMLC_ROLE") == nullptr) {
    return Status::InvalidArgument("--kv-store " + FLAGS_kv_store +
                                   " needs the DMLC_* environment of a job: start it with tools/launch.py");
  }
  ClusterConfig c;
  TALLY_RETURN_IF_ERROR(ClusterConfigFromEnv(&c));
  c.can_join |= rejoin;
  std::unique_ptr<Transport> transport;
  TALLY_RETURN_IF_ERROR(NewJobTransport(c, &transport));
  TALLY_RETURN_IF_ERROR(Cluster::Join(c, std::move(transport), cluster));
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

// SIGTERM (a spot instance's notice, Slurm's preemption, the launcher stopping the job): the
// worker finishes its step, the job agrees on the step to stop after (TrainerHooks::RequestStop),
// worker 0 (--elastic: the lead) saves a checkpoint there, and the workers exit with StoppedExit().
std::atomic<bool> g_terminate{false};
constexpr int kTerminatedExit = 128 + SIGTERM;

// A stop with its checkpoint saved loses nothing: the run continues with --resume auto, so it
// is a success (0), which schedulers take as such (Slurm: COMPLETED, and requeueable). A stop
// without --model-prefix lost the run's work: 128 + SIGTERM. TALLY_STOPPED_STATUS replaces
// the 0: tools/launch.py sets 75 so that it can tell a saved stop from the end of training.
int StoppedExit(bool lead) {
  if (FLAGS_model_prefix.empty()) {
    if (lead) std::printf("tally train: no --model-prefix, so no checkpoint was saved\n");
    return kTerminatedExit;
  }
  if (lead) {
    std::printf("tally train: stopped on SIGTERM at the job's agreed step, the checkpoint saved under %s: the same "
                "command with --resume auto continues from it\n", FLAGS_model_prefix.c_str());
  }
  const char* status = std::getenv("TALLY_STOPPED_STATUS");
  if (status == nullptr) return 0;
  char* end = nullptr;
  const long v = std::strtol(status, &end, 10);
  return *status != '\0' && *end == '\0' && v >= 0 && v <= 255 ? static_cast<int>(v) : 0;
}

extern "C" void OnWorkerTerminate(int) { g_terminate = true; }

// A scheduler or server keeps serving after SIGTERM until the workers have saved and
// finished (the job's end stops it; a dead worker too, through the heartbeats). Before the
// job has gathered there is nothing to save, and perhaps no worker to wait for (a worker
// refused its flags): it exits at once.
std::atomic<bool> g_role_joined{false};

extern "C" void OnRoleTerminate(int) {
  if (!g_role_joined.load()) {
    const char msg[] = "tally: SIGTERM before the job gathered: nothing to save, exiting\n";
    ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)ignored;
    _exit(kTerminatedExit);
  }
  const char msg[] = "tally: SIGTERM: serving on until the workers have saved their checkpoint and finished\n";
  ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
}

void OnSigterm(void (*handler)(int)) {
  struct sigaction sa = {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
}

int Fail(const std::string& what, const Status& s) {
  std::fprintf(stderr, "tally train: %s%s\n", what.c_str(), s.ToString().c_str());
  return what.empty() ? 2 : 1;
}

// The worker's profiler (one that records nothing without --run-dir), on the job's clock.
Status StartWorkerProfiler(Cluster* cluster, int rank, std::unique_ptr<NodeProfiler>* prof) {
  ProfilerOptions options;
  TALLY_RETURN_IF_ERROR(ProfilerOptionsFromFlags(&options));
  TALLY_RETURN_IF_ERROR(
      NodeProfiler::Start(options, MakeNodeMeta("worker", rank, cluster ? cluster->me().host() : "localhost"), prof));
  if (cluster != nullptr) {
    (*prof)->SetClock([cluster](int64_t* offset, int64_t* rtt) { return cluster->ClockOffset(offset, rtt); });
  }
  if (!options.run_dir.empty() && rank == 0) {
    std::printf("tally train: profiler files in %s (see: tally report %s)\n", options.run_dir.c_str(),
                options.run_dir.c_str());
  }
  return Status::Ok();
}

void PrintBanner() {
  const std::string devices = FLAGS_gpus.empty() ? std::to_string(FLAGS_cpu_devices) + " cpu device(s)"
                                                  : "gpu(s) " + FLAGS_gpus + " in " + FLAGS_dtype;
  std::printf("tally train: %s-%d, %d classes, image %s, batch %d on %s, kvstore %s, %d threads\n",
              FLAGS_network.c_str(), FLAGS_num_layers, FLAGS_num_classes, FLAGS_image_shape.c_str(),
              FLAGS_batch_size, devices.c_str(), FLAGS_kv_store.c_str(), NumThreads());
  std::fflush(stdout);
}

FitOptions MakeFitOptions(const TrainerConfig& cfg, const LrScheduleConfig& lr, const Checkpoint& resume, int rank) {
  FitOptions o;
  o.num_epochs = FLAGS_num_epochs;
  o.begin_epoch = resume.epoch;
  o.begin_batch = resume.batch;
  o.begin_step = resume.step;
  o.disp_batches = FLAGS_disp_batches;
  o.save_period = FLAGS_save_period;
  o.lr = lr;
  o.initial_lr = cfg.optimizer.lr;
  o.top_k = FLAGS_top_k;
  o.rank = rank;
  o.kv_store = cfg.kv_store;
  o.stop = &g_terminate;
  return o;
}

// The Speedometer's line, the profiler's records and the progress bar; checkpoints when
// this worker saves them.
FitCallbacks WireCallbacks(NodeProfiler* prof, ProgressBar* bar, Trainer* trainer, int num_workers, bool saves) {
  FitCallbacks cb;
  cb.step_begins = [prof](int64_t step) { prof->BeginStep(step); };
  cb.step_ends = [prof](const profile::StepRecord& record) { prof->AddStep(record); };
  cb.speedometer = [prof](const SpeedometerWindow& window) {
    // With --profile the line ends with the window's time split (MXNet's parsers read the
    // fields before it).
    const std::string split = prof->tracing() ? "\t" + prof->TakeSplit() : "";
    std::printf("%s\n", SpeedometerLine(window, FLAGS_top_k, split).c_str());
    std::fflush(stdout);
  };
  if (saves) {
    cb.checkpoint = [trainer, num_workers](int64_t epoch, int64_t batch, int64_t step) {
      return SaveAt(trainer, num_workers, epoch, batch, step);
    };
  }
  cb.progress = [bar](int epoch, int64_t done, int64_t total, double samples_per_sec, double eta_seconds) {
    bar->Update(epoch, done, total, samples_per_sec, eta_seconds);
  };
  cb.before_print = [bar] { bar->Clear(); };
  return cb;
}

// --elastic: a worker leaves on its own SIGTERM, except the job's lead (the lowest live rank
// it has heard of), which stops the whole job there as worker 0 does without --elastic; or
// before the step --membership-replay names (*rejoins: and joins again later).
Status WireLeave(Cluster* cluster, Trainer* trainer, int rank, FitOptions* o, bool* rejoins) {
  ElasticOptions elastic;
  TALLY_RETURN_IF_ERROR(ElasticFlags(&elastic));
  if (!elastic.elastic) return Status::Ok();
  if (cluster == nullptr) return Status::InvalidArgument("--elastic needs a dist_* --kv-store");
  int64_t replay = -1;
  TALLY_RETURN_IF_ERROR(ReplayLeaveStep(rank, o->begin_step, &replay, rejoins));
  trainer->kvstore().trainer_hooks()->SetElastic();
  MembershipView* view = trainer->kvstore().membership_view();
  o->leads = [view, rank] {
    const std::vector<int> live = view->membership().live;
    return !live.empty() && *std::min_element(live.begin(), live.end()) == rank;
  };
  o->leave = [replay, leads = o->leads](int64_t step) {
    return (g_terminate.load() && !leads()) || (replay >= 0 && step >= replay);
  };
  return Status::Ok();
}

// Trains the run's epochs and ends the run: with the job (dist modes) and the profiler's
// files; on an agreed stop, with 128 + SIGTERM. *rejoin: this worker left the job before a
// step --membership-replay names and joins it again later.
int RunFit(const TrainerConfig& cfg, LrScheduleConfig lr, const Checkpoint& resume, Cluster* cluster,
           Trainer* trainer, NodeProfiler* prof, const JoinTimes& times, bool* rejoin) {
  const int num_workers = cluster ? cluster->num_workers() : 1;
  const int rank = cluster ? cluster->me().rank() : 0;
  // Every worker draws its own training images; all validate on the same ones. A worker
  // that joined the running job (always --elastic) starts at its first step: its elastic
  // source follows the job's cut from the start through the changes heard up to there.
  const int64_t first = trainer->kvstore().membership_view()->first_step();
  std::unique_ptr<BatchSource> train_data, val_data;
  Status s = MakeTrainSource(cfg, rank, num_workers, DataPositionOf(resume, trainer), &train_data);
  if (s.ok() && first > 0 && !train_data->elastic()) {  // TALLY_JOIN=1 on a command without --elastic
    s = Status::InvalidArgument("worker " + std::to_string(rank) + " joined a running job without --elastic "
                                "(or TALLY_ELASTIC=1): its data would not follow the job's re-cut");
  }
  if (s.ok()) s = MakeValSource(cfg, &val_data);
  if (s.ok()) s = FinishLrSchedule(num_workers, train_data->batches_per_epoch(), &lr);
  if (!s.ok()) return Fail("", s);
  if (!FLAGS_wd_exclude.empty() && rank == 0) {
    std::printf("tally train: --wd-exclude %s: %zu trainable arrays without weight decay\n", FLAGS_wd_exclude.c_str(),
                trainer->config().optimizer.no_wd_keys.size());
  }
  ProgressBar bar(FLAGS_progress);
  FitOptions options = MakeFitOptions(cfg, lr, resume, rank);
  if (first > 0) options.begin_step = first;
  s = WireLeave(cluster, trainer, rank, &options, rejoin);
  if (!s.ok()) return Fail("", s);
  // Worker 0 saves; under --elastic, whoever leads at the checkpoint's step.
  const bool saves = !FLAGS_model_prefix.empty() && (rank == 0 || options.leads);
  FitCallbacks callbacks = WireCallbacks(prof, &bar, trainer, num_workers, saves);
  if (saves && options.leads) {
    callbacks.checkpoint = LeadsCheckpoints(trainer, rank, first > 0 ? 0 : resume.step, callbacks.checkpoint);
  }
  if (first > 0) AnnounceJoin(rank, first, times, &callbacks);
  std::unique_ptr<FitBoard> board;
  s = OpenWorkerBoard(trainer, rank, FLAGS_top_k, &board);
  if (!s.ok()) return Fail("", s);
  if (board) board->Attach(&callbacks);
  FitResult result;
  s = Fit(trainer, train_data.get(), val_data.get(), options, callbacks, &result);
  if (!s.ok()) return EndedBeforeItsFirstStep(cluster, s) ? 0 : Fail(result.failed_at, s);
  if (result.left) {
    *rejoin = *rejoin && !g_terminate.load();
    s = LeaveJob(cluster, result.steps);
    prof->Finish().ok();
    if (!s.ok()) return Fail("worker " + std::to_string(rank) + " leaving: ", s);
    std::printf("tally train: worker %d left the job before step %lld (--elastic)%s\n", rank,
                static_cast<long long>(result.steps), *rejoin ? "; it joins again (--membership-replay)" : "");
    std::fflush(stdout);
    return 0;
  }
  if (result.stopped) {
    const bool lead = options.leads ? options.leads() : rank == 0;  // it saved the checkpoint
    if (cluster) cluster->Finish(/*timeout_ms=*/60000);
    prof->Finish().ok();
    std::fflush(stdout);
    return StoppedExit(lead);
  }
  if (cluster) {
    WaitForDoneGate();
    s = cluster->Finish(/*timeout_ms=*/60000, result.steps - (first > 0 ? 0 : resume.step));  // the run's count
    if (!s.ok()) return Fail("worker " + std::to_string(rank) + ": ", s);
  }
  s = prof->Finish();
  if (!s.ok()) return Fail("profiler: ", s);
  return 0;
}

}  // namespace

// As in MXNet, the training command started by tools/launch.py as a scheduler or a server
// runs that role instead, until the job ends. With --run-dir, it profiles itself too.
int RunRole(const ClusterConfig& c) {
  const bool scheduler = c.role == wire::SCHEDULER;
  const char* name = scheduler ? "scheduler" : "server";
  ProfilerOptions options;
  Status s = ProfilerOptionsFromFlags(&options);
  std::unique_ptr<NodeProfiler> prof;
  if (s.ok() && scheduler && !options.run_dir.empty()) {
    s = NodeProfiler::Start(options, MakeNodeMeta("scheduler", 0, c.scheduler_host), &prof);
  }
  std::unique_ptr<Transport> transport;
  if (s.ok()) s = NewJobTransport(c, &transport);
  if (s.ok() && scheduler) {
    s = RunScheduler(c, std::move(transport), [] { g_role_joined = true; }, nullptr, ElasticSchedulerOptions());
  } else if (s.ok()) {
    ServerObserver observer;
    observer.joined = [&](const Cluster& cluster) {
      g_role_joined = true;
      if (options.run_dir.empty()) return;
      Status started = NodeProfiler::Start(options, MakeNodeMeta("server", cluster.me().rank(), cluster.me().host()), &prof);
      if (!started.ok()) {
        std::fprintf(stderr, "tally server: profiler: %s\n", started.ToString().c_str());
        return;
      }
      prof->SetClock([&cluster](int64_t* offset, int64_t* rtt) { return cluster.ClockOffset(offset, rtt); });
    };
    if (!options.run_dir.empty()) {
      observer.step = [&](const profile::StepRecord& r) {
        if (prof) prof->AddStep(r);
      };
      observer.step_begins = [&](int64_t step) {
        if (prof) prof->BeginStep(step);
      };
      observer.ending = [&](const Cluster&) {
        if (prof) prof->Finish().ok();
      };
    }
    ServerBoard board;
    board.Attach(&observer);
    ElasticOptions elastic;
    s = ElasticFlags(&elastic);
    if (s.ok()) s = RunServer(c, std::move(transport), observer, elastic);
  }
  if (prof) {
    Status f = prof->Finish();
    if (s.ok()) s = f;
  }
  if (!s.ok()) {
    std::fprintf(stderr, "tally %s: %s\n", name, s.ToString().c_str());
    return 1;
  }
  return 0;
}

namespace {
int RunWorker(TrainerConfig cfg, const LrScheduleConfig& lr_schedule, bool rejoining, bool* rejoin);
}  // namespace

int TrainCommand(int argc, char** argv) {
  ParseFlags("tally train [--network=resnet --num-layers=20 --batch-size=128 ...]", &argc, &argv, {__FILE__, "tools/train_data.cc", "tools/train_elastic.cc", "tools/train_board.cc", "profile/node_profiler.cc"});
  const char* role = std::getenv("DMLC_ROLE");
  if (role != nullptr && std::string(role) != "worker") {
    ClusterConfig c;
    Status s = ClusterConfigFromEnv(&c);
    if (!s.ok()) return Fail("", s);
    OnSigterm(OnRoleTerminate);
    return RunRole(c);
  }
  OnSigterm(OnWorkerTerminate);
  TrainerConfig cfg;
  LrScheduleConfig lr_schedule;
  Status s = BuildConfig(&cfg);
  if (s.ok()) s = BuildLrSchedule(&lr_schedule);
  ElasticOptions elastic;
  if (s.ok()) s = ElasticFlags(&elastic);
  if (s.ok() && elastic.elastic && !IsDistributed(cfg.kv_store)) {
    s = Status::InvalidArgument("--elastic needs a dist_* --kv-store, not " + FLAGS_kv_store);
  }
  if (!s.ok()) return Fail("", s);
  bool rejoin = false;
  int code = RunWorker(cfg, lr_schedule, /*rejoining=*/false, &rejoin);
  while (code == 0 && rejoin) code = RunWorker(cfg, lr_schedule, /*rejoining=*/true, &rejoin);
  return code;
}

namespace {

// One worker's part in the job, from joining it to its end or its leave (*rejoin: a
// --membership-replay has it join again, through the path a new process takes).
int RunWorker(TrainerConfig cfg, const LrScheduleConfig& lr_schedule, bool rejoining, bool* rejoin) {
  *rejoin = false;
  const double began_s = rejoining ? ProcessSeconds() : 0.0;  // a joiner's figures count from here
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<Trainer> trainer;
  Status s = JoinIfDistributed(rejoining, &cluster, &cfg);
  const int num_workers = cluster ? cluster->num_workers() : 1;
  const int rank = cluster ? cluster->me().rank() : 0;
  CompressInMXNetUnits(num_workers, &cfg);
  Checkpoint resume;
  bool resumed = false, complete = false;
  // A worker joining a running job takes the job's state from the servers, not a checkpoint.
  const bool joins = cluster && cluster->joined_after_epoch() > 0;
  if (s.ok() && !joins) s = FindResumePoint(num_workers, cfg.model, &resume, &resumed, &complete);
  if (s.ok() && complete) {
    if (cluster) s = cluster->Finish(/*timeout_ms=*/60000);
    return s.ok() ? 0 : Fail("", s);
  }
  if (s.ok() && rank == 0) s = MakePrefixDirectory();
  if (s.ok()) {
    SetNumThreads(FLAGS_num_threads > 0 ? FLAGS_num_threads : ThreadsPerWorker(cluster.get()));
    s = Trainer::Create(cfg, &trainer, resumed ? &resume : nullptr);
  }
  const double ready_s = ProcessSeconds() - began_s;  // a joiner: its weights are in
  std::unique_ptr<NodeProfiler> prof;  // after `cluster`: destroyed first
  if (s.ok()) s = StartWorkerProfiler(cluster.get(), rank, &prof);
  if (!s.ok()) return EndedBeforeItsFirstStep(cluster.get(), s) ? 0 : Fail("", s);
  PrintBanner();
  return RunFit(cfg, lr_schedule, resume, cluster.get(), trainer.get(), prof.get(), JoinTimes{began_s, ready_s},
                rejoin);
}

}  // namespace

}  // namespace tally
