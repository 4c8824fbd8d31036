// tessera-train: one rank of a data-parallel ViT training job.
//
// Wiring only: flags -> options, data, process group (rendezvous through the
// coordinator, a static TCPStore, or standalone), reporter, progress reports
// on the lease renewals, training loop, result.
// Exit codes (named in common/trainer_exit.h): 0 success, 1 runtime failure,
// 2 usage error, 3 lost the coordinator's lease (lease.h), 4 a collective
// failed or timed out (--collective-timeout; collective_timeout.h), 5
// preempted: SIGUSR1 asked the rank to checkpoint and leave, and it did so at
// the step all ranks agreed on (preemption.h); its job resumes from that
// checkpoint; 6 a CUDA error outside NCCL (a kernel fault, out of device
// memory). Codes 4 and 6 come with a "tessera-train: exit reason:" line that
// the worker passes on.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/fault_spec.h"
#include "common/file_io.h"
#include "common/trainer_exit.h"
#include "worker/trainer/data/dataset_loader.h"
#include "worker/trainer/data/image_data.h"
#include "worker/trainer/data/image_dataset.h"
#include "worker/trainer/data/training_data.h"
#include "worker/trainer/data/validation_split.h"
#include "worker/trainer/dist/collective_timeout.h"
#include "worker/trainer/dist/process_group.h"
#include "worker/trainer/run/coordinator_client.h"
#include "worker/trainer/run/eval_report.h"
#include "worker/trainer/run/evaluation.h"
#include "worker/trainer/run/fault_injector.h"
#include "worker/trainer/run/lease.h"
#include "worker/trainer/run/metrics_reporter.h"
#include "worker/trainer/run/preemption.h"
#include "worker/trainer/run/progress.h"
#include "worker/trainer/run/trainer.h"
#include "worker/trainer/run/trainer_flags.h"
#include "worker/trainer/run/trainer_options.h"
#include "worker/trainer/run/weights_preprocessing.h"

#if TESSERA_NCCL_TENSORS
#include "worker/trainer/dist/nccl_communicator.h"
#endif

#if TESSERA_TRAINER_WITH_GRPC
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "common/grpc_tls.h"
#include "worker/trainer/run/grpc_coordinator_client.h"
#endif

