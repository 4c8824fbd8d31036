#include "common/search_spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/metric_names.h"
#include "common/seeded_random.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"

namespace tessera {
namespace {

namespace v1 = ::tessera::v1;
using google::protobuf::FieldDescriptor;

constexpr size_t kMaxNameBytes = 128;
constexpr int kDefaultReductionFactor = 3;
constexpr int kMaxReductionFactor = 100;
constexpr int kDefaultRungs = 3;
constexpr int kMaxRungs = 20;
// The trainer's largest --epochs (OptionLimits::max_epochs in
// worker/trainer/run/trainer_options.h): a run measured in steps gets as many
// passes as its steps could need, up to this.
constexpr int64_t kMaxTrainerEpochs = 100000;
// Lengths within this relative distance of max_length are max_length (rung
// lengths are products of doubles).
constexpr double kLengthTolerance = 1e-9;

// The trainer keys the search sets itself: a trial's length, its checkpoint
// folder, its rungs; and the keys of an evaluation, which trains nothing.
constexpr const char* kSearchOwnedKeys[] = {
    "max_steps",      "epochs",    "stop_fraction", "resume",
    "checkpoint_dir", "eval_only", "eval_step"};

absl::Status Invalid(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

std::string Describe(const YAML::Node& node) {
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  if (node.IsScalar()) return absl::StrCat("'", node.Scalar().substr(0, 64), "'");
  return "nothing";
}

// Shortest text that reads back as the same double.
std::string FormatNumber(double value) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return ec == std::errc() ? std::string(buf, end) : absl::StrCat(value);
}

// ---- Parsing the parameters map -------------------------------------------

// A choice value as text: a scalar as written, a list of plain scalars (for a
// list key such as adam_betas) as a flow list.
absl::StatusOr<std::string> ChoiceText(const YAML::Node& node, const std::string& path) {
  if (node.IsScalar()) return node.Scalar();
  if (!node.IsSequence()) {
    return Invalid(
        path, absl::StrCat("expected a value or a list of values, got ", Describe(node)));
  }
  std::vector<std::string> items;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string item_path = absl::StrCat(path, "[", i, "]");
    if (!node[i].IsScalar()) {
      return Invalid(item_path,
                     absl::StrCat("expected a value, got ", Describe(node[i])));
    }
    if (node[i].Scalar().find_first_of(",[]{}:#\"'") != std::string::npos) {
      return Invalid(item_path, "a value in a list must be a plain number or word");
    }
    items.push_back(node[i].Scalar());
  }
  return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
}

// The list of one space ({uniform: [a, b]} and the others) into `p`.
absl::Status ParseSpaceList(const std::string& kind, const YAML::Node& list,
                            const std::string& path, v1::SearchParameter* p) {
  if (!list.IsSequence()) {
    return Invalid(path, absl::StrCat("expected a list, got ", Describe(list)));
  }
  if (kind == "choice" && list.size() == 0) {
    return Invalid(path, "empty: list at least one value");
  }
  if (list.size() > static_cast<size_t>(kMaxSearchTrials)) {
    return Invalid(
        path, absl::StrCat("has ", list.size(), " values, limit ", kMaxSearchTrials));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string item_path = absl::StrCat(path, "[", i, "]");
    if (kind == "choice") {
      ASSIGN_OR_RETURN(std::string text, ChoiceText(list[i], item_path));
      p->add_choice(std::move(text));
      continue;
    }
    const std::string text = list[i].IsScalar() ? list[i].Scalar() : "";
    if (kind == "int") {
      int64_t value = 0;
      if (!absl::SimpleAtoi(text, &value)) {
        return Invalid(item_path,
                       absl::StrCat("expected an integer, got ", Describe(list[i])));
      }
      p->add_int_range(value);
      continue;
    }
    double value = 0;
    if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
      return Invalid(item_path,
                     absl::StrCat("expected a finite number, got ", Describe(list[i])));
    }
    kind == "uniform" ? p->add_uniform(value) : p->add_loguniform(value);
  }
  return absl::OkStatus();
}

