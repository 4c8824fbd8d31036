#include "common/sweep_spec.h"

#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;

constexpr size_t kMaxNameBytes = 128;
constexpr int kMaxRepeats = 100;
// ZeRO stages the trainer has (TrainerConfig.zero_stage).
constexpr int kMaxZeroStage = 3;

// A parsed "shape" grid value.
struct Shape {
  std::string label;  // as written: "pack", "spread" or "NxM"
  std::string placement;
  int nodes = 0;
  int per_node = 0;
};

absl::StatusOr<Shape> ParseShape(const std::string& text, const std::string& path) {
  Shape shape;
  shape.label = text;
  if (text == "pack" || text == "spread") {
    shape.placement = text;
    return shape;
  }
  std::vector<std::string> parts = absl::StrSplit(text, 'x');
  if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &shape.nodes) &&
      absl::SimpleAtoi(parts[1], &shape.per_node) && shape.nodes > 0 &&
      shape.per_node > 0) {
    // N*M is the point's world size: it must fit the int32 proto field.
    if (int64_t{shape.nodes} * shape.per_node > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", text, " is ", int64_t{shape.nodes} * shape.per_node,
                       " ranks, too many"));
    }
    return shape;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": must be pack, spread or NxM (N workers x M ranks each), got '", text,
      "'"));
}

// "world_size=4 batch_size=64 strong pack", with "zero_stage=1" after the
// batch size when the grid sweeps the ZeRO stage.
std::string Describe(const v1::SweepSpec& spec, const v1::SweepPoint& p) {
  const std::string zero = spec.grid().zero_stage().empty()
                               ? ""
                               : absl::StrCat(" zero_stage=", p.zero_stage());
  return absl::StrCat("world_size=", p.world_size(), " batch_size=", p.batch_size(), zero,
                      " ", p.scaling(), " ", p.shape());
}

// Shorter job names: "<sweep>/n2-b64-strong-pack-r0", with "-z1" after the
// batch size when the grid sweeps the ZeRO stage.
std::string PointJobName(const v1::SweepSpec& spec, const v1::SweepPoint& p) {
  const std::string zero =
      spec.grid().zero_stage().empty() ? "" : absl::StrCat("-z", p.zero_stage());
  return absl::StrCat(spec.name(), "/n", p.world_size(), "-b", p.batch_size(), zero, "-",
                      p.scaling(), "-", p.shape(), "-r", p.repeat());
}

// Appends an error for each listed value outside [lo, hi].
template <typename Values>
void CheckRange(const char* path, const Values& values, int lo, int hi,
                std::vector<std::string>& errors) {
  for (int i = 0; i < values.size(); ++i) {
    if (values[i] >= lo && values[i] <= hi) continue;
    errors.push_back(
        hi == std::numeric_limits<int32_t>::max()
            ? absl::StrCat(path, "[", i, "]: must be positive, got ", values[i])
            : absl::StrCat(path, "[", i, "]: must be between ", lo, " and ", hi, ", got ",
                           values[i]));
  }
}

// Appends an error for each bad value of the grid's lists.
void CheckGrid(const v1::SweepSpec& spec, std::vector<std::string>& errors) {
  const v1::SweepGrid& grid = spec.grid();
  constexpr int kAny = std::numeric_limits<int32_t>::max();
  CheckRange("grid.world_size", grid.world_size(), 1, kAny, errors);
  CheckRange("grid.batch_size", grid.batch_size(), 1, kAny, errors);
  CheckRange("grid.zero_stage", grid.zero_stage(), 0, kMaxZeroStage, errors);
  const int base_stage = spec.base().trainer().zero_stage();
  if (grid.zero_stage().empty() && (base_stage < 0 || base_stage > kMaxZeroStage)) {
    errors.push_back(absl::StrCat("base.trainer.zero_stage: must be between 0 and ",
                                  kMaxZeroStage, ", got ", base_stage));
  }
  for (int i = 0; i < grid.scaling_size(); ++i) {
    if (grid.scaling(i) != "strong" && grid.scaling(i) != "weak") {
      errors.push_back(absl::StrCat(
          "grid.scaling[", i, "]: must be strong or weak, got '", grid.scaling(i), "'"));
    }
  }
  bool any_fixed_shape = false;
  for (int i = 0; i < grid.shape_size(); ++i) {
    absl::StatusOr<Shape> shape =
        ParseShape(grid.shape(i), absl::StrCat("grid.shape[", i, "]"));
    if (!shape.ok()) {
      errors.push_back(std::string(shape.status().message()));
    } else if (shape->nodes > 0) {
      any_fixed_shape = true;
    }
  }
  if (any_fixed_shape && grid.world_size_size() > 0) {
    errors.push_back(
        "grid.shape: an NxM shape fixes the world size to N*M; leave grid.world_size "
        "out, or use pack/spread shapes");
  }
  auto unique = [&errors](const char* path, const auto& values) {
    std::set<std::string> seen;
    for (const auto& v : values) {
      if (!seen.insert(absl::StrCat(v)).second) {
        errors.push_back(absl::StrCat(path, ": value ", v, " is listed twice"));
        return;
      }
    }
  };
  unique("grid.world_size", grid.world_size());
  unique("grid.batch_size", grid.batch_size());
  unique("grid.scaling", grid.scaling());
  unique("grid.shape", grid.shape());
  unique("grid.zero_stage", grid.zero_stage());
}

