// Sweep spec parsing, validation and grid expansion.
#include "common/sweep_spec.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using ::testing::HasSubstr;

constexpr char kBase[] = R"(
base:
  trainer:
    model: vit-micro
    dataset: synthetic
    epochs: 1
    batch_size: 8
)";

absl::StatusOr<std::vector<SweepJob>> Expand(const std::string& yaml) {
  absl::StatusOr<v1::SweepSpec> spec = ParseSweepSpec(yaml);
  if (!spec.ok()) return spec.status();
  return ExpandSweep(*spec, SpecLimits());
}

TEST(SweepSpecTest, GridExpandsToCrossProductInDocumentedOrder) {
  auto points = Expand(std::string("name: s\nrepeats: 2\ngrid:\n  world_size: [1, 2]\n"
                                   "  batch_size: [16, 32]\n") +
                       kBase);
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 8u);
  // Repeat varies fastest, then world size, then batch size.
  const int expected[8][3] = {{16, 1, 0}, {16, 1, 1}, {16, 2, 0}, {16, 2, 1},
                              {32, 1, 0}, {32, 1, 1}, {32, 2, 0}, {32, 2, 1}};
  for (int i = 0; i < 8; ++i) {
    const SweepJob& p = (*points)[i];
    EXPECT_EQ(p.point.index(), i);
    EXPECT_EQ(p.point.batch_size(), expected[i][0]);
    EXPECT_EQ(p.point.world_size(), expected[i][1]);
    EXPECT_EQ(p.point.repeat(), expected[i][2]);
    EXPECT_EQ(p.job.world_size(), expected[i][1]);
    EXPECT_EQ(p.job.trainer().batch_size(), expected[i][0]);
    EXPECT_EQ(p.job.trainer().scaling(), "strong");
    EXPECT_EQ(p.job.trainer().model(), "vit-micro");
  }
  EXPECT_EQ((*points)[2].job.name(), "s/n2-b16-strong-pack-r0");
}

TEST(SweepSpecTest, FixedShapeSetsNodesPerNodeAndWorldSize) {
  auto points = Expand(std::string("name: s\ngrid:\n  shape: [1x4, 2x2, 4x1]\n"
                                   "  scaling: [weak]\n") +
                       kBase);
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 3u);
  EXPECT_EQ((*points)[1].job.world_size(), 4);
  EXPECT_EQ((*points)[1].job.nodes(), 2);
  EXPECT_EQ((*points)[1].job.per_node(), 2);
  EXPECT_EQ((*points)[1].point.shape(), "2x2");
  EXPECT_EQ((*points)[1].job.trainer().scaling(), "weak");
}

TEST(SweepSpecTest, SpreadShapeSetsPlacement) {
  auto points = Expand(
      std::string("name: s\ngrid:\n  world_size: [2]\n  shape: [spread]\n") + kBase);
  ASSERT_TRUE(points.ok()) << points.status();
  EXPECT_EQ((*points)[0].job.placement(), "spread");
}

TEST(SweepSpecTest, ZeroStageAxisSetsTheTrainersStageAndNamesThePoints) {
  auto spec = ParseSweepSpec(std::string("name: z\ngrid:\n  world_size: [1, 2]\n"
                                         "  zero_stage: [0, 1, 2]\n") +
                             kBase);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->grid().zero_stage(), ::testing::ElementsAre(0, 1, 2));
  auto points = ExpandSweep(*spec, SpecLimits());
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 6u);
  // World size varies faster than the stage: each stage is one line over n.
  const int expected[6][2] = {{0, 1}, {0, 2}, {1, 1}, {1, 2}, {2, 1}, {2, 2}};
  for (int i = 0; i < 6; ++i) {
    const SweepJob& p = (*points)[i];
    EXPECT_EQ(p.point.index(), i);
    EXPECT_EQ(p.point.zero_stage(), expected[i][0]);
    EXPECT_EQ(p.point.world_size(), expected[i][1]);
    EXPECT_EQ(p.job.trainer().zero_stage(), expected[i][0]);
    EXPECT_EQ(p.job.world_size(), expected[i][1]);
    EXPECT_EQ(p.job.trainer().batch_size(), 8);
  }
  EXPECT_EQ((*points)[3].job.name(), "z/n2-b8-z1-strong-pack-r0");
}

TEST(SweepSpecTest, WithoutAZeroStageAxisPointsTakeTheBasesStageAndKeepTheirNames) {
  auto points = Expand(std::string("name: s\ngrid:\n  world_size: [2]\n") + kBase +
                       "    zero_stage: 2\n");
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 1u);
  EXPECT_EQ((*points)[0].point.zero_stage(), 2);
  EXPECT_EQ((*points)[0].job.trainer().zero_stage(), 2);
  EXPECT_EQ((*points)[0].job.name(), "s/n2-b8-strong-pack-r0");
}