// One entry of the parameters map: `key: {kind: [values]}`.
absl::Status ParseParameter(const std::string& key, const YAML::Node& node,
                            const std::string& path, v1::SearchParameter* p) {
  p->set_key(key);
  if (!node.IsMap() || node.size() != 1) {
    return Invalid(path,
                   absl::StrCat("expected one of {choice: [...]}, {uniform: [a, b]}, "
                                "{loguniform: [a, b]} or {int: [a, b]}, got ",
                                Describe(node)));
  }
  const auto entry = *node.begin();
  const std::string kind = entry.first.IsScalar() ? entry.first.Scalar() : "";
  if (kind != "choice" && kind != "uniform" && kind != "loguniform" && kind != "int") {
    return absl::InvalidArgumentError(
        absl::StrCat("spec: unknown field '", path, ".", kind,
                     "' (a parameter takes one of choice, uniform, loguniform, int)"));
  }
  return ParseSpaceList(kind, entry.second, absl::StrCat(path, ".", kind), p);
}

absl::Status ParseParameters(const YAML::Node& node, v1::SearchConfig* config) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) {
    return Invalid("search.parameters",
                   absl::StrCat("expected a map of key: {choice|uniform|loguniform|int: "
                                "[...]}, got ",
                                Describe(node)));
  }
  std::set<std::string> seen;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) {
      return Invalid("search.parameters", "keys must be trainer keys");
    }
    const std::string& key = entry.first.Scalar();
    const std::string path = absl::StrCat("search.parameters.", key);
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec: duplicate field '", path, "'"));
    }
    RETURN_IF_ERROR(ParseParameter(key, entry.second, path, config->add_parameters()));
  }
  return absl::OkStatus();
}

// Takes the `search.parameters` map out of `root` (the proto spells the
// parameters as a list; the spec writes them as a map). Undefined when there
// is none, or when it is written as the proto's list, which the message
// parser reads as it is.
absl::StatusOr<YAML::Node> TakeParameters(YAML::Node& root) {
  const YAML::Node& const_root = root;
  if (!const_root.IsMap() || !const_root["search"].IsMap()) return YAML::Node();
  YAML::Node search = root["search"];
  const YAML::Node& const_search = search;
  int count = 0;
  for (const auto& entry : const_search) {
    count += entry.first.IsScalar() && entry.first.Scalar() == "parameters";
  }
  if (count > 1) {
    return absl::InvalidArgumentError("spec: duplicate field 'search.parameters'");
  }
  if (count == 0 || const_search["parameters"].IsSequence()) return YAML::Node();
  YAML::Node parameters = YAML::Clone(const_search["parameters"]);
  search.remove("parameters");
  return parameters;
}

// ---- The search's own fields ----------------------------------------------

const SearchMetric* FindMetric(const std::string& name) {
  for (const SearchMetric& m : kSearchMetrics) {
    if (name == m.name) return &m;
  }
  return nullptr;
}

std::string MetricNames() {
  std::vector<std::string> names;
  for (const SearchMetric& m : kSearchMetrics) names.push_back(m.name);
  return absl::StrJoin(names, ", ");
}

// The field a parameter sets: world_size of the job, or a trainer key.
const FieldDescriptor* ParameterField(const std::string& key) {
  if (key == "world_size") return v1::JobSpec::descriptor()->FindFieldByName(key);
  const FieldDescriptor* field = v1::TrainerConfig::descriptor()->FindFieldByName(key);
  if (field == nullptr || field->is_map() ||
      field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    return nullptr;
  }
  return field;
}

bool IsFloating(const FieldDescriptor* f) {
  return f->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE ||
         f->cpp_type() == FieldDescriptor::CPPTYPE_FLOAT;
}

bool IsInteger(const FieldDescriptor* f) {
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return true;
    default:
      return false;
  }
}

// A range space ([a, b] of uniform, loguniform or int) against its field.
template <typename Values>
void CheckRange(const std::string& path, const Values& values, bool log,
                std::vector<std::string>& errors) {
  if (values.size() != 2) {
    errors.push_back(absl::StrCat(path, ": two values [a, b], got ", values.size()));
    return;
  }
  if (values[0] > values[1]) {
    errors.push_back(
        absl::StrCat(path, ": empty range [", values[0], ", ", values[1], "] (a > b)"));
  }
  if (log && (values[0] <= 0 || values[1] <= 0)) {
    errors.push_back(absl::StrCat(path, ": bounds must be above 0 (a log scale), got [",
                                  values[0], ", ", values[1], "]"));
  }
}