// Checks the sweep's own fields (not the expanded jobs).
absl::Status CheckSweepFields(const v1::SweepSpec& spec) {
  std::vector<std::string> errors;
  if (spec.name().empty()) {
    errors.push_back("name: missing");
  } else if (spec.name().size() > kMaxNameBytes) {
    errors.push_back(absl::StrCat("name: too long (", spec.name().size(),
                                  " bytes, limit ", kMaxNameBytes, ")"));
  }
  if (spec.repeats() < 0 || spec.repeats() > kMaxRepeats) {
    errors.push_back(absl::StrCat("repeats: must be between 1 and ", kMaxRepeats,
                                  ", got ", spec.repeats()));
  }
  if (spec.max_parallel() < 0) {
    errors.push_back(
        absl::StrCat("max_parallel: must be non-negative, got ", spec.max_parallel()));
  }
  if (!spec.has_base())
    errors.push_back("base: missing (the job spec every point starts from)");
  CheckGrid(spec, errors);
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
}

// The grid's axes, with an empty list replaced by the base job's value.
struct GridAxes {
  std::vector<Shape> shapes;
  std::vector<std::string> scalings;
  std::vector<int> batches;
  std::vector<int> zero_stages;
  std::vector<int> listed_sizes;  // grid.world_size as given; may be empty
  int repeats = 1;
};

absl::StatusOr<GridAxes> ResolveAxes(const v1::SweepSpec& spec) {
  const v1::JobSpec& base = spec.base();
  const v1::SweepGrid& grid = spec.grid();
  GridAxes axes;
  for (const std::string& s : grid.shape()) {
    ASSIGN_OR_RETURN(Shape shape, ParseShape(s, "grid.shape"));
    axes.shapes.push_back(std::move(shape));
  }
  if (axes.shapes.empty()) {
    Shape shape;
    if (base.nodes() > 0 && base.per_node() > 0) {
      shape.label = absl::StrCat(base.nodes(), "x", base.per_node());
      shape.nodes = base.nodes();
      shape.per_node = base.per_node();
    } else {
      shape.placement = base.placement().empty() ? "pack" : base.placement();
      shape.label = shape.placement;
    }
    axes.shapes.push_back(shape);
  }
  axes.scalings.assign(grid.scaling().begin(), grid.scaling().end());
  if (axes.scalings.empty()) {
    axes.scalings.push_back(base.trainer().scaling().empty() ? "strong"
                                                             : base.trainer().scaling());
  }
  axes.batches.assign(grid.batch_size().begin(), grid.batch_size().end());
  if (axes.batches.empty()) axes.batches.push_back(base.trainer().batch_size());
  axes.zero_stages.assign(grid.zero_stage().begin(), grid.zero_stage().end());
  if (axes.zero_stages.empty()) axes.zero_stages.push_back(base.trainer().zero_stage());
  axes.listed_sizes.assign(grid.world_size().begin(), grid.world_size().end());
  axes.repeats = spec.repeats() > 0 ? spec.repeats() : 1;
  return axes;
}

