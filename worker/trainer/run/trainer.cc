#include "worker/trainer/run/trainer.h"

#include <malloc.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/rank_phase.h"
#include "common/status_macros.h"
#include "worker/trainer/data/batch_feed.h"
#include "worker/trainer/data/data_position.h"
#include "worker/trainer/data/training_data.h"
#include "worker/trainer/dist/stop_agreement.h"
#include "worker/trainer/gpu/capture_schedule.h"
#include "worker/trainer/gpu/captured_step.h"
#include "worker/trainer/gpu/device.h"
#include "worker/trainer/gpu/device_memory.h"
#include "worker/trainer/gpu/step_timer.h"
#include "worker/trainer/model/autocast_scope.h"
#include "worker/trainer/model/fused_adamw.h"
#include "worker/trainer/model/loss_scaler.h"
#include "worker/trainer/run/capture_plan.h"
#include "worker/trainer/run/checkpoint.h"
#include "worker/trainer/run/checkpoint_publisher.h"
#include "worker/trainer/run/fault_injector.h"
#include "worker/trainer/run/interval_metrics.h"
#include "worker/trainer/run/model_replica.h"
#include "worker/trainer/run/phase_reporter.h"
#include "worker/trainer/run/progress.h"
#include "worker/trainer/run/resume_point.h"
#include "worker/trainer/run/run_plan.h"
#include "worker/trainer/run/step_profiler.h"
#include "worker/trainer/run/test_evaluation.h"
#include "worker/trainer/run/training_feeds.h"

namespace tessera::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Sums of the current metrics interval (reset at every report).
struct Interval {
  torch::Tensor loss_sum;  // on the device: read once per report
  int64_t micro_batches = 0;
  int64_t images = 0;
};

// One rank's run, as a sequence of named steps (Run). Built and run once.
class TrainingRun {
 public:
  TrainingRun(const TrainerOptions& options, const TrainerLoopOptions& loop,
              const TrainingData& data, Communicator& communicator,
              MetricsReporter& reporter)
      : options_(options),
        loop_(loop),
        data_(data),
        communicator_(communicator),
        reporter_(reporter),
        rank_(communicator.rank()),
        world_(communicator.world_size()),
        phases_(loop.progress) {}

  absl::StatusOr<TrainingOutcome> Run() {
    ConfigureComputeThreads(EffectiveThreads(options_));
    RETURN_IF_ERROR(Plan());
    RETURN_IF_ERROR(BuildModel());
    RETURN_IF_ERROR(Resume());
    // Before the feeds: a captured run's stream is current from here on, and
    // the feeds and the step timer work on the current stream.
    RETURN_IF_ERROR(PrepareCapture());
    RETURN_IF_ERROR(BuildFeeds());
    LogSetUp();
    RETURN_IF_ERROR(TrainLoop());
    return Finish();
  }

 private:
  // The set-up: where and what the run trains (device, model shape, samplers,
  // epoch plan), the model's replica, the checkpoint to resume from, whether
  // the step is captured in a CUDA graph, and the data feeds.
  absl::Status Plan();
  absl::Status BuildModel();
  absl::Status Resume();
  absl::Status PrepareCapture();
  absl::Status BuildFeeds();
  void LogSetUp() const;

  // The loop.
  absl::Status TrainLoop();
  // One optimizer step; sets *stop when the ranks agreed to stop after it.
  absl::Status TrainStep(bool* stop);
  // The step between the timer's BeginStep and EndStep: eager (micro-batches,
  // all-reduce, optimizer), or the captured graph's replay (cuda_graph.h).
  absl::Status EagerStepBody(bool* stop);
  // A captured run's step, as capture_schedule_ orders it.
  absl::Status CapturedRunStep(bool* stop);
  void StepOnStaticInputs(const torch::Tensor& images, const torch::Tensor& labels);
  absl::Status ForwardBackward(int64_t micro_batch);
  // The forward pass under the run's autocast, and the loss with label
  // smoothing.
  torch::Tensor Loss(const torch::Tensor& images, const torch::Tensor& labels);
  // The schedule's learning rate for this step into each optimizer group.
  void SetLearningRates();
  void ReportInterval(double lr);
  // After a step that ended an epoch (or the run): epoch times, evaluation.
  absl::Status EndEpoch();
  // Scores a held-out split (held_out_ says which, when).
  absl::StatusOr<TestEvaluation> Evaluate(Split split);
  // Snapshots the state at this step and writes it on the checkpoint
  // publisher's writer. `wait`: returns only once every rank's part is
  // durable and `latest` points at it (the run's end, a preemption, or
  // synchronous writes).
  absl::Status SaveCheckpoint(bool wait);
  absl::StatusOr<TrainingOutcome> Finish();