// One parameter's key and space (its values' types are checked when they are
// applied, CheckParameterValues).
void CheckParameter(const v1::SearchParameter& p, const std::string& method,
                    std::vector<std::string>& errors) {
  const std::string path = absl::StrCat("search.parameters.", p.key());
  const FieldDescriptor* field = ParameterField(p.key());
  if (field == nullptr) {
    errors.push_back(absl::StrCat(path,
                                  ": not a trainer key (a field of trainer) or "
                                  "world_size"));
    return;
  }
  for (const char* owned : kSearchOwnedKeys) {
    if (p.key() == owned) {
      errors.push_back(absl::StrCat(path,
                                    ": set by the search itself (length, rungs "
                                    "and checkpoints), not searchable"));
      return;
    }
  }
  const int kinds = (p.choice_size() > 0) + (p.uniform_size() > 0) +
                    (p.loguniform_size() > 0) + (p.int_range_size() > 0);
  if (kinds != 1) {
    errors.push_back(absl::StrCat(
        path, kinds == 0 ? ": no values: give one of choice, uniform, loguniform or int"
                         : ": give only one of choice, uniform, loguniform or int"));
    return;
  }
  const bool continuous = p.uniform_size() > 0 || p.loguniform_size() > 0;
  if (continuous) {
    const bool log = p.loguniform_size() > 0;
    CheckRange(absl::StrCat(path, log ? ".loguniform" : ".uniform"),
               log ? p.loguniform() : p.uniform(), log, errors);
    if (!IsFloating(field) || field->is_repeated()) {
      errors.push_back(absl::StrCat(path, ": ", log ? "loguniform" : "uniform",
                                    " draws fractions; this key takes ",
                                    IsInteger(field) ? "int: [a, b]" : "choice: [...]"));
    }
    if (method == "grid") {
      errors.push_back(absl::StrCat(path,
                                    ": a grid takes choice and int parameters "
                                    "only; use random or asha to draw from a range"));
    }
  }
  if (p.int_range_size() > 0) {
    CheckRange(absl::StrCat(path, ".int"), p.int_range(), false, errors);
    if ((!IsInteger(field) && !IsFloating(field)) || field->is_repeated()) {
      errors.push_back(absl::StrCat(path, ": int needs a number key; use choice: [...]"));
    }
  }
}

void CheckParameters(const v1::SearchConfig& c, std::vector<std::string>& errors) {
  std::set<std::string> seen;
  for (int i = 0; i < c.parameters_size(); ++i) {
    const v1::SearchParameter& p = c.parameters(i);
    if (p.key().empty()) {
      errors.push_back(absl::StrCat("search.parameters[", i, "].key: missing"));
      continue;
    }
    if (!seen.insert(p.key()).second) {
      errors.push_back(absl::StrCat("search.parameters.", p.key(), ": listed twice"));
      continue;
    }
    CheckParameter(p, c.method(), errors);
  }
}

