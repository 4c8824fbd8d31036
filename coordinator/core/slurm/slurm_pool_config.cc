#include "coordinator/core/slurm/slurm_pool_config.h"

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace tessera {

namespace {

constexpr size_t kMaxPoolFileBytes = 1 << 20;
constexpr size_t kMaxValueBytes = 4096;
constexpr size_t kMaxListEntries = 256;

// sbatch options the pool writes itself (from its fields, or because the
// coordinator relies on them); a pool's sbatch_options may not repeat them.
const std::map<std::string, std::string>& ManagedSbatchOptions() {
  static const auto* kManaged = new std::map<std::string, std::string>{
      {"--partition", "partition"},
      {"-p", "partition"},
      {"--account", "account"},
      {"-A", "account"},
      {"--qos", "qos"},
      {"-q", "qos"},
      {"--nodes", "max_nodes"},
      {"-N", "max_nodes"},
      {"--ntasks", "(one task per node)"},
      {"-n", "(one task per node)"},
      {"--ntasks-per-node", "(one task per node)"},
      {"--cpus-per-task", "cpus_per_node"},
      {"-c", "cpus_per_node"},
      {"--gpus-per-node", "gpus_per_node"},
      {"--gpus", "gpus_per_node"},
      {"-G", "gpus_per_node"},
      {"--gres", "gpus_per_node"},
      {"--time", "time_limit"},
      {"-t", "time_limit"},
      {"--signal", "signal"},
      {"--output", "output"},
      {"-o", "output"},
      {"--error", "output"},
      {"-e", "output"},
      {"--job-name", "(set by the coordinator)"},
      {"-J", "(set by the coordinator)"},
      {"--requeue", "(the coordinator restarts jobs itself: --no-requeue)"},
      {"--no-requeue", "(always set)"},
      {"--wrap", "(the coordinator writes the script)"},
      {"--array", "(one allocation per submission)"},
      {"-a", "(one allocation per submission)"},
      {"--uid", "submit_as"},
      {"--gid", "submit_as"},
  };
  return *kManaged;
}

// tessera-worker flags the script sets for every worker of a pool.
const std::set<std::string>& ManagedWorkerFlags() {
  static const auto* kManaged = new std::set<std::string>{
      "--coordinator", "--pool", "--slurm-job-id", "--join-token-file", "--name",
      "--cpu-slots",   "--gpus", "--work-dir",     "--state-dir"};
  return *kManaged;
}

// One line of printable ASCII: what may go into an #SBATCH line or a quoted
// argument of the batch script.
bool IsPlainLine(const std::string& s) {
  for (char c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// What may follow "#SBATCH ": sbatch splits those lines at whitespace and
// reads quotes, so neither may appear.
bool IsSbatchToken(const std::string& s) {
  if (!IsPlainLine(s)) return false;
  for (char c : s) {
    if (c == ' ' || c == '"' || c == '\'' || c == '\\') return false;
  }
  return true;
}

// Characters of Slurm partition, account and QoS names (lists with commas).
bool IsSlurmName(const std::string& s) {
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' &&
        c != '.' && c != ',' && c != ':' && c != '+') {
      return false;
    }
  }
  return !s.empty();
}

bool IsPoolName(const std::string& s) {
  if (s.empty() || s.size() > 32) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool ok = absl::ascii_islower(static_cast<unsigned char>(c)) ||
                    absl::ascii_isdigit(static_cast<unsigned char>(c)) ||
                    (i > 0 && (c == '-' || c == '_'));
    if (!ok) return false;
  }
  return true;
}

// "USR1@120", "B:USR1@120", "TERM@60".
bool IsSignalSpec(const std::string& s) {
  absl::string_view v = s;
  if (absl::StartsWith(v, "B:") || absl::StartsWith(v, "R:")) v.remove_prefix(2);
  const size_t at = v.find('@');
  if (at == 0 || at == absl::string_view::npos) return false;
  for (char c : v.substr(0, at)) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c))) return false;
  }
  int seconds = 0;
  return absl::SimpleAtoi(v.substr(at + 1), &seconds) && seconds >= 0 && seconds <= 65535;
}