  // A phase of the loop itself: reported, and where the --fault hook acts.
  void Enter(RankPhase phase) {
    phases_.Report(phase);
    if (fault_ != nullptr) fault_->OnPhase(phase, step_);
  }
  int64_t accum() const { return options_.grad_accum; }

  const TrainerOptions& options_;
  const TrainerLoopOptions& loop_;
  const TrainingData& data_;    // Not owned.
  Communicator& communicator_;  // Not owned.
  MetricsReporter& reporter_;   // Not owned.
  const int rank_;
  const int world_;
  FaultInjector* fault_ = nullptr;  // Not owned; null when inactive.
  PhaseReporter phases_;

  // Plan.
  std::optional<RunPlan> plan_;
  // BuildModel.
  std::unique_ptr<ModelReplica> replica_;
  int64_t bytes_sent_reported_ = 0;  // communicator_.bytes_sent() at the last report
  LossScaler scaler_;
  std::optional<CheckpointDirectory> checkpoints_;
  std::unique_ptr<CheckpointPublisher> publisher_;  // with checkpoints_
  // Resume, then the loop.
  int64_t step_ = 0;
  DataPosition position_;  // where the next step's data starts
  int64_t total_steps_ = 0;
  // Where this process stops: total_steps_, or stop_fraction of it (a
  // search's rung; the schedule is still total_steps_').
  int64_t stop_at_ = 0;
  int64_t warmup_steps_ = 0;
  TrainingOutcome outcome_;
  // BuildFeeds.
  std::optional<StopAgreement> stop_agreement_;
  std::unique_ptr<TrainingFeeds> feeds_;
  std::unique_ptr<StepTimer> timer_;
  std::unique_ptr<StepProfiler> profiler_;  // null unless profile_steps is set
  // PrepareCapture: whether this run replays a graph once this process has run
  // its eager steps (capture_schedule.h), the graph, and the optimizer it
  // steps.
  bool capture_ = false;
  std::unique_ptr<CapturedStep::StreamScope> capture_stream_;
  CaptureSchedule capture_schedule_;
  std::unique_ptr<CapturedStep> captured_;
  FusedAdamW* fused_adamw_ = nullptr;  // Not owned: the optimizer when capturing
  // The loop's tallies.
  Interval interval_;
  double train_seconds_ = 0;
  double epoch_seconds_ = 0;        // training time since the current epoch began
  bool epoch_timed_whole_ = false;  // this run saw the current epoch's start
  bool epoch_ended_ = false;        // by the last step
  bool sizes_reported_ = false;     // the state and gradient bytes, once
  std::optional<HeldOutEvaluation> held_out_;  // BuildFeeds
  double lr_ = 0;
};

absl::Status TrainingRun::Plan() {
  ASSIGN_OR_RETURN(plan_,
                   PlanRun(options_, data_.shape(), rank_, world_, loop_.local_rank));
  phases_.set_device_waits(plan_->placement.cuda);
  // cuDNN picks the patch embedding's convolution algorithm by timing them
  // once per shape (the shapes never change), as PyTorch users turn on.
  if (plan_->placement.cuda) at::globalContext().setBenchmarkCuDNN(true);
  if (loop_.fault != nullptr && loop_.fault->active()) fault_ = loop_.fault;
  return absl::OkStatus();
}