// Method, metric, mode, length and budget.
void CheckConfig(const v1::SearchConfig& c, std::vector<std::string>& errors) {
  if (c.method() != "grid" && c.method() != "random" && c.method() != "asha") {
    errors.push_back(absl::StrCat(
        "search.method: must be one of grid, random, asha; got '", c.method(), "'"));
  }
  if (c.metric().empty()) {
    errors.push_back(absl::StrCat("search.metric: missing (one of ", MetricNames(), ")"));
  } else if (FindMetric(c.metric()) == nullptr) {
    errors.push_back(absl::StrCat("search.metric: '", c.metric(),
                                  "' is not a metric the trainer reports; one of ",
                                  MetricNames()));
  }
  if (!c.mode().empty() && c.mode() != "max" && c.mode() != "min") {
    errors.push_back(
        absl::StrCat("search.mode: must be one of max, min; got '", c.mode(), "'"));
  }
  if (c.max_length() <= 0) {
    errors.push_back(
        absl::StrCat("search.max_length: must be positive, got ", c.max_length()));
  }
  if (!c.length_unit().empty() && c.length_unit() != "steps" &&
      c.length_unit() != "epochs") {
    errors.push_back(absl::StrCat(
        "search.length_unit: must be one of steps, epochs; got '", c.length_unit(), "'"));
  } else if (c.length_unit() == "epochs" &&
             c.max_length() > std::numeric_limits<int32_t>::max()) {
    errors.push_back(absl::StrCat("search.max_length: ", c.max_length(),
                                  " epochs is more than trainer.epochs holds"));
  }
  if (c.method() != "grid" && (c.max_trials() < 1 || c.max_trials() > kMaxSearchTrials)) {
    errors.push_back(absl::StrCat("search.max_trials: must be between 1 and ",
                                  kMaxSearchTrials, ", got ", c.max_trials()));
  }
  if (c.max_concurrent() < 0) {
    errors.push_back(absl::StrCat("search.max_concurrent: must be non-negative, got ",
                                  c.max_concurrent()));
  }
}

// The asha block: only for asha, where promoted trials resume checkpoints.
void CheckAsha(const v1::SearchSpec& spec, std::vector<std::string>& errors) {
  const v1::SearchConfig& c = spec.search();
  if (c.method() != "asha") {
    if (c.has_asha()) errors.push_back("search.asha: only for method asha");
    return;
  }
  const v1::AshaConfig& a = c.asha();
  if (a.reduction_factor() != 0 &&
      (a.reduction_factor() < 2 || a.reduction_factor() > kMaxReductionFactor)) {
    errors.push_back(absl::StrCat("search.asha.reduction_factor: must be between 2 and ",
                                  kMaxReductionFactor, ", got ", a.reduction_factor()));
  }
  if (a.min_length() < 0 || (c.max_length() > 0 && a.min_length() > c.max_length())) {
    errors.push_back(
        absl::StrCat("search.asha.min_length: must be between 1 and "
                     "search.max_length (",
                     c.max_length(), "), got ", a.min_length()));
  }
  if (a.max_rungs() < 0 || a.max_rungs() > kMaxRungs) {
    errors.push_back(absl::StrCat("search.asha.max_rungs: must be between 1 and ",
                                  kMaxRungs, ", got ", a.max_rungs()));
  }
  if (spec.base().trainer().checkpoint_dir().empty()) {
    errors.push_back(
        "base.trainer.checkpoint_dir: asha resumes promoted trials from their "
        "checkpoints; set it (each trial gets its own folder under it)");
  }
}

// What the base may not set: the search sets each trial's length and rungs.
void CheckBase(const v1::SearchSpec& spec, std::vector<std::string>& errors) {
  if (!spec.has_base()) {
    errors.push_back("base: missing (the job spec every trial starts from)");
    return;
  }
  const v1::TrainerConfig& t = spec.base().trainer();
  if (t.max_steps() != 0) {
    errors.push_back(
        "base.trainer.max_steps: the search sets each trial's length "
        "(search.max_length); leave it out");
  }
  if (spec.search().length_unit() == "epochs" && t.epochs() != 0) {
    errors.push_back(
        "base.trainer.epochs: the search sets each trial's length "
        "(search.max_length in epochs); leave it out");
  }
  if (t.stop_fraction() != 0) {
    errors.push_back("base.trainer.stop_fraction: set by the search for each rung");
  }
  if (t.eval_only() || spec.base().kind() == "eval") {
    errors.push_back("base.kind: a search trains; an evaluation job cannot be its base");
  }
  const std::string& metric = spec.search().metric();
  if (absl::StartsWith(metric, "val_") && t.val_fraction() == 0 &&
      t.dataset() != "imagefolder" && t.dataset() != "shards") {
    errors.push_back(absl::StrCat(
        "search.metric: ", metric,
        " is measured on a validation split; set base.trainer.val_fraction (image "
        "folders use their val/)"));
  }
}

