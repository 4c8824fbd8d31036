// The device probe (worker/device_probe.h) over a fake /proc tree and a fake
// environment: which GPUs the worker was given (CUDA_VISIBLE_DEVICES, Slurm's
// variables, the driver's list), --gpus against that set, and each rank's
// CUDA_VISIBLE_DEVICES as a subset of it.
#include "worker/device_probe.h"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A node whose driver lists `gpus` GPUs, with `env` as the worker's
// environment.
class FakeNode {
 public:
  FakeNode(int gpus, std::map<std::string, std::string> env) : env_(std::move(env)) {
    for (int i = 0; i < gpus; ++i) {
      std::filesystem::create_directories(
          absl::StrCat(root_.path(), "/proc/driver/nvidia/gpus/0000:", 10 + i, ":00.0"));
    }
  }

  DeviceEnvironment Env() const {
    return DeviceEnvironment{
        .getenv = [this](const std::string& name) -> std::optional<std::string> {
          auto it = env_.find(name);
          if (it == env_.end()) return std::nullopt;
          return it->second;
        },
        .root = root_.path()};
  }

 private:
  testing::TempDir root_;
  std::map<std::string, std::string> env_;
};

std::vector<std::string> Ids(const absl::StatusOr<GpuSet>& set) {
  EXPECT_TRUE(set.ok()) << set.status();
  return set.ok() ? set->ids : std::vector<std::string>{};
}

TEST(DeviceProbeTest, SlurmGresOnAnEightGpuNodeGivesRanksOnlyTheGivenGpus) {
  // srun with --gres=gpu:2 on a node of 8.
  const FakeNode node(8, {{"CUDA_VISIBLE_DEVICES", "2,3"}, {"SLURM_STEP_GPUS", "2,3"}});
  const absl::StatusOr<GpuSet> set = SelectGpus("auto", node.Env());
  ASSERT_THAT(Ids(set), ElementsAre("2", "3"));
  EXPECT_EQ(set->source, "CUDA_VISIBLE_DEVICES=2,3");
  // Two ranks on slots 0 and 1, each seeing both (local rank i uses cuda:i).
  EXPECT_EQ(*RankVisibleDevices(set->ids, {0, 1}), "2,3");
  EXPECT_EQ(*RankVisibleDevices(set->ids, {1}), "3");
  // Never wider than the set.
  const absl::StatusOr<std::string> outside = RankVisibleDevices(set->ids, {2});
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outside.status().message(), HasSubstr("slot 2 is not one of"));
}

TEST(DeviceProbeTest, UuidsPassThroughAsGiven) {
  const FakeNode node(4, {{"CUDA_VISIBLE_DEVICES",
                           "GPU-8f2b3c1e-0d6a-4a43-9d1e-3b8f6a7c9e01,MIG-5c4d2f1a-7b3e-"
                           "5e28-9a6c-1d2e3f4a5b6c"}});
  const absl::StatusOr<GpuSet> set = SelectGpus("auto", node.Env());
  ASSERT_THAT(Ids(set), ElementsAre("GPU-8f2b3c1e-0d6a-4a43-9d1e-3b8f6a7c9e01",
                                    "MIG-5c4d2f1a-7b3e-5e28-9a6c-1d2e3f4a5b6c"));
  EXPECT_EQ(*RankVisibleDevices(set->ids, {1}),
            "MIG-5c4d2f1a-7b3e-5e28-9a6c-1d2e3f4a5b6c");
}

TEST(DeviceProbeTest, EmptyAndNoDeviceValuesGiveNoGpu) {
  for (const char* value : {"", "-1", "NoDevFiles", "none", " "}) {
    const FakeNode node(8, {{"CUDA_VISIBLE_DEVICES", value}});
    EXPECT_THAT(Ids(SelectGpus("auto", node.Env())), IsEmpty()) << "'" << value << "'";
  }
  // An empty CUDA_VISIBLE_DEVICES wins over Slurm's variables too.
  const FakeNode node(8, {{"CUDA_VISIBLE_DEVICES", ""}, {"SLURM_JOB_GPUS", "0,1"}});
  EXPECT_THAT(Ids(ProbeGpus(node.Env())), IsEmpty());
}

TEST(DeviceProbeTest, AListEndsAtTheFirstEntryCudaWouldNotTake) {
  EXPECT_THAT(*ParseGpuList("CUDA_VISIBLE_DEVICES", "0,-1,2"), ElementsAre("0"));
  EXPECT_THAT(*ParseGpuList("CUDA_VISIBLE_DEVICES", " 1, 2 ,x,3"), ElementsAre("1", "2"));
  EXPECT_THAT(*ParseGpuList("CUDA_VISIBLE_DEVICES", "GPU-,0"), IsEmpty());
  const absl::StatusOr<std::vector<std::string>> twice =
      ParseGpuList("CUDA_VISIBLE_DEVICES", "1,1");
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(twice.status().message(), HasSubstr("names GPU 1 twice"));
}

TEST(DeviceProbeTest, SlurmVariablesServeWhereCudaVisibleDevicesIsUnset) {
  const FakeNode step(8, {{"SLURM_STEP_GPUS", "4,5"}, {"SLURM_JOB_GPUS", "4,5,6,7"}});
  EXPECT_THAT(Ids(ProbeGpus(step.Env())), ElementsAre("4", "5"));
  const FakeNode job(8, {{"SLURM_JOB_GPUS", "6,7"}});
  const absl::StatusOr<GpuSet> set = ProbeGpus(job.Env());
  EXPECT_THAT(Ids(set), ElementsAre("6", "7"));
  EXPECT_EQ(set->source, "SLURM_JOB_GPUS=6,7");
}

TEST(DeviceProbeTest, WithoutVariablesTheDriversGpusAndWithoutADriverNone) {
  const FakeNode node(4, {});
  EXPECT_THAT(Ids(ProbeGpus(node.Env())), ElementsAre("0", "1", "2", "3"));
  // No driver: nothing to run on, whatever the environment names.
  const FakeNode cpu_only(0, {{"CUDA_VISIBLE_DEVICES", "0,1"}});
  EXPECT_THAT(Ids(SelectGpus("auto", cpu_only.Env())), IsEmpty());
}

TEST(DeviceProbeTest, GpusFlagTakesAtMostTheGivenSet) {
  const FakeNode node(8, {{"CUDA_VISIBLE_DEVICES", "2,3"}});
  EXPECT_THAT(Ids(SelectGpus("1", node.Env())), ElementsAre("2"));
  EXPECT_THAT(Ids(SelectGpus("2", node.Env())), ElementsAre("2", "3"));
  EXPECT_THAT(Ids(SelectGpus("none", node.Env())), IsEmpty());
  const absl::StatusOr<GpuSet> wider = SelectGpus("4", node.Env());
  EXPECT_EQ(wider.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      wider.status().message(),
      HasSubstr("--gpus 4: this worker was given 2 GPUs (CUDA_VISIBLE_DEVICES=2,3)"));
  EXPECT_EQ(SelectGpus("two", node.Env()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SelectGpus("-1", node.Env()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DeviceProbeTest, AnIndexTheDriverDoesNotListIsRefused) {
  const FakeNode node(2, {{"SLURM_STEP_GPUS", "1,5"}});
  const absl::StatusOr<GpuSet> set = ProbeGpus(node.Env());
  EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(set.status().message(),
              HasSubstr("SLURM_STEP_GPUS=1,5 names GPU 5, but the driver lists 2 GPUs"));
}

}  // namespace
}  // namespace tessera