absl::Status TrainingRun::BuildModel() {
  ASSIGN_OR_RETURN(replica_,
                   ModelReplica::Create(options_, plan_->config, plan_->placement,
                                        communicator_, phases_, loop_.log));
  if (!options_.checkpoint_dir.empty()) {
    checkpoints_.emplace(options_.checkpoint_dir);
    publisher_ = std::make_unique<CheckpointPublisher>(
        *checkpoints_, communicator_, phases_, plan_->device,
        CheckpointPublisherOptions{.keep = loop_.checkpoint_keep,
                                   .log = loop_.log,
                                   .before_write = loop_.before_checkpoint_write});
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::Resume() {
  if (checkpoints_.has_value() && options_.resume) {
    ASSIGN_OR_RETURN(const std::optional<ResumePoint> at,
                     ResumeLatest(*checkpoints_, *replica_, *plan_, options_,
                                  data_.shape().class_names));
    if (at.has_value()) {
      scaler_.Restore(at->loss_scaler);
      step_ = at->step;
      position_ = at->position;
      outcome_.resumed_from = step_;
      outcome_.resumed_world_size = at->writer_world;
    }
  }
  ASSIGN_OR_RETURN(const RunSpan span, SpanOf(options_, plan_->epochs, step_, position_,
                                              loop_.warmup_fraction));
  total_steps_ = span.total_steps;
  stop_at_ = StopStep(options_.stop_fraction, step_, total_steps_);
  warmup_steps_ = span.warmup_steps;
  epoch_timed_whole_ = position_.sample == 0;
  replica_->reducer().ZeroGradients();
  if (loop_.progress != nullptr) loop_.progress->SetStep(step_);
  return absl::OkStatus();
}

absl::Status TrainingRun::PrepareCapture() {
  ASSIGN_OR_RETURN(CapturePlan plan,
                   PlanCapture(options_, plan_->placement, world_, fault_ != nullptr,
                               replica_->optimizer()));
  capture_ = plan.capture;
  fused_adamw_ = plan.adamw;
  capture_stream_ = std::move(plan.stream);
  if (loop_.log != nullptr && plan_->placement.cuda && !capture_ &&
      options_.cuda_graph == "auto") {
    *loop_.log << "[rank " << rank_ << "] CUDA graph: the step runs eager: "
               << absl::StrJoin(plan.reasons, "; ") << std::endl;
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::BuildFeeds() {
  stop_agreement_.emplace(loop_.stop_requested, replica_->reducer(), communicator_,
                          plan_->synchronize, plan_->device);
  feeds_ =
      TrainingFeeds::Create(data_, options_,
                            FeedPlan{.sampler = &plan_->train_sampler,
                                     .epochs = &plan_->epochs,
                                     .start = position_,
                                     .micro_batches = (stop_at_ - step_) * accum(),
                                     .rank = rank_,
                                     .image_size = plan_->config.image_size,
                                     .placement = plan_->placement,
                                     .finish_on_device = loop_.finish_batches_on_device});
  ASSIGN_OR_RETURN(timer_,
                   MakeDeviceStepTimer(plan_->placement.cuda, plan_->placement.index));
  interval_.loss_sum = torch::zeros({}, torch::TensorOptions(plan_->device));
  held_out_.emplace([this](Split split) { return Evaluate(split); }, reporter_,
                    HeldOutEvaluation::Options{.has_val = plan_->val_sampler.has_value(),
                                               .test_is_val = data_.shape().test_is_val,
                                               .eval_every = options_.eval_every});
  if (!options_.profile_steps.empty()) {
    StepProfilerOptions profiling;
    ASSIGN_OR_RETURN(profiling.steps, ParseProfileSteps(options_.profile_steps));
    profiling.dir = loop_.profile_dir;
    profiling.cuda = plan_->placement.cuda;
    profiling.rank = rank_;
    profiling.log = loop_.log;
    profiler_ = std::make_unique<StepProfiler>(profiling);
  }
  return absl::OkStatus();
}

void TrainingRun::LogSetUp() const {
  if (loop_.log == nullptr) return;
  const RunFacts facts{.parameter_count = replica_->parameter_count(),
                       .world_size = world_,
                       .backend = communicator_.backend(),
                       .total_steps = total_steps_,
                       .buckets = replica_->reducer().plan().buckets.size(),
                       .resumed_from = outcome_.resumed_from,
                       .resumed_world_size = outcome_.resumed_world_size,
                       .position = position_};
  *loop_.log << "[rank " << rank_ << "] "
             << DescribeRun(options_, *plan_, data_.shape(), facts) << std::endl;
  *loop_.log << "[rank " << rank_ << "] " << replica_->DescribeState() << std::endl;
}

absl::Status TrainingRun::TrainLoop() {
  // The run's shape, for progress and ETA in tessctl and the dashboard.
  reporter_.Report(
      step_, {{"total_steps", static_cast<double>(total_steps_)},
              {"steps_per_epoch", static_cast<double>(plan_->epochs.steps_per_epoch())}});
  replica_->model()->train();
  // What setting up freed (ZeRO: the parameters before they were flattened).
  if (!plan_->placement.cuda) malloc_trim(0);
  while (step_ < stop_at_) {
    bool stop = false;
    if (profiler_ != nullptr) RETURN_IF_ERROR(profiler_->BeforeStep(step_ + 1));
    RETURN_IF_ERROR(TrainStep(&stop));
    if (profiler_ != nullptr) RETURN_IF_ERROR(profiler_->AfterStep(step_));
    if (publisher_ != nullptr && publisher_->in_flight().has_value()) {
      RETURN_IF_ERROR(publisher_->PublishWhenDurable(/*block=*/false, step_));
    }
    if (step_ % options_.metrics_every == 0 || step_ == stop_at_) ReportInterval(lr_);
    if (stop && step_ < stop_at_) {
      // Every rank decided the same after this step: checkpoint here and
      // leave, without evaluating.
      outcome_.preempted = true;
      if (checkpoints_.has_value()) {
        RETURN_IF_ERROR(SaveCheckpoint(/*wait=*/true));
        outcome_.checkpointed = true;
      }
      if (loop_.log != nullptr) {
        *loop_.log << "[rank " << rank_
                   << "] asked to stop: the ranks agreed to stop after step " << step_
                   << std::endl;
      }
      return absl::OkStatus();
    }
    if (epoch_ended_ || step_ == total_steps_) RETURN_IF_ERROR(EndEpoch());
    RETURN_IF_ERROR(held_out_->ValidateIfDue(step_, stop_at_));
    if (checkpoints_.has_value() &&
        ((options_.checkpoint_every > 0 && step_ % options_.checkpoint_every == 0) ||
         step_ == stop_at_)) {
      // The last one is waited for: the run ends with `latest` in place.
      RETURN_IF_ERROR(SaveCheckpoint(/*wait=*/step_ == stop_at_));
    }
  }
  // Resumed at its stop (a rung resubmitted after it was done): the rung's
  // validation figures are reported all the same.
  if (step_ == outcome_.resumed_from && step_ == stop_at_) {
    RETURN_IF_ERROR(held_out_->ValidateIfDue(step_, stop_at_));
  }
  if (stop_at_ < total_steps_ && loop_.log != nullptr) {
    *loop_.log << "[rank " << rank_ << "] stopped at step " << step_ << " of "
               << total_steps_ << " (stop_fraction " << options_.stop_fraction
               << "); resume from the checkpoint to go on" << std::endl;
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::TrainStep(bool* stop) {
  const Clock::time_point step_start = Clock::now();
  timer_->BeginStep();
  if (loop_.progress != nullptr) loop_.progress->BeginStep();
  if (capture_) {
    RETURN_IF_ERROR(CapturedRunStep(stop));
  } else {
    RETURN_IF_ERROR(EagerStepBody(stop));
  }
  timer_->EndStep();
  ++step_;
  const int64_t epoch_before = position_.epoch;
  position_ = plan_->epochs.Advance(position_, accum());
  epoch_ended_ = position_.epoch != epoch_before;
  if (loop_.progress != nullptr) loop_.progress->EndStep(step_);
  const double step_seconds = SecondsSince(step_start);
  train_seconds_ += step_seconds;
  epoch_seconds_ += step_seconds;
  return absl::OkStatus();
}

absl::Status TrainingRun::EagerStepBody(bool* stop) {
  for (int64_t m = 0; m < accum(); ++m) RETURN_IF_ERROR(ForwardBackward(m));
  interval_.micro_batches += accum();
  if (world_ > 1) Enter(RankPhase::kCollective);
  Reducer& reducer = replica_->reducer();
  RETURN_IF_ERROR(reducer.FinishBackward(plan_->fp16 ? 1.0 / scaler_.scale() : 1.0));
  // On a GPU the host usually catches up with its device here: the vote it
  // reads was copied after the previous step's all-reduce.
  ASSIGN_OR_RETURN(*stop,
                   phases_.ReadFromDevice([&] { return stop_agreement_->Decide(); }));
  timer_->Mark(StepPhase::kComm);
  Enter(RankPhase::kOptimizer);
  bool take_step = true;
  if (plan_->fp16) {
    // ZeRO: each rank sees only its shard; the ranks agree through an
    // all-reduce.
    ASSIGN_OR_RETURN(const bool overflow, phases_.ReadFromDevice([&] {
      return replica_->AnyNonFiniteGradient();
    }));
    take_step = scaler_.Update(overflow);
  }
  SetLearningRates();
  if (take_step) {
    RETURN_IF_ERROR(replica_->Step(options_.clip_grad_norm));
  } else {
    ++outcome_.skipped_steps;
  }
  reducer.ZeroGradients();
  // A CPU rank's heap keeps the pages of what the step freed (activations,
  // gathered units, gradient buckets) between what it still holds; they go
  // back to the system here, so that its resident memory, and a memory
  // limit on it, follow what the step holds.
  if (!plan_->placement.cuda) malloc_trim(0);
  timer_->Mark(StepPhase::kOptimizer);
  return absl::OkStatus();
}

absl::Status TrainingRun::ForwardBackward(int64_t micro_batch) {
  Enter(RankPhase::kData);
  ASSIGN_OR_RETURN(const Batch batch, feeds_->train().Next());
  timer_->Mark(StepPhase::kData);
  Enter(RankPhase::kForward);
  const torch::Tensor loss = Loss(batch.images, batch.labels);
  timer_->Mark(StepPhase::kForward);
  const bool last = micro_batch == accum() - 1;
  if (last) stop_agreement_->Vote();
  replica_->reducer().PrepareForBackward(plan_->synchronize && last);
  Enter(RankPhase::kBackward);
  // Micro-batch means are averaged over the step; fp16 scales the loss up.
  const double factor =
      (plan_->fp16 ? scaler_.scale() : 1.0) / static_cast<double>(accum());
  (factor == 1.0 ? loss : loss * factor).backward();
  timer_->Mark(StepPhase::kBackward);
  interval_.loss_sum.add_(loss.detach());
  interval_.images += batch.labels.size(0);
  outcome_.train_images += batch.labels.size(0);
  return absl::OkStatus();
}

void TrainingRun::SetLearningRates() {
  lr_ = ScheduledLearningRate(options_.lr, step_, total_steps_, warmup_steps_,
                              loop_.final_lr_fraction);
  const std::vector<double> rates =
      GroupLearningRates(lr_, step_, options_.head_warmup_steps, replica_->group_scales(),
                         replica_->group_heads());
  auto& groups = replica_->optimizer().param_groups();
  for (size_t g = 0; g < groups.size(); ++g) groups[g].options().set_lr(rates[g]);
  // A captured run's AdamW reads them, and its step counts, from device
  // tensors, in every step.
  if (fused_adamw_ != nullptr) {
    fused_adamw_->WriteLearningRates();
    fused_adamw_->WriteStepCounts();
  }
}

// The step's whole device work (forward, backward, clipping, AdamW, the loss
// tally), as the captured graph replays it. Runs eager only while capturing.
void TrainingRun::StepOnStaticInputs(const torch::Tensor& images,
                                     const torch::Tensor& labels) {
  const torch::Tensor loss = Loss(images, labels);
  loss.backward();
  // A world of one: nothing to all-reduce; this gathers the gradients to clip.
  absl::Status stepped = replica_->reducer().FinishBackward();
  if (stepped.ok()) stepped = replica_->Step(options_.clip_grad_norm);
  if (!stepped.ok()) throw std::runtime_error(std::string(stepped.message()));
  interval_.loss_sum.add_(loss.detach());
}

torch::Tensor TrainingRun::Loss(const torch::Tensor& images,
                                const torch::Tensor& labels) {
  AutocastScope mixed(plan_->autocast, plan_->autocast_dtype);
  return torch::nn::functional::cross_entropy(
      replica_->model()->forward(images), labels,
      torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(
          options_.label_smoothing));
}

absl::Status TrainingRun::CapturedRunStep(bool* stop) {
  // The run's side of the schedule: a batch is fetched for the capture or
  // the replay that uses it.
  class RunSteps final : public CaptureSchedule::Steps {
   public:
    RunSteps(TrainingRun& run, bool* stop) : run_(run), stop_(stop) {}
    void WriteStepValues() override { run_.SetLearningRates(); }
    absl::Status RunEager() override { return run_.EagerStepBody(stop_); }
    absl::Status Capture() override {
      RETURN_IF_ERROR(Fetch());
      // Gradients made by the capture live in the graph's pool from here on.
      run_.replica_->reducer().ZeroGradients();
      ASSIGN_OR_RETURN(run_.captured_,
                       CapturedStep::Capture(batch_.images, batch_.labels,
                                             [this](const torch::Tensor& images,
                                                    const torch::Tensor& labels) {
                                               run_.StepOnStaticInputs(images, labels);
                                             }));
      if (run_.loop_.log != nullptr) {
        *run_.loop_.log
            << "[rank " << run_.rank_ << "] step " << run_.step_ + 1
            << ": training step captured in a CUDA graph; replayed from here on"
            << std::endl;
      }
      return absl::OkStatus();
    }
    void AdvanceHostCopies() override { run_.fused_adamw_->AdvanceHostSteps(); }
    absl::Status Replay() override {
      if (!fetched_) RETURN_IF_ERROR(Fetch());
      run_.Enter(RankPhase::kForward);
      RETURN_IF_ERROR(run_.captured_->Replay(batch_.images, batch_.labels));
      // One graph: the device's time of the whole step is the forward's.
      for (const StepPhase phase :
           {StepPhase::kForward, StepPhase::kBackward, StepPhase::kComm}) {
        run_.timer_->Mark(phase);
      }
      ++run_.interval_.micro_batches;
      run_.interval_.images += batch_.labels.size(0);
      run_.outcome_.train_images += batch_.labels.size(0);
      ASSIGN_OR_RETURN(*stop_, run_.stop_agreement_->Decide());
      run_.timer_->Mark(StepPhase::kOptimizer);
      return absl::OkStatus();
    }

   private:
    absl::Status Fetch() {
      run_.Enter(RankPhase::kData);
      ASSIGN_OR_RETURN(batch_, run_.feeds_->train().Next());
      run_.timer_->Mark(StepPhase::kData);
      run_.stop_agreement_->Vote();
      fetched_ = true;
      return absl::OkStatus();
    }

    TrainingRun& run_;
    bool* stop_;
    Batch batch_;
    bool fetched_ = false;
  };
  RunSteps steps(*this, stop);
  return capture_schedule_.Step(steps).status();
}

void TrainingRun::ReportInterval(double lr) {
  IntervalFigures figures;
  figures.times = phases_.ReadFromDevice([&] { return timer_->TakeTotals(); });
  if (timer_->on_device() && figures.times.steps > 0 && loop_.progress != nullptr) {
    // The device's own timeline, which the coordinator compares across ranks:
    // the host's phases show only where it waited for the device.
    loop_.progress->SetDeviceStepTimes(DeviceStepMs(figures.times),
                                       static_cast<int32_t>(figures.times.steps));
  }
  figures.loss_sum =
      phases_.ReadFromDevice([&] { return interval_.loss_sum.item<double>(); });
  figures.micro_batches = interval_.micro_batches;
  figures.images = interval_.images;
  figures.lr = lr;
  figures.epoch = EpochsDone(position_, plan_->epochs, accum());
  if (plan_->fp16) figures.loss_scale = scaler_.scale();
  if (world_ > 1) {
    // What this rank's collectives handed to the transport.
    const int64_t sent = communicator_.bytes_sent();
    figures.bytes_sent = sent - bytes_sent_reported_;
    bytes_sent_reported_ = sent;
  }
  figures.data_skipped = data_.skipped();
  AppendDeviceMemory(plan_->device.is_cuda(), plan_->device.index(),
                     figures.device_memory);
  if (!sizes_reported_) {
    figures.sizes = replica_->Sizes();
    sizes_reported_ = true;
  }
  reporter_.Report(step_, IntervalMetrics(figures));
  interval_.loss_sum.zero_();
  interval_.micro_batches = 0;
  interval_.images = 0;
}

absl::Status TrainingRun::EndEpoch() {
  // Epochs timed whole by this run report their training time; the run's end
  // also reports its total, so partial epochs (max_steps, a resume) still
  // give a per-step time.
  std::vector<std::pair<std::string, double>> values;
  if (epoch_ended_ && epoch_timed_whole_)
    values.emplace_back("epoch_seconds", epoch_seconds_);
  epoch_seconds_ = 0;
  epoch_timed_whole_ = epoch_ended_;
  if (step_ == total_steps_) {
    values.emplace_back("train_seconds", train_seconds_);
    // Steps timed by this run (a resumed run times only its own).
    values.emplace_back("train_steps",
                        static_cast<double>(step_ - outcome_.resumed_from));
  }
  if (!values.empty()) reporter_.Report(step_, values);
  return held_out_->Test(step_);
}

absl::StatusOr<TestEvaluation> TrainingRun::Evaluate(Split split) {
  Enter(RankPhase::kEval);
  const DistributedSampler& sampler =
      split == Split::kVal ? *plan_->val_sampler : plan_->test_sampler;
  return EvaluateTestSplit(replica_->model(), sampler.EpochIndices(0), *feeds_,
                           communicator_, phases_,
                           TestEvaluationOptions{.batch_size = loop_.eval_batch_size,
                                                 .device = plan_->device,
                                                 .autocast = plan_->autocast,
                                                 .autocast_dtype = plan_->autocast_dtype,
                                                 .split = split});
}

absl::Status TrainingRun::SaveCheckpoint(bool wait) {
  Enter(RankPhase::kCheckpoint);
  RETURN_IF_ERROR(publisher_->FinishPrevious(step_));
  RankCheckpoint state;
  state.rank = rank_;
  state.world_size = world_;
  state.position.step = step_;
  state.position.epoch = position_.epoch;
  state.position.sample_in_epoch = position_.sample;
  state.position.batch_in_epoch = position_.sample / plan_->epochs.samples_per_batch();
  state.loss_scaler = scaler_.state();
  state.class_names = data_.shape().class_names;
  state.zero_stage = replica_->zero_stage();
  CaptureRngState(plan_->placement.index, state);
  // The snapshot: the state as bytes in host memory, taken before the next
  // step changes it.
  const absl::Time snapshot_start = absl::Now();
  ASSIGN_OR_RETURN(CheckpointFiles files, replica_->Snapshot(*checkpoints_, state));
  // Where the run stops before its end (a search's rung), its checkpoint is
  // never pruned: the next rung trains on into this directory, and the model
  // this rung scored must stay exportable (`tessctl search best --export`).
  if (rank_ == 0 && step_ == stop_at_ && stop_at_ < total_steps_) {
    files.files.emplace_back(
        checkpoints_->KeepMarkerPath(step_),
        absl::StrCat("stopped at step ", step_, " of ", total_steps_, " (stop_fraction ",
                     options_.stop_fraction, ")\n"));
  }
  RETURN_IF_ERROR(
      publisher_->Start(step_, std::move(files), absl::Now() - snapshot_start));
  if (wait || !options_.checkpoint_async) {
    RETURN_IF_ERROR(publisher_->PublishWhenDurable(/*block=*/true, step_));
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingOutcome> TrainingRun::Finish() {
  // A window the run cut short (max_steps, a stop) still gets its files.
  if (profiler_ != nullptr) RETURN_IF_ERROR(profiler_->Finish(step_));
  // A run resumed from its final checkpoint still reports the test metrics.
  if (!outcome_.preempted && held_out_->tested_at() != step_) {
    RETURN_IF_ERROR(held_out_->Test(step_));
  }
  ASSIGN_OR_RETURN(outcome_.param_hash, replica_->Fingerprint());
  outcome_.steps = step_;
  outcome_.train_seconds = train_seconds_;
  outcome_.test_accuracy = held_out_->last_test().accuracy;
  outcome_.test_loss = held_out_->last_test().loss;
  outcome_.parameter_count = replica_->parameter_count();
  outcome_.device = plan_->placement.name();
  phases_.Report(RankPhase::kDone);
  return outcome_;
}

}  // namespace

Trainer::Trainer(const TrainerOptions& options, const TrainingData& data,
                 Communicator& communicator, MetricsReporter& reporter,
                 TrainerLoopOptions loop)
    : options_(options),
      loop_(loop),
      data_(data),
      communicator_(communicator),
      reporter_(reporter) {}

Trainer::Trainer(const TrainerOptions& options, const ImageDataset& train,
                 const ImageDataset& test, Communicator& communicator,
                 MetricsReporter& reporter, TrainerLoopOptions loop)
    : options_(options),
      loop_(loop),
      owned_data_(std::make_unique<InMemoryData>(train, test, options.dataset)),
      data_(*owned_data_),
      communicator_(communicator),
      reporter_(reporter) {}

Trainer::~Trainer() = default;

absl::StatusOr<TrainingOutcome> Trainer::Run() {
  RETURN_IF_ERROR(data_.Check());
  try {
    TrainingRun run(options_, loop_, data_, communicator_, reporter_);
    return run.Run();
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("training failed: ", e.what()));
  }
}

}  // namespace tessera::trainer