// Points of the grid, saturating above kMaxSearchTrials.
int64_t GridSize(const v1::SearchConfig& c) {
  int64_t size = 1;
  for (const v1::SearchParameter& p : c.parameters()) {
    int64_t n = p.choice_size();
    if (p.int_range_size() == 2 && p.int_range(0) <= p.int_range(1)) {
      const double span =
          static_cast<double>(p.int_range(1)) - static_cast<double>(p.int_range(0)) + 1;
      n = span > kMaxSearchTrials ? kMaxSearchTrials + 1 : static_cast<int64_t>(span);
    }
    size = std::min<int64_t>(size * std::max<int64_t>(n, 1), kMaxSearchTrials + 1);
  }
  return size;
}

void CheckTrials(const v1::SearchConfig& c, std::vector<std::string>& errors) {
  if (c.method() != "grid") return;
  const int64_t size = GridSize(c);
  if (size > kMaxSearchTrials) {
    errors.push_back(absl::StrCat("search.parameters: the grid has more than ",
                                  kMaxSearchTrials, " points"));
  } else if (c.max_trials() != 0 && c.max_trials() < size) {
    errors.push_back(absl::StrCat("search.max_trials: a grid runs every point (", size,
                                  "); leave max_trials out or set it to at least ",
                                  size));
  }
}

absl::Status CheckSearchFields(const v1::SearchSpec& spec) {
  std::vector<std::string> errors;
  if (spec.name().empty()) {
    errors.push_back("name: missing");
  } else if (spec.name().size() > kMaxNameBytes) {
    errors.push_back(absl::StrCat("name: too long (", spec.name().size(),
                                  " bytes, limit ", kMaxNameBytes, ")"));
  }
  CheckConfig(spec.search(), errors);
  CheckParameters(spec.search(), errors);
  CheckAsha(spec, errors);
  CheckBase(spec, errors);
  if (errors.empty()) CheckTrials(spec.search(), errors);
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
}

// ---- Trials -----------------------------------------------------------------

// The value of parameter `p` at grid digit `digit`.
std::string GridValue(const v1::SearchParameter& p, int64_t digit) {
  if (p.choice_size() > 0) return p.choice(static_cast<int>(digit));
  return absl::StrCat(p.int_range(0) + digit);
}

// Grid point `index`: mixed radix, the last parameter varying fastest.
std::vector<std::pair<std::string, std::string>> GridValues(const v1::SearchConfig& c,
                                                            int64_t index) {
  std::vector<std::pair<std::string, std::string>> values(c.parameters_size());
  for (int i = c.parameters_size() - 1; i >= 0; --i) {
    const v1::SearchParameter& p = c.parameters(i);
    const int64_t n =
        p.choice_size() > 0 ? p.choice_size() : p.int_range(1) - p.int_range(0) + 1;
    values[i] = {p.key(), GridValue(p, index % n)};
    index /= n;
  }
  return values;
}

// Trial `index`'s draw: one value per parameter, in order, from stream
// `index` of the seed.
std::vector<std::pair<std::string, std::string>> SampledValues(const v1::SearchConfig& c,
                                                               int64_t index) {
  SeededRandom rng = SeededRandom::ForStream(static_cast<uint64_t>(c.seed()),
                                             static_cast<uint64_t>(index));
  std::vector<std::pair<std::string, std::string>> values;
  for (const v1::SearchParameter& p : c.parameters()) {
    std::string value;
    if (p.choice_size() > 0) {
      value = p.choice(static_cast<int>(rng.UniformInt(0, p.choice_size() - 1)));
    } else if (p.int_range_size() > 0) {
      value = absl::StrCat(rng.UniformInt(p.int_range(0), p.int_range(1)));
    } else if (p.uniform_size() > 0) {
      const double a = p.uniform(0), b = p.uniform(1);
      value = FormatNumber(std::min(b, a + rng.NextDouble() * (b - a)));
    } else {
      const double a = p.loguniform(0), b = p.loguniform(1);
      const double x =
          std::exp(std::log(a) + rng.NextDouble() * (std::log(b) - std::log(a)));
      value = FormatNumber(std::clamp(x, a, b));
    }
    values.emplace_back(p.key(), std::move(value));
  }
  return values;
}

