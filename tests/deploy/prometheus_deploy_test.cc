// deploy/prometheus and deploy/grafana: promtool accepts the alert rules and
// the scrape example, the rules' unit tests (tests/deploy/tessera-rules.test.yml)
// pass, and the rules and the dashboard name only metrics that the
// coordinator's /metrics page serves.
#include <regex>
#include <set>
#include <string>

#include "common/device_figures.h"
#include "coordinator/api/metrics_page.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/promtool.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

std::string Deploy(const std::string& path) {
  return testing::SourceDir() + "/deploy/" + path;
}

// Families served by a page of a cluster with every kind of figure.
std::set<std::string> ServedFamilies() {
  ClusterMetrics m;
  m.jobs_by_state = {{"queued", 1}};
  m.jobs_ended = {{"failed", 1}};
  m.workers_by_state = {{"dead", 1}};
  m.slots["gpu"] = {1, 1};
  m.worker_gpus["w"] = {GpuReading{.id = "0",
                                   .utilization_percent = 1,
                                   .memory_used_bytes = 1,
                                   .memory_total_bytes = 2,
                                   .temperature_celsius = 40,
                                   .power_watts = 100}};
  ClusterMetrics::RunningJob job;
  job.id = 1;
  job.figures[0] = {{kImagesPerSecFigure, 1}, {kStepTimeMsFigure, 1}};
  for (std::string_view figure : kDeviceFigures) job.figures[0][std::string(figure)] = 1;
  m.running.push_back(job);
  m.slurm_allocations[{"p", "running"}] = 1;
  const std::string page = RenderMetricsPage(
      m,
      DatabaseFigures{
          .size_bytes = 1, .max_bytes = 2, .disk_free_bytes = 3, .bytes_over_budget = 4});
  std::set<std::string> families;
  const std::regex type_line("# TYPE (\\w+) ");
  for (auto it = std::sregex_iterator(page.begin(), page.end(), type_line);
       it != std::sregex_iterator(); ++it) {
    families.insert((*it)[1]);
  }
  return families;
}

// Every tessera_* metric `text` names, histogram suffixes removed.
std::set<std::string> NamedMetrics(const std::string& text) {
  std::set<std::string> names;
  const std::regex name("tessera_[a-z_]+");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), name);
       it != std::sregex_iterator(); ++it) {
    std::string n = it->str();
    for (const char* suffix : {"_bucket", "_count", "_sum"}) {
      if (n.ends_with(suffix) && n.find("_seconds") != std::string::npos) {
        n.resize(n.size() - std::string(suffix).size());
      }
    }
    names.insert(n);
  }
  return names;
}

TEST(PrometheusDeployTest, PromtoolAcceptsTheAlertRules) {
  if (std::string why = testing::PromtoolMissing(); !why.empty()) {
    if (testing::PromtoolRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  testing::PromtoolResult checked = testing::RunPromtool(
      "check rules '" + Deploy("prometheus/tessera-rules.yml") + "'");
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_NE(checked.output.find("SUCCESS: 7 rules found"), std::string::npos)
      << checked.output;
}

// When an alert fires and what it says, on made-up series: the database over
// its budget (TesseraDatabaseOverBudget) fires after 15 minutes over, and
// stops once within it.
TEST(PrometheusDeployTest, PromtoolRulesUnitTestsPass) {
  if (std::string why = testing::PromtoolMissing(); !why.empty()) {
    if (testing::PromtoolRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  testing::PromtoolResult checked = testing::RunPromtool(
      "test rules '" + testing::SourceDir() + "/tests/deploy/tessera-rules.test.yml'");
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
  EXPECT_NE(checked.output.find("SUCCESS"), std::string::npos) << checked.output;
}

TEST(PrometheusDeployTest, PromtoolAcceptsTheScrapeExample) {
  if (std::string why = testing::PromtoolMissing(); !why.empty()) {
    if (testing::PromtoolRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  testing::PromtoolResult checked = testing::RunPromtool(
      "check config --syntax-only '" + Deploy("prometheus/prometheus.yml") + "'");
  EXPECT_EQ(checked.exit_code, 0) << checked.output;
}

TEST(PrometheusDeployTest, RulesAndDashboardNameOnlyServedMetrics) {
  const std::set<std::string> served = ServedFamilies();
  std::string exprs = testing::ReadFile(Deploy("prometheus/tessera-rules.yml"));
  const nlohmann::json dashboard =
      nlohmann::json::parse(testing::ReadFile(Deploy("grafana/tessera.json")));
  ASSERT_TRUE(dashboard.contains("panels"));
  for (const auto& panel : dashboard["panels"]) {
    for (const auto& target : panel["targets"]) {
      exprs += "\n" + target["expr"].get<std::string>();
    }
  }
  const std::set<std::string> named = NamedMetrics(exprs);
  EXPECT_GE(named.size(), 10u);
  for (const std::string& name : named) {
    EXPECT_TRUE(served.contains(name)) << name << " is not on the /metrics page";
  }
}

}  // namespace
}  // namespace tessera