// The option's name: "--mem=4G" -> "--mem", "-p" -> "-p".
std::string OptionName(const std::string& option) {
  return option.substr(0, option.find('='));
}

// Builds errors that name the line and the field path.
class Parser {
 public:
  absl::Status Error(const YAML::Node& node, const std::string& path,
                     const std::string& what) const {
    const YAML::Mark mark = node.Mark();
    if (mark.is_null()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
    return absl::InvalidArgumentError(
        absl::StrCat("line ", mark.line + 1, ": ", path, ": ", what));
  }

  std::string Shown(const YAML::Node& node) const {
    if (!node.IsDefined() || node.IsNull()) return "nothing";
    if (!node.IsScalar()) return node.IsSequence() ? "a list" : "a mapping";
    std::string text = node.Scalar();
    if (text.size() > 64) text = text.substr(0, 64) + "...";
    return absl::StrCat("'", absl::CEscape(text), "'");
  }

  absl::StatusOr<std::string> String(const YAML::Node& node,
                                     const std::string& path) const {
    if (!node.IsScalar())
      return Error(node, path, "expected a string, got " + Shown(node));
    const std::string& s = node.Scalar();
    if (s.size() > kMaxValueBytes) {
      return Error(node, path, absl::StrCat("longer than ", kMaxValueBytes, " bytes"));
    }
    if (!IsPlainLine(s)) {
      return Error(node, path, "must be one line of printable ASCII characters");
    }
    return s;
  }

  absl::StatusOr<int32_t> Int(const YAML::Node& node, const std::string& path, int32_t lo,
                              int32_t hi) const {
    int32_t v = 0;
    if (!node.IsScalar() || !absl::SimpleAtoi(node.Scalar(), &v)) {
      return Error(node, path, "expected a whole number, got " + Shown(node));
    }
    if (v < lo || v > hi) {
      return Error(node, path, absl::StrCat("must be in [", lo, ", ", hi, "], got ", v));
    }
    return v;
  }

  absl::StatusOr<bool> Bool(const YAML::Node& node, const std::string& path) const {
    if (node.IsScalar()) {
      const std::string s = absl::AsciiStrToLower(node.Scalar());
      if (s == "true") return true;
      if (s == "false") return false;
    }
    return Error(node, path, "expected true or false, got " + Shown(node));
  }

  absl::StatusOr<absl::Duration> Duration(const YAML::Node& node, const std::string& path,
                                          absl::Duration lo, absl::Duration hi) const {
    absl::Duration d;
    if (!node.IsScalar() || !absl::ParseDuration(node.Scalar(), &d)) {
      return Error(node, path,
                   "expected a duration such as 5m or 1h30m, got " + Shown(node));
    }
    if (d < lo || d > hi) {
      return Error(
          node, path,
          absl::StrCat("must be between ", absl::FormatDuration(lo), " and ",
                       absl::FormatDuration(hi), ", got ", absl::FormatDuration(d)));
    }
    return d;
  }

  absl::StatusOr<std::vector<std::string>> Strings(const YAML::Node& node,
                                                   const std::string& path) const {
    if (!node.IsSequence())
      return Error(node, path, "expected a list, got " + Shown(node));
    if (node.size() > kMaxListEntries) {
      return Error(node, path, absl::StrCat("more than ", kMaxListEntries, " entries"));
    }
    std::vector<std::string> out;
    for (size_t i = 0; i < node.size(); ++i) {
      ASSIGN_OR_RETURN(std::string s, String(node[i], absl::StrCat(path, "[", i, "]")));
      out.push_back(std::move(s));
    }
    return out;
  }

  // Calls `field(key, value)` for each entry of a mapping, refusing keys that
  // are not in `known`.
  absl::Status Fields(
      const YAML::Node& node, const std::string& path, const std::set<std::string>& known,
      const std::function<absl::Status(const std::string&, const YAML::Node&)>& field)
      const {
    if (!node.IsMap()) return Error(node, path, "expected a mapping, got " + Shown(node));
    for (const auto& kv : node) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
      if (!known.contains(key)) {
        return Error(kv.first, path,
                     absl::StrCat("unknown field '", key,
                                  "' (known: ", absl::StrJoin(known, ", "), ")"));
      }
      RETURN_IF_ERROR(field(key, kv.second));
    }
    return absl::OkStatus();
  }
};