std::string Describe(const SearchTrialJob& trial) {
  std::vector<std::string> parts;
  for (const auto& [key, value] : trial.parameters) {
    parts.push_back(absl::StrCat(key, "=", value));
  }
  return absl::StrJoin(parts, " ");
}

absl::Status TrialError(const SearchTrialJob& trial, const absl::Status& s) {
  return absl::InvalidArgumentError(
      absl::StrCat("trial ", trial.index, " (", Describe(trial), "): ", s.message()));
}

// Sets `key` (world_size or a trainer key) of `job` to `value`.
absl::Status ApplyValue(v1::JobSpec& job, const std::string& key,
                        const std::string& value) {
  if (key == "world_size") return SetSpecField(&job, key, value, key);
  return SetSpecField(job.mutable_trainer(), key, value, absl::StrCat("trainer.", key));
}

// The trial's whole length, in its unit.
void SetLength(const v1::SearchConfig& c, v1::JobSpec& job) {
  v1::TrainerConfig* t = job.mutable_trainer();
  if (c.length_unit() == "epochs") {
    t->set_epochs(static_cast<int32_t>(c.max_length()));
    t->set_max_steps(0);
    return;
  }
  t->set_max_steps(c.max_length());
  if (t->epochs() == 0) {
    t->set_epochs(static_cast<int32_t>(std::min(c.max_length(), kMaxTrainerEpochs)));
  }
}

std::string Truncated(std::string name) {
  if (name.size() > kMaxNameBytes) name.resize(kMaxNameBytes);
  return name;
}

// The trial's job, not yet validated.
absl::StatusOr<SearchTrialJob> BuildTrial(const v1::SearchSpec& spec, int64_t search_id,
                                          int32_t index) {
  const v1::SearchConfig& c = spec.search();
  SearchTrialJob trial;
  trial.index = index;
  trial.parameters = SearchTrialParameters(c, index);
  v1::JobSpec& job = trial.job;
  job = spec.base();
  for (const auto& [key, value] : trial.parameters) {
    absl::Status applied = ApplyValue(job, key, value);
    if (!applied.ok()) return TrialError(trial, applied);
  }
  SetLength(c, job);
  std::string dir = job.trainer().checkpoint_dir();
  if (!dir.empty()) {
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    job.mutable_trainer()->set_checkpoint_dir(
        absl::StrCat(dir == "/" ? "" : dir, "/search-", search_id, "/trial-", index));
  }
  job.set_name(Truncated(absl::StrCat(spec.name(), "/t", index)));
  return trial;
}

// Every value a parameter may take, applied to trial 0 alone, so that a value
// that random draws seldom is refused now, naming its key: each choice, and
// both bounds of a range.
void CheckParameterValues(const v1::SearchSpec& spec, const SpecLimits& limits,
                          std::vector<std::string>& errors) {
  absl::StatusOr<SearchTrialJob> first = BuildTrial(spec, 0, 0);
  if (!first.ok() || !ValidateJobSpec(first->job, limits).ok()) return;
  for (const v1::SearchParameter& p : spec.search().parameters()) {
    std::vector<std::pair<std::string, std::string>> candidates;  // (path, value)
    const std::string path = absl::StrCat("search.parameters.", p.key());
    for (int i = 0; i < p.choice_size(); ++i) {
      candidates.emplace_back(absl::StrCat(path, ".choice[", i, "]"), p.choice(i));
    }
    for (int i = 0; i < p.int_range_size(); ++i) {
      candidates.emplace_back(absl::StrCat(path, ".int[", i, "]"),
                              absl::StrCat(p.int_range(i)));
    }
    for (int i = 0; i < p.uniform_size(); ++i) {
      candidates.emplace_back(absl::StrCat(path, ".uniform[", i, "]"),
                              FormatNumber(p.uniform(i)));
    }
    for (int i = 0; i < p.loguniform_size(); ++i) {
      candidates.emplace_back(absl::StrCat(path, ".loguniform[", i, "]"),
                              FormatNumber(p.loguniform(i)));
    }
    for (const auto& [where, value] : candidates) {
      v1::JobSpec job = first->job;
      absl::Status s = ApplyValue(job, p.key(), value);
      if (s.ok()) s = ValidateJobSpec(job, limits);
      if (!s.ok()) errors.push_back(absl::StrCat(where, " (", value, "): ", s.message()));
    }
  }
}

}  // namespace