// The number of points the grid expands to (an NxM shape has one world size).
int64_t CountPoints(const GridAxes& axes) {
  int64_t total = 0;
  for (const Shape& shape : axes.shapes) {
    const int64_t sizes = shape.nodes > 0 ? 1
                          : axes.listed_sizes.empty()
                              ? 1
                              : static_cast<int64_t>(axes.listed_sizes.size());
    total += sizes * static_cast<int64_t>(axes.scalings.size()) *
             static_cast<int64_t>(axes.batches.size()) *
             static_cast<int64_t>(axes.zero_stages.size()) * axes.repeats;
  }
  return total;
}

// The world sizes a shape runs at: N*M for an NxM shape, else the grid's list,
// else the base job's.
std::vector<int> WorldSizesOf(const Shape& shape, const GridAxes& axes,
                              const v1::JobSpec& base) {
  if (shape.nodes > 0) return {shape.nodes * shape.per_node};
  if (!axes.listed_sizes.empty()) return axes.listed_sizes;
  return {base.world_size()};
}

// The base job with the point's coordinates applied, validated.
absl::StatusOr<SweepJob> MakePointJob(const v1::SweepSpec& spec, const Shape& shape,
                                      const v1::SweepPoint& p, const SpecLimits& limits) {
  SweepJob point;
  point.point = p;
  v1::JobSpec& job = point.job;
  job = spec.base();
  job.set_world_size(p.world_size());
  job.mutable_trainer()->set_batch_size(p.batch_size());
  job.mutable_trainer()->set_scaling(p.scaling());
  job.mutable_trainer()->set_zero_stage(p.zero_stage());
  job.set_nodes(shape.nodes);
  job.set_per_node(shape.per_node);
  job.set_placement(shape.placement);
  job.set_name(PointJobName(spec, p));
  if (job.name().size() > kMaxNameBytes)
    job.set_name(job.name().substr(0, kMaxNameBytes));
  absl::Status valid = ValidateJobSpec(job, limits);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "point ", p.index(), " (", Describe(spec, p), "): ", valid.message()));
  }
  return point;
}

// Appends the point `p` (coordinates set) once per repeat.
absl::Status AddRepeats(const v1::SweepSpec& spec, const Shape& shape, v1::SweepPoint p,
                        int repeats, const SpecLimits& limits,
                        std::vector<SweepJob>& out) {
  for (int r = 0; r < repeats; ++r) {
    p.set_index(static_cast<int32_t>(out.size()));
    p.set_repeat(r);
    ASSIGN_OR_RETURN(SweepJob point, MakePointJob(spec, shape, p, limits));
    out.push_back(std::move(point));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::SweepSpec> ParseSweepSpec(const std::string& yaml_text) {
  v1::SweepSpec spec;
  RETURN_IF_ERROR(ParseSpecMessage(yaml_text, &spec));
  return spec;
}

absl::StatusOr<std::vector<SweepJob>> ExpandSweep(const v1::SweepSpec& spec,
                                                  const SpecLimits& limits) {
  RETURN_IF_ERROR(CheckSweepFields(spec));
  ASSIGN_OR_RETURN(const GridAxes axes, ResolveAxes(spec));
  const int64_t total = CountPoints(axes);
  if (total > kMaxSweepPoints) {
    return absl::InvalidArgumentError(
        absl::StrCat("grid: expands to ", total, " points, limit ", kMaxSweepPoints));
  }

  std::vector<SweepJob> out;
  for (const Shape& shape : axes.shapes) {
    const std::vector<int> sizes = WorldSizesOf(shape, axes, spec.base());
    for (const std::string& scaling : axes.scalings) {
      for (int batch : axes.batches) {
        for (int zero_stage : axes.zero_stages) {
          for (int world : sizes) {
            v1::SweepPoint p;
            p.set_world_size(world);
            p.set_batch_size(batch);
            p.set_zero_stage(zero_stage);
            p.set_scaling(scaling);
            p.set_shape(shape.label);
            RETURN_IF_ERROR(AddRepeats(spec, shape, p, axes.repeats, limits, out));
          }
        }
      }
    }
  }
  return out;
}

absl::Status ValidateSweepSpec(const v1::SweepSpec& spec, const SpecLimits& limits) {
  return ExpandSweep(spec, limits).status();
}

absl::StatusOr<v1::SweepSpec> ParseAndValidateSweepSpec(const std::string& yaml_text,
                                                        const SpecLimits& limits) {
  ASSIGN_OR_RETURN(v1::SweepSpec spec, ParseSweepSpec(yaml_text));
  RETURN_IF_ERROR(ValidateSweepSpec(spec, limits));
  return spec;
}

}  // namespace tessera