namespace tessera::trainer {
namespace {

#if TESSERA_TRAINER_WITH_GRPC
constexpr bool kCoordinatorSupported = true;
#else
constexpr bool kCoordinatorSupported = false;
#endif
// Time allowed at exit for queued metric points to reach the coordinator. A
// coordinator that is down when training ends may come back within the lease
// (--trainer-lease-ms, 90 s by default) without losing a point; past the lease
// the trainer stops itself anyway (lease.h).
constexpr absl::Duration kFinalFlushTimeout = absl::Seconds(120);
// Time allowed for a preempted rank's last progress report.
constexpr absl::Duration kFinalReportTimeout = absl::Seconds(5);

int Fail(const std::string& context, const absl::Status& status) {
  std::cerr << "tessera-train: " << context << ": " << status << std::endl;
  return kTrainerExitFailure;
}

absl::StatusOr<ImageDataset> LoadSplit(const TrainerOptions& options, Split split) {
  DatasetRequest request;
  request.name = options.dataset;
  request.data_dir = options.data_dir;
  request.split = split;
  request.limit = split == Split::kTrain ? options.train_subset : options.test_subset;
  request.seed = options.seed;
  return LoadImageDataset(request);
}

#if TESSERA_NCCL_TENSORS
// The NCCL that was loaded and the one built against: a mismatch explains
// failures that would otherwise look like bugs in the collectives.
void LogNcclVersion() {
  const absl::StatusOr<NcclVersions> versions = GetNcclVersions();
  if (!versions.ok()) {
    std::cerr << "tessera-train: " << versions.status() << std::endl;
    return;
  }
  std::cout << "tessera-train: NCCL " << FormatNcclVersion(versions->loaded)
            << " (built against " << FormatNcclVersion(versions->compiled) << ")"
            << std::endl;
  if (versions->loaded < versions->compiled) {
    std::cerr << "tessera-train: warning: the loaded NCCL "
              << FormatNcclVersion(versions->loaded) << " is older than the nccl.h "
              << FormatNcclVersion(versions->compiled) << " this was built with"
              << std::endl;
  }
}
#endif

std::unique_ptr<CoordinatorClient> MakeCoordinatorClient(const LaunchOptions& launch) {
#if TESSERA_TRAINER_WITH_GRPC
  if (launch.coordinator.empty()) return nullptr;
  TrainerIdentity identity;
  identity.job_id = launch.job_id;
  identity.attempt = launch.attempt;
  identity.rank = launch.rank;
  identity.credential = launch.credential;
  // TLS as the worker that launched this rank has it: the roots it trusts (the
  // pinned coordinator certificate, or the operator's CA) and the name to check.
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  // As the coordinator's and the worker's limit: answers are small, but a
  // corrupt or hostile one must not make the trainer buffer without bound.
  args.SetMaxReceiveMessageSize(16 << 20);
  const char* ca_file = std::getenv("TESSERA_TRAINER_TLS_CA");
  if (ca_file != nullptr && *ca_file != '\0') {
    absl::StatusOr<std::string> roots = ReadFile(
        ca_file, {.max_bytes = size_t{1} << 20, .what = "the coordinator's TLS roots"});
    if (roots.ok() && roots->empty()) {
      roots = absl::InvalidArgumentError(
          absl::StrCat("the coordinator's TLS roots '", ca_file, "' are empty"));
    }
    if (!roots.ok()) {
      // The channel would fail its handshakes; say why once, up front.
      std::cerr << "tessera-train: " << roots.status().message() << std::endl;
    }
    ClientTls tls;
    tls.enabled = true;
    tls.root_pem = roots.ok() ? *std::move(roots) : std::string();
    const char* server_name = std::getenv("TESSERA_TRAINER_TLS_SERVER_NAME");
    if (server_name != nullptr) tls.server_name = server_name;
    credentials = ChannelCredentialsFor(tls, args);
  }
  return std::make_unique<GrpcCoordinatorClient>(
      grpc::CreateCustomChannel(launch.coordinator, credentials, args), identity);
#else
  (void)launch;
  return nullptr;
#endif
}

// Keeps this rank's lease with the coordinator (lease.h) from a background
// thread; a rank that loses it stops itself. Every renewal carries the rank's
// progress report. Null without a coordinator. Both must outlive the keeper.
std::unique_ptr<LeaseKeeper> StartLease(CoordinatorClient* coordinator,
                                        const ProgressTracker& progress) {
  if (coordinator == nullptr) return nullptr;
  auto keeper = std::make_unique<LeaseKeeper>(
      RenewWithProgress(*coordinator, progress), FenceProcess,
      [](const std::string& line) {
        std::cerr << "tessera-train: " << line << std::endl;
      },
      MonotonicNow, MonotonicNow() - ProcessAge());
  keeper->Start();
  return keeper;
}

// Reads the rank's credential from --credential-file, which is then removed,
// and checks the options; the message of what is wrong is a usage error's.
absl::Status CompleteAndCheckFlags(TrainerFlags& flags) {
  if (!flags.launch.credential_file.empty()) {
    // The credential never appears in argv, which every user can read.
    absl::StatusOr<std::string> text =
        ReadFile(flags.launch.credential_file,
                 {.max_bytes = 1 << 16, .what = "--credential-file"});
    if (!text.ok()) return absl::InvalidArgumentError(text.status().message());
    flags.launch.credential = text->substr(0, text->find('\n'));
    if (flags.launch.credential.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read --credential-file ",
                                                     flags.launch.credential_file,
                                                     ": its first line is empty"));
    }
    std::remove(flags.launch.credential_file.c_str());
  }
  for (const absl::Status& status :
       {ValidateTrainerOptions(flags.trainer),
        ValidateLaunchOptions(flags.launch, kCoordinatorSupported)}) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// An evaluation of a weights file takes the preprocessing that comes with it
// (its metadata, config.json beside it) for the data keys the command line
// leaves unset, and says where each key came from.
absl::Status TakeWeightsPreprocessing(TrainerFlags& flags) {
  if (!UsesWeightsPreprocessing(flags.trainer)) return absl::OkStatus();
  absl::StatusOr<WeightsPreprocessingSources> sources =
      ReadWeightsPreprocessing(flags.trainer.init_from);
  if (!sources.ok()) return sources.status();
  absl::StatusOr<std::string> said =
      ApplyWeightsPreprocessing(*sources, flags.given, flags.trainer);
  if (!said.ok()) return said.status();
  std::cout << "tessera-train: preprocessing: " << *said << std::endl;
  return absl::OkStatus();
}

// How an image folder or shard set is opened and preprocessed.
ImageDataOptions ImageDataOptionsFor(const TrainerOptions& options) {
  ImageDataOptions opening;
  opening.kind = options.dataset;
  opening.root = options.data_dir;
  if (!options.mean.empty())
    opening.mean.assign(options.mean.begin(), options.mean.end());
  if (!options.std.empty()) opening.stddev.assign(options.std.begin(), options.std.end());
  opening.crop_fraction = options.crop_fraction;
  opening.interpolation = EffectiveInterpolation(options);
  opening.max_skipped_fraction = options.data_max_skipped;
  return opening;
}

// The process group's backend, device, limits and failure handling.
absl::StatusOr<ProcessGroupOptions> GroupOptionsFor(const TrainerFlags& flags,
                                                    const DevicePlacement& placement) {
  ProcessGroupOptions group_options;
  group_options.timeout = flags.launch.collective_timeout;
  // A collective that timed out or failed ends the rank at once, with the
  // reason on stderr and its own exit code (the collective timeout aborted the
  // communicator first).
  group_options.on_collective_failure = ExitOnCollectiveFailure;
  // A CUDA error outside NCCL that the NCCL collective timeout finds: its own code.
  group_options.on_device_failure = ExitOnCudaError;
  group_options.gloo_pairwise_exchange = flags.gloo_allreduce == "exchange";
  if (placement.cuda) {
    if (!NcclBackendAvailable()) {
      return absl::FailedPreconditionError(
          "training on CUDA needs the nccl backend, which this build lacks "
          "(NCCL not found at build time); use --device=cpu");
    }
    group_options.backend = "nccl";
    group_options.cuda_device = placement.index;
  }
  return group_options;
}

MetricsReporterOptions ReportingFor(int rank, const LaunchOptions& launch) {
  MetricsReporterOptions reporting;
  reporting.rank = rank;
  reporting.metrics_file = launch.metrics_file;
  reporting.progress = &std::cout;
  return reporting;
}

// A kernel fault or an out-of-memory: the device, not the training code or a
// peer, is the reason, and the rank ends with its own exit code.
void ExitIfCudaError(const absl::Status& failure, const DevicePlacement& placement,
                     Communicator& communicator) {
  if (!IsCudaErrorMessage(std::string(failure.message()))) return;
  communicator.Abort();
  ExitOnCudaError(
      absl::StrCat("training on ", placement.name(), " failed: ", failure.message()));
}

FaultInjectorOptions FaultInjectorLogging() {
  FaultInjectorOptions faulting;
  faulting.log = [](const std::string& line) {
    std::cerr << "tessera-train: " << line << std::endl;
  };
  return faulting;
}

TrainerLoopOptions LoopOptionsFor(const LaunchOptions& launch, ProgressTracker& progress,
                                  FaultInjector& fault) {
  TrainerLoopOptions loop;
  loop.log = &std::cout;
  loop.local_rank = launch.local_rank;  // the device ResolveDevice chose
  loop.progress = &progress;
  loop.stop_requested = &PreemptionRequested();
  loop.fault = &fault;
  loop.profile_dir = launch.profile_dir;
  return loop;
}

// A preempted run's end: every rank stopped after the same step, and the job
// resumes from there. Returns the exit code.
int FinishPreempted(const TrainingOutcome& outcome, MetricsReporter& reporter,
                    LeaseKeeper* lease) {
  const absl::Status flushed = reporter.Flush(kFinalFlushTimeout);
  if (!flushed.ok()) std::cerr << "tessera-train: " << flushed << std::endl;
  // One last progress report ("done" at the checkpoint's step), so that the
  // coordinator knows where the ranks stopped before it sees the exit.
  if (lease != nullptr) lease->ReportNow(kFinalReportTimeout);
  if (outcome.checkpointed) {
    std::cout << "tessera-train: preempted: checkpointed at step " << outcome.steps
              << "; exiting with code " << kTrainerExitPreempted << std::endl;
  } else {
    std::cout << "tessera-train: preempted at step " << outcome.steps
              << " without a --checkpoint-dir: the work since the start is lost; "
                 "exiting with code "
              << kTrainerExitPreempted << std::endl;
  }
  return kTrainerExitPreempted;
}

void PrintDone(int rank, const TrainingOutcome& outcome) {
  std::cout << absl::StrFormat(
                   "[rank %d] done: %d steps, %.1f images/s, test_accuracy=%.4f "
                   "test_loss=%.4f param_hash=%s",
                   rank, outcome.steps,
                   outcome.train_seconds > 0
                       ? static_cast<double>(outcome.train_images) / outcome.train_seconds
                       : 0.0,
                   outcome.test_accuracy, outcome.test_loss, outcome.param_hash)
            << std::endl;
}

// A completed run's end: metrics first, so they are stored by the time the
// result marks the rank done; then the result. Returns whether the
// coordinator took the result.
absl::Status FlushAndReportResult(const TrainingOutcome& outcome,
                                  MetricsReporter& reporter,
                                  CoordinatorClient* coordinator) {
  const absl::Status flushed = reporter.Flush(kFinalFlushTimeout);
  if (!flushed.ok()) {
    // Training succeeded; lost metric points are not a reason to fail the rank.
    std::cerr << "tessera-train: " << flushed << std::endl;
  }
  if (coordinator == nullptr) return absl::OkStatus();
  TrainingResult result;
  result.param_hash = outcome.param_hash;
  result.test_accuracy = outcome.test_accuracy;
  result.test_loss = outcome.test_loss;
  return coordinator->ReportResult(result);
}

// --eval-only (evaluation.h) in place of training: the report goes to the
// log and the metrics, and with the result to the coordinator (rank 0 sends
// the per-class figures). Returns the exit code.
int EvaluateRank(const TrainerOptions& options, const TrainingData& data,
                 const ProcessGroup& group, MetricsReporter& reporter,
                 CoordinatorClient* coordinator, const TrainerLoopOptions& loop) {
  absl::StatusOr<EvalReport> report =
      RunEvaluation(options, data, *group.communicator, reporter, loop);
  if (!report.ok()) {
    group.communicator->Abort();
    return Fail("evaluation", report.status());
  }
  if (group.rank == 0) std::cout << "[rank 0] " << FormatEvalReport(*report);
  std::cout << absl::StrFormat(
                   "[rank %d] done: eval on %s: top1=%.4f top5=%.4f loss=%.4f",
                   group.rank, report->split, report->top1, report->top5, report->loss)
            << std::endl;
  const absl::Status flushed = reporter.Flush(kFinalFlushTimeout);
  if (!flushed.ok()) std::cerr << "tessera-train: " << flushed << std::endl;
  if (coordinator == nullptr) return kTrainerExitSuccess;
  TrainingResult result;
  result.test_accuracy = report->top1;
  result.test_loss = report->loss;
  if (group.rank == 0) result.eval = *std::move(report);
  const absl::Status reported = coordinator->ReportResult(result);
  if (!reported.ok()) {
    group.communicator->Abort();
    return Fail("reporting the result", reported);
  }
  return kTrainerExitSuccess;
}

// The in-memory datasets' splits, which InMemoryData refers to.
struct InMemorySplits {
  absl::StatusOr<ImageDataset> train = absl::UnknownError("not loaded");
  absl::StatusOr<ImageDataset> test = absl::UnknownError("not loaded");
  std::optional<ImageDataset> val;  // held out of `train` by --val-fraction
};

// Image folders and shards are opened (and decoded as they are read); the
// other datasets are loaded whole into `splits`, which must outlive `*data`,
// with the validation split held out of the training set where asked.
// Returns an exit code, having said why on failure.
int OpenData(const TrainerOptions& options, InMemorySplits& splits,
             std::unique_ptr<TrainingData>* data) {
  if (IsImageDataKind(options.dataset)) {
    absl::StatusOr<std::unique_ptr<TrainingData>> opened =
        OpenImageData(ImageDataOptionsFor(options));
    if (!opened.ok()) return Fail("opening the data", opened.status());
    *data = *std::move(opened);
    return kTrainerExitSuccess;
  }
  splits.train = LoadSplit(options, Split::kTrain);
  if (!splits.train.ok())
    return Fail("loading the training split", splits.train.status());
  splits.test = LoadSplit(options, Split::kTest);
  if (!splits.test.ok()) return Fail("loading the test split", splits.test.status());
  if (options.val_fraction > 0) {
    absl::StatusOr<HeldOut> parts = HoldOutValidation(
        *splits.train, options.val_fraction, static_cast<uint64_t>(options.val_seed));
    if (!parts.ok()) return Fail("holding out the validation split", parts.status());
    splits.train = std::move(parts->train);
    splits.val = std::move(parts->val);
  }
  absl::StatusOr<ChannelStats> stats =
      OverrideChannelStats(ComputeChannelStats(*splits.train), options.mean, options.std);
  if (!stats.ok()) return Fail("normalising the data", stats.status());
  *data = std::make_unique<InMemoryData>(*splits.train, *splits.test, options.dataset,
                                         splits.val.has_value() ? &*splits.val : nullptr,
                                         *std::move(stats));
  return kTrainerExitSuccess;
}

// The rank on its device: lease, data, process group, reporter, training and
// its end. Returns the exit code.
int TrainRank(const TrainerFlags& flags, const DevicePlacement& placement) {
  const TrainerOptions& options = flags.trainer;
  const LaunchOptions& launch = flags.launch;
  // The lease first: it counts from the process start, and loading data may
  // take a while. Its renewals report the rank's progress from the start.
  const RealClock clock;
  ProgressTracker progress(clock);
  const std::unique_ptr<CoordinatorClient> coordinator = MakeCoordinatorClient(launch);
  const std::unique_ptr<LeaseKeeper> lease = StartLease(coordinator.get(), progress);

  if (!ConfigureHostAllocator()) {
    std::cerr << "tessera-train: note: the C library did not take the allocator "
                 "settings; CPU steps may spend time in page faults"
              << std::endl;
  }

  // Data first: a bad data directory fails fast, before any peer waits on us.
  InMemorySplits splits;
  std::unique_ptr<TrainingData> data;
  if (const int code = OpenData(options, splits, &data); code != kTrainerExitSuccess) {
    return code;
  }

  absl::StatusOr<ProcessGroupOptions> group_options = GroupOptionsFor(flags, placement);
  if (!group_options.ok())
    return Fail("forming the process group", group_options.status());
  absl::StatusOr<ProcessGroup> group =
      JoinProcessGroup(launch, coordinator.get(), *group_options);
  if (!group.ok()) return Fail("forming the process group", group.status());
  // From here on every exit that is not clean aborts the communicator rather
  // than tearing it down, which could wait on a peer that is gone.
  const auto fail_and_abort = [&group](const std::string& context,
                                       const absl::Status& status) {
    group->communicator->Abort();
    return Fail(context, status);
  };

  absl::StatusOr<std::unique_ptr<MetricsReporter>> reporter =
      MetricsReporter::Create(ReportingFor(group->rank, launch), coordinator.get());
  if (!reporter.ok()) return fail_and_abort("setting up metrics", reporter.status());

  // Validated with the options above.
  const FaultSpec fault_spec = ParseFaultSpec(options.fault).value_or(FaultSpec{});
  FaultInjector fault(fault_spec, group->rank, launch.attempt, FaultInjectorLogging());
  if (options.eval_only) {
    return EvaluateRank(options, *data, *group, **reporter, coordinator.get(),
                        LoopOptionsFor(launch, progress, fault));
  }
  Trainer trainer(options, *data, *group->communicator, **reporter,
                  LoopOptionsFor(launch, progress, fault));
  absl::StatusOr<TrainingOutcome> outcome = trainer.Run();
  if (!outcome.ok()) {
    ExitIfCudaError(outcome.status(), placement, *group->communicator);
    return fail_and_abort("training", outcome.status());
  }
  if (outcome->preempted) return FinishPreempted(*outcome, **reporter, lease.get());

  PrintDone(group->rank, *outcome);
  const absl::Status reported =
      FlushAndReportResult(*outcome, **reporter, coordinator.get());
  if (!reported.ok()) return fail_and_abort("reporting the result", reported);
  return kTrainerExitSuccess;
}

int Run(int argc, char** argv) {
  // First, before any other thread starts: SIGUSR1 is taken on a thread of
  // its own (preemption.h), and one that comes during start-up is remembered
  // (the rank stops after its first step) rather than ending the process.
  absl::StatusOr<std::unique_ptr<PreemptionListener>> preemption =
      PreemptionListener::Start();
  if (!preemption.ok()) return Fail("starting", preemption.status());
  absl::StatusOr<TrainerFlags> flags =
      ParseTrainerFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!flags.ok()) {
    std::cerr << "tessera-train: " << flags.status().message()
              << "\nRun with --help for usage." << std::endl;
    return kTrainerExitUsage;
  }
  if (!flags->help.empty()) {
    std::cout << flags->help;
    return kTrainerExitSuccess;
  }
  if (const absl::Status checked = CompleteAndCheckFlags(*flags); !checked.ok()) {
    std::cerr << "tessera-train: " << checked.message() << std::endl;
    return kTrainerExitUsage;
  }
  if (const absl::Status taken = TakeWeightsPreprocessing(*flags); !taken.ok()) {
    return Fail("the preprocessing that comes with the weights", taken);
  }