absl::StatusOr<v1::SearchSpec> ParseSearchSpec(const std::string& yaml_text) {
  RETURN_IF_ERROR(CheckSpecText(yaml_text));
  v1::SearchSpec spec;
  try {
    YAML::Node root = YAML::Load(yaml_text);
    ASSIGN_OR_RETURN(YAML::Node parameters, TakeParameters(root));
    if (!parameters.IsDefined()) {
      RETURN_IF_ERROR(ParseSpecMessage(yaml_text, &spec));
      return spec;
    }
    YAML::Emitter rest;
    rest << root;
    RETURN_IF_ERROR(ParseSpecMessage(absl::StrCat(rest.c_str(), "\n"), &spec));
    RETURN_IF_ERROR(ParseParameters(parameters, spec.mutable_search()));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("spec: malformed YAML: ", e.msg));
  }
  return spec;
}

int32_t SearchTrialCount(const v1::SearchSpec& spec) {
  if (spec.search().method() == "grid") {
    return static_cast<int32_t>(GridSize(spec.search()));
  }
  return spec.search().max_trials();
}

absl::StatusOr<SearchTrialJob> MakeSearchTrial(const v1::SearchSpec& spec,
                                               int64_t search_id, int32_t index,
                                               const SpecLimits& limits) {
  ASSIGN_OR_RETURN(SearchTrialJob trial, BuildTrial(spec, search_id, index));
  absl::Status valid = ValidateJobSpec(trial.job, limits);
  if (!valid.ok()) return TrialError(trial, valid);
  return trial;
}

absl::StatusOr<std::vector<SearchTrialJob>> ExpandSearch(const v1::SearchSpec& spec,
                                                         const SpecLimits& limits) {
  RETURN_IF_ERROR(CheckSearchFields(spec));
  std::vector<std::string> errors;
  CheckParameterValues(spec, limits, errors);
  if (!errors.empty()) return absl::InvalidArgumentError(absl::StrJoin(errors, "; "));
  std::vector<SearchTrialJob> trials;
  const int32_t count = SearchTrialCount(spec);
  for (int32_t i = 0; i < count; ++i) {
    ASSIGN_OR_RETURN(SearchTrialJob trial, MakeSearchTrial(spec, 0, i, limits));
    trials.push_back(std::move(trial));
  }
  return trials;
}

absl::Status ValidateSearchSpec(const v1::SearchSpec& spec, const SpecLimits& limits) {
  return ExpandSearch(spec, limits).status();
}

absl::StatusOr<v1::SearchSpec> ParseAndValidateSearchSpec(const std::string& yaml_text,
                                                          const SpecLimits& limits) {
  ASSIGN_OR_RETURN(v1::SearchSpec spec, ParseSearchSpec(yaml_text));
  RETURN_IF_ERROR(ValidateSearchSpec(spec, limits));
  return spec;
}

std::vector<double> SearchRungLengths(const v1::SearchConfig& config) {
  const double max_length = static_cast<double>(config.max_length());
  if (config.method() != "asha") return {max_length};
  const v1::AshaConfig& a = config.asha();
  const int eta = SearchReductionFactor(config);
  const int rungs = a.max_rungs() > 0 ? a.max_rungs() : kDefaultRungs;
  const double min_length = a.min_length() > 0 ? static_cast<double>(a.min_length())
                                               : max_length / std::pow(eta, rungs - 1);
  std::vector<double> lengths;
  for (int k = 0; k < kMaxRungs * 4; ++k) {
    const double length = min_length * std::pow(eta, k);
    if (length >= max_length * (1 - kLengthTolerance)) break;
    lengths.push_back(length);
  }
  lengths.push_back(max_length);
  if (a.max_rungs() > 0 && lengths.size() > static_cast<size_t>(a.max_rungs())) {
    lengths.erase(lengths.begin(), lengths.end() - a.max_rungs());
  }
  return lengths;
}