// Parses one pool's mapping, one group of fields at a time.
class PoolParser {
 public:
  PoolParser(const Parser& p, std::string path) : p_(p), path_(std::move(path)) {}

  absl::StatusOr<SlurmPoolConfig> Parse(const YAML::Node& node) {
    static const std::set<std::string> kKeys = {
        "name",         "partition",        "account",         "qos",
        "max_nodes",    "cpus_per_node",    "gpus_per_node",   "time_limit",
        "idle_timeout", "register_timeout", "max_allocations", "submit_as",
        "signal",       "output",           "sbatch_options",  "worker",
        "node_dir"};
    RETURN_IF_ERROR(p_.Fields(node, path_, kKeys,
                              [this](const std::string& key, const YAML::Node& v) {
                                return Field(key, v, absl::StrCat(path_, ".", key));
                              }));
    if (!named_) return p_.Error(node, path_, "name is required");
    return pool_;
  }

 private:
  absl::Status Field(const std::string& key, const YAML::Node& v, const std::string& at) {
    if (key == "name" || key == "partition" || key == "account" || key == "qos") {
      return NameField(key, v, at);
    }
    if (key == "submit_as" || key == "signal" || key == "output" || key == "node_dir") {
      return TextField(key, v, at);
    }
    if (key == "sbatch_options") return SbatchOptions(v, at);
    if (key == "worker") return Worker(v, at);
    return SizeField(key, v, at);
  }

  // name, partition, account, qos.
  absl::Status NameField(const std::string& key, const YAML::Node& v,
                         const std::string& at) {
    ASSIGN_OR_RETURN(std::string s, p_.String(v, at));
    if (key == "name") {
      pool_.name = s;
      named_ = true;
      if (!IsPoolName(s)) {
        return p_.Error(
            v, at,
            "must be 1-32 characters: lowercase letters, digits, '-' and '_', "
            "starting with a letter or digit");
      }
      return absl::OkStatus();
    }
    if (!IsSlurmName(s)) {
      return p_.Error(v, at, "must be a Slurm name (letters, digits, _ - . , : +)");
    }
    (key == "partition" ? pool_.partition
     : key == "account" ? pool_.account
                        : pool_.qos) = s;
    return absl::OkStatus();
  }

  // The node counts and shapes, the allocation limit and the time limits.
  absl::Status SizeField(const std::string& key, const YAML::Node& v,
                         const std::string& at) {
    if (key == "max_nodes") {
      ASSIGN_OR_RETURN(pool_.max_nodes, p_.Int(v, at, 1, 10000));
    } else if (key == "cpus_per_node") {
      ASSIGN_OR_RETURN(pool_.cpus_per_node, p_.Int(v, at, 1, 4096));
    } else if (key == "gpus_per_node") {
      ASSIGN_OR_RETURN(pool_.gpus_per_node, p_.Int(v, at, 0, 64));
    } else if (key == "max_allocations") {
      ASSIGN_OR_RETURN(pool_.max_allocations, p_.Int(v, at, 0, 10000));
    } else if (key == "time_limit") {
      ASSIGN_OR_RETURN(pool_.time_limit,
                       p_.Duration(v, at, absl::Minutes(1), absl::Hours(24 * 365)));
    } else if (key == "idle_timeout") {
      ASSIGN_OR_RETURN(pool_.idle_timeout,
                       p_.Duration(v, at, absl::Seconds(1), absl::Hours(24 * 30)));
    } else if (key == "register_timeout") {
      ASSIGN_OR_RETURN(pool_.register_timeout,
                       p_.Duration(v, at, absl::Seconds(10), absl::Hours(24)));
    }
    return absl::OkStatus();
  }