  // The device decides the collective backend; an impossible --device or
  // --precision fails before any peer waits on us.
  absl::StatusOr<DevicePlacement> placement =
      ResolveDevice(flags->trainer, flags->launch.local_rank);
  if (!placement.ok()) {
    std::cerr << "tessera-train: " << placement.status().message() << std::endl;
    return placement.status().code() == absl::StatusCode::kInvalidArgument
               ? kTrainerExitUsage
               : kTrainerExitFailure;
  }
  // The rank's own device before anything touches CUDA (NCCL, the model), so
  // that no context lands on another rank's GPU.
  const absl::Status made_current = MakePlacementCurrent(*placement);
  if (!made_current.ok()) return Fail("selecting the device", made_current);
#if TESSERA_NCCL_TENSORS
  if (placement->cuda) LogNcclVersion();
#endif
  return TrainRank(*flags, *placement);
}

}  // namespace
}  // namespace tessera::trainer

int main(int argc, char** argv) {
  try {
    return tessera::trainer::Run(argc, argv);
  } catch (const std::exception& e) {
    // LibTorch (c10::Error) and the standard library signal with exceptions; none
    // may end the process without a message.
    std::cerr << "tessera-train: fatal: " << e.what() << std::endl;
    return tessera::kTrainerExitFailure;
  }
}