TEST(SweepSpecTest, ZeroStageOutsideZeroToThreeIsRejected) {
  auto four = Expand(std::string("name: s\ngrid:\n  zero_stage: [0, 4]\n") + kBase);
  EXPECT_TRUE(absl::IsInvalidArgument(four.status()));
  EXPECT_THAT(four.status().message(),
              HasSubstr("grid.zero_stage[1]: must be between 0 and 3, got 4"));

  auto negative = Expand(std::string("name: s\ngrid:\n  zero_stage: [-1]\n") + kBase);
  EXPECT_THAT(negative.status().message(),
              HasSubstr("grid.zero_stage[0]: must be between 0 and 3, got -1"));

  auto twice = Expand(std::string("name: s\ngrid:\n  zero_stage: [1, 1]\n") + kBase);
  EXPECT_THAT(twice.status().message(),
              HasSubstr("grid.zero_stage: value 1 is listed twice"));

  auto base = Expand(std::string("name: s\ngrid:\n  world_size: [1]\n") + kBase +
                     "    zero_stage: 5\n");
  EXPECT_THAT(base.status().message(),
              HasSubstr("base.trainer.zero_stage: must be between 0 and 3, got 5"));

  auto text = ParseSweepSpec("name: s\ngrid:\n  zero_stage: [one]\n");
  EXPECT_TRUE(absl::IsInvalidArgument(text.status()));
  EXPECT_THAT(text.status().message(), HasSubstr("grid.zero_stage"));
}

TEST(SweepSpecTest, InvalidPointOfAZeroStudyNamesItsStage) {
  SpecLimits limits;
  limits.max_world_size = 4;
  auto spec = ParseSweepSpec(
      std::string("name: s\ngrid:\n  world_size: [8]\n  zero_stage: [1]\n") + kBase);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(ValidateSweepSpec(*spec, limits).message(),
              HasSubstr("point 0 (world_size=8 batch_size=8 zero_stage=1 strong pack)"));
}

TEST(SweepSpecTest, BadValuesAreRejectedNamingTheField) {
  auto bad_scaling = Expand(std::string("name: s\ngrid:\n  world_size: [1]\n"
                                        "  scaling: [medium]\n") +
                            kBase);
  EXPECT_THAT(bad_scaling.status().message(), HasSubstr("grid.scaling[0]"));

  auto bad_shape =
      Expand(std::string("name: s\ngrid:\n  world_size: [1]\n  shape: [3y2]\n") + kBase);
  EXPECT_THAT(bad_shape.status().message(), HasSubstr("grid.shape[0]"));

  auto both =
      Expand(std::string("name: s\ngrid:\n  world_size: [1]\n  shape: [2x2]\n") + kBase);
  EXPECT_THAT(both.status().message(), HasSubstr("fixes the world size"));

  auto zero = Expand(std::string("name: s\ngrid:\n  world_size: [0]\n") + kBase);
  EXPECT_THAT(zero.status().message(), HasSubstr("grid.world_size[0]: must be positive"));

  auto unknown = ParseSweepSpec("name: s\ngrid:\n  gpus: [1]\n");
  EXPECT_THAT(unknown.status().message(), HasSubstr("grid.gpus"));

  auto no_base = Expand("name: s\ngrid:\n  world_size: [1]\n");
  EXPECT_THAT(no_base.status().message(), HasSubstr("base: missing"));

  auto twice = Expand(std::string("name: s\ngrid:\n  world_size: [1, 1]\n") + kBase);
  EXPECT_THAT(twice.status().message(), HasSubstr("listed twice"));
}

TEST(SweepSpecTest, InvalidPointIsNamedWithItsCoordinates) {
  SpecLimits limits;
  limits.max_world_size = 4;
  auto spec =
      ParseSweepSpec(std::string("name: s\ngrid:\n  world_size: [2, 8]\n") + kBase);
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::Status s = ValidateSweepSpec(*spec, limits);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("point 1 (world_size=8"));
  EXPECT_THAT(s.message(), HasSubstr("world_size: must be between 1 and 4"));
}

TEST(SweepSpecTest, HugeShapeIsRejectedInsteadOfOverflowing) {
  auto points = Expand(std::string("name: s\ngrid:\n  shape: [65536x65536]\n") + kBase);
  EXPECT_TRUE(absl::IsInvalidArgument(points.status()));
  EXPECT_THAT(points.status().message(), HasSubstr("grid.shape"));
}

TEST(SweepSpecTest, TooManyPointsIsRejected) {
  std::string sizes;
  for (int i = 1; i <= 40; ++i) sizes += (i > 1 ? ", " : "") + std::to_string(i);
  auto points = Expand("name: s\nrepeats: 30\ngrid:\n  world_size: [" + sizes + "]\n" +
                       std::string(kBase));
  EXPECT_THAT(points.status().message(), HasSubstr("1200 points, limit 1024"));
}

TEST(SweepSpecTest, EveryExampleSweepParsesAndExpands) {
  std::filesystem::path root =
      std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  if (const char* dir = std::getenv("TESSERA_SOURCE_DIR"); dir != nullptr) root = dir;
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root / "examples")) {
    if (entry.path().extension() != ".yaml") continue;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().find("\ngrid:") == std::string::npos) continue;
    absl::StatusOr<v1::SweepSpec> spec =
        ParseAndValidateSweepSpec(text.str(), SpecLimits{});
    EXPECT_TRUE(spec.ok()) << entry.path() << ": " << spec.status();
    ++checked;
  }
  EXPECT_GE(checked, 2);
}

}  // namespace
}  // namespace tessera