  // submit_as, signal, output, node_dir.
  absl::Status TextField(const std::string& key, const YAML::Node& v,
                         const std::string& at) {
    ASSIGN_OR_RETURN(std::string s, p_.String(v, at));
    if (key == "submit_as") {
      if (s != "owner" && s != "service") {
        return p_.Error(v, at, absl::StrCat("expected owner or service, got '", s, "'"));
      }
      pool_.submit_as_owner = s == "owner";
    } else if (key == "signal") {
      if (!s.empty() && !IsSignalSpec(s)) {
        return p_.Error(v, at,
                        "expected [B:]SIGNAL@SECONDS as sbatch --signal takes it, e.g. "
                        "USR1@120, or \"\" for none");
      }
      pool_.signal = s;
    } else if (key == "output") {
      if (s.empty() || s[0] != '/' || !IsSbatchToken(s)) {
        return p_.Error(v, at,
                        "must be an absolute path without spaces or quotes (Slurm "
                        "patterns such as %j allowed)");
      }
      pool_.output = s;
    } else if (key == "node_dir") {
      if (s.empty() || s[0] != '/') return p_.Error(v, at, "must be an absolute path");
      pool_.node_dir = s;
    }
    return absl::OkStatus();
  }

  absl::Status SbatchOptions(const YAML::Node& v, const std::string& at) {
    ASSIGN_OR_RETURN(pool_.sbatch_options, p_.Strings(v, at));
    for (size_t i = 0; i < pool_.sbatch_options.size(); ++i) {
      const std::string& o = pool_.sbatch_options[i];
      const std::string oat = absl::StrCat(at, "[", i, "]");
      if (o.size() < 2 || o[0] != '-' || !IsSbatchToken(o)) {
        return p_.Error(v[i], oat,
                        "must be one sbatch option without spaces or quotes, such as "
                        "--mem=0");
      }
      auto managed = ManagedSbatchOptions().find(OptionName(o));
      if (managed != ManagedSbatchOptions().end()) {
        return p_.Error(
            v[i], oat,
            absl::StrCat(OptionName(o), " is set by the pool: use ", managed->second));
      }
    }
    return absl::OkStatus();
  }

  // worker: {path, args}.
  absl::Status Worker(const YAML::Node& v, const std::string& at) {
    return p_.Fields(v, at, {"path", "args"},
                     [&](const std::string& key, const YAML::Node& w) -> absl::Status {
                       const std::string wat = absl::StrCat(at, ".", key);
                       if (key == "path") {
                         ASSIGN_OR_RETURN(pool_.worker_path, p_.String(w, wat));
                         if (pool_.worker_path.empty() || pool_.worker_path[0] != '/') {
                           return p_.Error(w, wat, "must be an absolute path");
                         }
                         return absl::OkStatus();
                       }
                       ASSIGN_OR_RETURN(pool_.worker_args, p_.Strings(w, wat));
                       for (size_t i = 0; i < pool_.worker_args.size(); ++i) {
                         const std::string flag = OptionName(pool_.worker_args[i]);
                         if (ManagedWorkerFlags().contains(flag)) {
                           return p_.Error(w[i], absl::StrCat(wat, "[", i, "]"),
                                           flag + " is set by the pool for every worker");
                         }
                       }
                       return absl::OkStatus();
                     });
  }

  const Parser& p_;
  const std::string path_;
  SlurmPoolConfig pool_;
  bool named_ = false;
};

}  // namespace

