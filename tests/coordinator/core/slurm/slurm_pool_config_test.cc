// The Slurm pool file (coordinator/core/slurm/slurm_pool_config.h): every field,
// the defaults, and the refusals, each naming the line and the field.
#include "coordinator/core/slurm/slurm_pool_config.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tessera {
namespace {

// The status message of a parse that must fail.
std::string ErrorOf(const std::string& yaml) {
  absl::StatusOr<std::vector<SlurmPoolConfig>> pools = ParseSlurmPools(yaml);
  EXPECT_FALSE(pools.ok()) << "parsed:\n" << yaml;
  if (pools.ok()) return "";
  EXPECT_EQ(pools.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(pools.status().message());
}

TEST(SlurmPoolConfigTest, ParsesEveryField) {
  absl::StatusOr<std::vector<SlurmPoolConfig>> pools = ParseSlurmPools(R"(
pools:
  - name: gpu
    partition: a100
    account: vision-lab
    qos: normal
    max_nodes: 4
    cpus_per_node: 16
    gpus_per_node: 4
    time_limit: 12h
    idle_timeout: 10m
    register_timeout: 2m
    max_allocations: 2
    submit_as: service
    signal: B:USR1@300
    output: /shared/tessera/slurm/%u-%j.out
    sbatch_options: ["--constraint=a100-80g", "--mem=0"]
    node_dir: /scratch
    worker:
      path: /opt/tessera/bin/tessera-worker
      args: ["--tls-ca", "/etc/tessera/ca.pem"]
  - name: cpu
)");
  ASSERT_TRUE(pools.ok()) << pools.status();
  ASSERT_EQ(pools->size(), 2u);
  const SlurmPoolConfig& g = (*pools)[0];
  EXPECT_EQ(g.name, "gpu");
  EXPECT_EQ(g.partition, "a100");
  EXPECT_EQ(g.account, "vision-lab");
  EXPECT_EQ(g.qos, "normal");
  EXPECT_EQ(g.max_nodes, 4);
  EXPECT_EQ(g.cpus_per_node, 16);
  EXPECT_EQ(g.gpus_per_node, 4);
  EXPECT_EQ(g.slots_per_node(), 4);
  EXPECT_EQ(g.time_limit, absl::Hours(12));
  EXPECT_EQ(g.idle_timeout, absl::Minutes(10));
  EXPECT_EQ(g.register_timeout, absl::Minutes(2));
  EXPECT_EQ(g.max_allocations, 2);
  EXPECT_FALSE(g.submit_as_owner);
  EXPECT_EQ(g.signal, "B:USR1@300");
  EXPECT_EQ(g.output, "/shared/tessera/slurm/%u-%j.out");
  EXPECT_EQ(g.sbatch_options,
            (std::vector<std::string>{"--constraint=a100-80g", "--mem=0"}));
  EXPECT_EQ(g.node_dir, "/scratch");
  EXPECT_EQ(g.worker_path, "/opt/tessera/bin/tessera-worker");
  EXPECT_EQ(g.worker_args, (std::vector<std::string>{"--tls-ca", "/etc/tessera/ca.pem"}));
  EXPECT_TRUE(ValidateSlurmPool(g).ok());
}

TEST(SlurmPoolConfigTest, OmittedFieldsTakeTheDefaults) {
  absl::StatusOr<std::vector<SlurmPoolConfig>> pools =
      ParseSlurmPools("pools:\n  - name: cpu\n");
  ASSERT_TRUE(pools.ok()) << pools.status();
  const SlurmPoolConfig& p = (*pools)[0];
  const SlurmPoolConfig defaults;
  EXPECT_EQ(p.partition, "");
  EXPECT_EQ(p.max_nodes, 1);
  EXPECT_EQ(p.cpus_per_node, 1);
  EXPECT_EQ(p.gpus_per_node, 0);
  EXPECT_EQ(p.slots_per_node(), 1);
  EXPECT_EQ(p.time_limit, absl::Hours(1));
  EXPECT_EQ(p.idle_timeout, absl::Minutes(5));
  EXPECT_EQ(p.signal, "USR1@120");
  EXPECT_EQ(p.output, "/dev/null");
  EXPECT_TRUE(p.submit_as_owner);
  EXPECT_EQ(p.worker_path, defaults.worker_path);
  EXPECT_EQ(p.node_dir, "/tmp");
}

TEST(SlurmPoolConfigTest, UnknownFieldIsRefusedWithItsLine) {
  const std::string e = ErrorOf("pools:\n  - name: cpu\n    partiton: debug\n");
  EXPECT_TRUE(absl::StrContains(e, "line 3")) << e;
  EXPECT_TRUE(absl::StrContains(e, "unknown field 'partiton'")) << e;
  EXPECT_TRUE(
      absl::StrContains(ErrorOf("pool:\n  - name: cpu\n"), "unknown field 'pool'"));
  EXPECT_TRUE(
      absl::StrContains(ErrorOf("pools:\n  - name: cpu\n    worker:\n      pth: /x\n"),
                        "unknown field 'pth'"));
}

TEST(SlurmPoolConfigTest, BadValuesNameTheField) {
  std::string e = ErrorOf("pools:\n  - name: cpu\n    idle_timeout: soon\n");
  EXPECT_TRUE(absl::StrContains(e, "line 3: pools[0].idle_timeout: expected a duration"))
      << e;
  e = ErrorOf("pools:\n  - name: cpu\n    max_nodes: 0\n");
  EXPECT_TRUE(absl::StrContains(e, "pools[0].max_nodes: must be in [1, 10000], got 0"))
      << e;
  e = ErrorOf("pools:\n  - name: cpu\n    cpus_per_node: two\n");
  EXPECT_TRUE(absl::StrContains(e, "expected a whole number, got 'two'")) << e;
  e = ErrorOf("pools:\n  - name: cpu\n    submit_as: alice\n");
  EXPECT_TRUE(absl::StrContains(e, "expected owner or service")) << e;
  e = ErrorOf("pools:\n  - name: cpu\n    signal: USR1\n");
  EXPECT_TRUE(absl::StrContains(e, "pools[0].signal")) << e;
  e = ErrorOf("pools:\n  - name: cpu\n    worker:\n      path: tessera-worker\n");
  EXPECT_TRUE(absl::StrContains(e, "pools[0].worker.path: must be an absolute path"))
      << e;
  e = ErrorOf("pools:\n  - name: Big Pool\n");
  EXPECT_TRUE(absl::StrContains(e, "pools[0].name")) << e;
  e = ErrorOf("pools:\n  - name: cpu\n    partition: \"debug;rm\"\n");
  EXPECT_TRUE(absl::StrContains(e, "pools[0].partition: must be a Slurm name")) << e;
  e = ErrorOf("pools:\n  - name: cpu\n    output: /shared/my logs/%j.out\n");
  EXPECT_TRUE(absl::StrContains(e, "without spaces")) << e;
}

TEST(SlurmPoolConfigTest, ValuesCannotAddLinesToTheScript) {
  std::string e = ErrorOf(
      "pools:\n  - name: cpu\n    sbatch_options: [\"--mem=0\\n#SBATCH --uid=0\"]\n");
  EXPECT_TRUE(absl::StrContains(e, "one line")) << e;
  e = ErrorOf("pools:\n  - name: cpu\n    worker:\n      args: [\"x\\nrm -rf /\"]\n");
  EXPECT_TRUE(absl::StrContains(e, "one line")) << e;
}

TEST(SlurmPoolConfigTest, OptionsThePoolSetsItselfAreRefused) {
  std::string e = ErrorOf("pools:\n  - name: cpu\n    sbatch_options: [--requeue]\n");
  EXPECT_TRUE(absl::StrContains(e, "--requeue is set by the pool")) << e;
  e = ErrorOf("pools:\n  - name: cpu\n    sbatch_options: [\"--time=10\"]\n");
  EXPECT_TRUE(absl::StrContains(e, "use time_limit")) << e;
  e = ErrorOf("pools:\n  - name: cpu\n    sbatch_options: [\"-p\", \"debug\"]\n");
  EXPECT_TRUE(absl::StrContains(e, "use partition")) << e;
  e = ErrorOf("pools:\n  - name: cpu\n    sbatch_options: [mem]\n");
  EXPECT_TRUE(absl::StrContains(e, "must be one sbatch option")) << e;
  e = ErrorOf(
      "pools:\n  - name: cpu\n    worker:\n      args: [\"--coordinator=evil:1\"]\n");
  EXPECT_TRUE(absl::StrContains(e, "--coordinator is set by the pool")) << e;
}

TEST(SlurmPoolConfigTest, FileLevelMistakesAreRefused) {
  EXPECT_TRUE(absl::StrContains(ErrorOf(""), "expected a mapping")) << ErrorOf("");
  EXPECT_TRUE(absl::StrContains(ErrorOf("pools: []\n"), "non-empty list"));
  EXPECT_TRUE(
      absl::StrContains(ErrorOf("pools:\n  - partition: debug\n"), "name is required"));
  EXPECT_TRUE(absl::StrContains(ErrorOf("pools:\n  - name: a\n  - name: a\n"),
                                "pool 'a' is defined twice"));
  EXPECT_TRUE(absl::StrContains(ErrorOf("pools: [\n"), "malformed YAML"));
}

TEST(SlurmPoolConfigTest, ValidateRefusesABadPoolBuiltInCode) {
  SlurmPoolConfig pool;
  pool.name = "cpu";
  EXPECT_TRUE(ValidateSlurmPool(pool).ok());
  pool.sbatch_options = {"--signal=KILL@1"};
  EXPECT_FALSE(ValidateSlurmPool(pool).ok());
  pool.sbatch_options = {};
  pool.worker_args = {"--name=x"};
  EXPECT_FALSE(ValidateSlurmPool(pool).ok());
  pool.worker_args = {};
  pool.output = "relative.out";
  EXPECT_FALSE(ValidateSlurmPool(pool).ok());
}

}  // namespace
}  // namespace tessera