namespace {

// The longest warmup, in steps, that a trial of the spec may draw: the base's,
// or the largest value a searched trainer.warmup_steps can take.
int64_t LongestWarmup(const v1::SearchSpec& spec) {
  int64_t longest =
      spec.base().trainer().has_warmup_steps() ? spec.base().trainer().warmup_steps() : 0;
  for (const v1::SearchParameter& p : spec.search().parameters()) {
    if (p.key() != "warmup_steps") continue;
    for (const std::string& value : p.choice()) {
      int64_t steps = 0;
      if (absl::SimpleAtoi(value, &steps)) longest = std::max(longest, steps);
    }
    if (p.int_range_size() == 2) longest = std::max(longest, p.int_range(1));
    if (p.uniform_size() == 2) {
      longest = std::max(longest, static_cast<int64_t>(p.uniform(1)));
    }
    if (p.loguniform_size() == 2) {
      longest = std::max(longest, static_cast<int64_t>(p.loguniform(1)));
    }
  }
  return longest;
}

// About how many steps the first rung trains, or 0 where that is not known:
// lengths in epochs need the base's train_subset to count an epoch's steps.
double FirstRungSteps(const v1::SearchSpec& spec) {
  const double first = SearchRungLengths(spec.search()).front();
  if (spec.search().length_unit() != "epochs") return first;
  const v1::TrainerConfig& t = spec.base().trainer();
  if (t.train_subset() <= 0 || t.batch_size() <= 0) return 0;
  const double images = std::floor(static_cast<double>(t.train_subset()) *
                                   (1 - std::clamp(t.val_fraction(), 0.0, 1.0)));
  const double per_step =
      static_cast<double>(t.batch_size()) * std::max(1, spec.base().world_size());
  return first * std::floor(images / per_step);
}

}  // namespace

std::vector<std::string> SearchSpecWarnings(const v1::SearchSpec& spec) {
  if (spec.search().method() != "asha") return {};
  const int64_t warmup = LongestWarmup(spec);
  const double first = FirstRungSteps(spec);
  if (warmup <= 0 || first <= 0 || static_cast<double>(warmup) <= first) return {};
  return {absl::StrCat(
      "search.asha: the first rung ends after about ", std::llround(first),
      " steps, before the warmup of trials with warmup_steps up to ", warmup,
      " ends; they are ranked there while still warming up and are likely stopped "
      "however well they would end. Give search.asha.min_length at least the "
      "longest warmup, or search shorter warmups (docs/search.md, \"Short first "
      "rungs\")")};
}

v1::JobSpec SearchRungJob(const SearchTrialJob& trial, const std::vector<double>& rungs,
                          int32_t rung) {
  v1::JobSpec job = trial.job;
  const int32_t last = static_cast<int32_t>(rungs.size()) - 1;
  if (last > 0) {
    const std::string suffix = absl::StrCat("-r", rung);
    std::string name = job.name();
    if (name.size() + suffix.size() > kMaxNameBytes) {
      name.resize(kMaxNameBytes - suffix.size());
    }
    job.set_name(name + suffix);
  }
  if (rung > 0) job.mutable_trainer()->set_resume(true);
  if (rung < last) job.mutable_trainer()->set_stop_fraction(rungs[rung] / rungs.back());
  return job;
}

std::vector<std::pair<std::string, std::string>> SearchTrialParameters(
    const v1::SearchConfig& config, int32_t index) {
  return config.method() == "grid" ? GridValues(config, index)
                                   : SampledValues(config, index);
}

int32_t SearchReductionFactor(const v1::SearchConfig& config) {
  return config.asha().reduction_factor() > 0 ? config.asha().reduction_factor()
                                              : kDefaultReductionFactor;
}

bool SearchMaximizes(const v1::SearchConfig& config) {
  if (config.mode() == "max") return true;
  if (config.mode() == "min") return false;
  const SearchMetric* metric = FindMetric(config.metric());
  return metric == nullptr || metric->maximize;
}

}  // namespace tessera