absl::Status ValidateSlurmPool(const SlurmPoolConfig& pool) {
  // The parser's rules, on the struct (messages name the pool, not a line).
  if (!IsPoolName(pool.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool name '", pool.name, "' is invalid"));
  }
  for (const std::string* s : {&pool.partition, &pool.account, &pool.qos}) {
    if (!s->empty() && !IsSlurmName(*s)) {
      return absl::InvalidArgumentError(
          absl::StrCat("pool ", pool.name, ": '", *s, "' is not a Slurm name"));
    }
  }
  if (pool.max_nodes < 1 || pool.cpus_per_node < 1 || pool.gpus_per_node < 0 ||
      pool.max_allocations < 0 || pool.time_limit < absl::Minutes(1) ||
      pool.idle_timeout <= absl::ZeroDuration() ||
      pool.register_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool ", pool.name, ": value out of range"));
  }
  if (!pool.signal.empty() && !IsSignalSpec(pool.signal)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool ", pool.name, ": bad signal '", pool.signal, "'"));
  }
  std::vector<const std::string*> lines = {&pool.output, &pool.worker_path,
                                           &pool.node_dir};
  for (const std::string& s : pool.sbatch_options) lines.push_back(&s);
  for (const std::string& s : pool.worker_args) lines.push_back(&s);
  for (const std::string* s : lines) {
    if (!IsPlainLine(*s)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pool ", pool.name, ": a value is not one line of printable ASCII"));
    }
  }
  for (const std::string* path : {&pool.output, &pool.worker_path, &pool.node_dir}) {
    if (path->empty() || (*path)[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("pool ", pool.name, ": '", *path, "' is not an absolute path"));
    }
  }
  if (!IsSbatchToken(pool.output)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pool ", pool.name, ": output '", pool.output, "' has spaces or quotes"));
  }
  for (const std::string& o : pool.sbatch_options) {
    if (o.size() < 2 || o[0] != '-' || !IsSbatchToken(o) ||
        ManagedSbatchOptions().contains(OptionName(o))) {
      return absl::InvalidArgumentError(
          absl::StrCat("pool ", pool.name, ": sbatch option '", o, "' is not allowed"));
    }
  }
  for (const std::string& a : pool.worker_args) {
    if (ManagedWorkerFlags().contains(OptionName(a))) {
      return absl::InvalidArgumentError(
          absl::StrCat("pool ", pool.name, ": worker flag '", a, "' is set by the pool"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SlurmPoolConfig>> ParseSlurmPools(
    const std::string& yaml_text) {
  if (yaml_text.size() > kMaxPoolFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slurm pools: file is ", yaml_text.size(), " bytes, limit ", kMaxPoolFileBytes));
  }
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) {
      return absl::InvalidArgumentError(
          absl::StrCat("slurm pools: malformed YAML: ", e.msg));
    }
    return absl::InvalidArgumentError(absl::StrCat("slurm pools: malformed YAML at line ",
                                                   e.mark.line + 1, ": ", e.msg));
  }
  Parser p;
  std::vector<SlurmPoolConfig> pools;
  absl::Status status = [&]() -> absl::Status {
    RETURN_IF_ERROR(p.Fields(
        root, "slurm pools", {"pools"},
        [&](const std::string&, const YAML::Node& list) -> absl::Status {
          if (!list.IsSequence() || list.size() == 0) {
            return p.Error(list, "pools", "expected a non-empty list of pools");
          }
          if (list.size() > kMaxSlurmPools) {
            return p.Error(list, "pools",
                           absl::StrCat("more than ", kMaxSlurmPools, " pools"));
          }
          std::set<std::string> names;
          for (size_t i = 0; i < list.size(); ++i) {
            ASSIGN_OR_RETURN(
                SlurmPoolConfig pool,
                PoolParser(p, absl::StrCat("pools[", i, "]")).Parse(list[i]));
            if (!names.insert(pool.name).second) {
              return p.Error(list[i], absl::StrCat("pools[", i, "].name"),
                             absl::StrCat("pool '", pool.name, "' is defined twice"));
            }
            pools.push_back(std::move(pool));
          }
          return absl::OkStatus();
        }));
    if (pools.empty()) return absl::InvalidArgumentError("slurm pools: no pools defined");
    return absl::OkStatus();
  }();
  if (!status.ok()) return status;
  return pools;
}

}  // namespace tessera
