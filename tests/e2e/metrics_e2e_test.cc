// /metrics end to end: a real tessera-coordinator, tessera-worker and
// tessera-train. While a job runs, the page a scraper reads with a metrics
// token shows it (images/s, step time, ranks) and the worker; after it ends,
// the job's counters; promtool accepts the page each time; a user token is
// refused.
#include <sys/wait.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "tests/e2e/cluster_fixture.h"
#include "tests/testing/promtool.h"
#include "tests/testing/test_util.h"

namespace tessera {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;

class MetricsE2eTest : public ClusterTest {
 protected:
  // A token of kind `metrics`, made with the coordinator's own tool.
  std::string MetricsToken() {
    auto p = ChildProcess::Start(
        {testing::BinDir() + "/tessera-coordinator", "--db", dir_.File("tessera.db"),
         "token", "create", "--kind", "metrics", "--name", "e2e-scraper"},
        dir_.File("token-metrics.out"));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return "";
    std::optional<int> status = (*p)->Wait(absl::Seconds(30));
    EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << (*p)->Log();
    std::string token = (*p)->Log();
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r'))
      token.pop_back();
    return token;
  }

  httplib::Result Scrape(const std::string& token) {
    httplib::Client client("127.0.0.1", http_port_);
    client.set_read_timeout(5, 0);
    return client.Get("/metrics", {{"Authorization", "Bearer " + token}});
  }

  void ExpectPromtoolAccepts(const std::string& page) {
    if (std::string why = testing::PromtoolMissing(); !why.empty()) {
      if (testing::PromtoolRequired()) FAIL() << why;
      return;
    }
    const testing::PromtoolResult checked = testing::RunPromtool("check metrics", page);
    EXPECT_EQ(checked.exit_code, 0) << checked.output << "\n" << page;
  }

  int http_port_ = 0;
};

TEST_F(MetricsE2eTest, AScraperSeesARunningJobAndItsCountersAfterwards) {
  EnsureTokens();
  const std::string scraper = MetricsToken();
  StartCoordinator(0, {"--http-port-file", dir_.File("http-port")});
  absl::StatusOr<int> http =
      testing::WaitForPortFile(dir_.File("http-port"), absl::Seconds(30));
  ASSERT_TRUE(http.ok());
  http_port_ = *http;
  StartWorker("w1", port_);
  WaitForWorkers(1);

  httplib::Result refused = Scrape(user_token_);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 403);

  const int64_t id = Submit(R"(name: scraped
world_size: 1
trainer:
  model: vit-micro
  dataset: synthetic
  epochs: 1
  max_steps: 400
  batch_size: 16
  train_subset: 6400
  test_subset: 64
  metrics_every: 5
  device: cpu
)");
  // While it runs: its own series, labelled with its id, name and owner.
  std::string running;
  const absl::Time until = absl::Now() + absl::Minutes(2);
  while (absl::Now() < until) {
    httplib::Result page = Scrape(scraper);
    ASSERT_TRUE(page);
    ASSERT_EQ(page->status, 200) << page->body;
    if (absl::StrContains(page->body, "tessera_job_images_per_second{")) {
      running = page->body;
      break;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_FALSE(running.empty()) << DumpLogs();
  EXPECT_THAT(running,
              ContainsRegex(absl::StrCat("tessera_job_images_per_second\\{[^}]*job_id=\"",
                                         id, "\"[^}]*name=\"scraped\"")));
  EXPECT_THAT(running, ContainsRegex("tessera_job_ranks\\{[^}]*\\} 1"));
  EXPECT_THAT(running, ContainsRegex("tessera_workers\\{state=\"alive\"\\} 1"));
  EXPECT_THAT(running, HasSubstr("tessera_rank_peak_rss_bytes{"));
  ExpectPromtoolAccepts(running);

  const v1::Job done = WaitForEnd(id, absl::Minutes(4));
  ASSERT_EQ(done.state(), v1::JOB_STATE_SUCCEEDED) << done.reason() << DumpLogs();
  httplib::Result after = Scrape(scraper);
  ASSERT_TRUE(after);
  ASSERT_EQ(after->status, 200);
  EXPECT_THAT(
      after->body,
      ContainsRegex("tessera_jobs_ended_total\\{state=\"[a-z_]*succeeded\"\\} 1"));
  EXPECT_THAT(after->body, ContainsRegex("tessera_metric_rows_written_total [1-9]"));
  EXPECT_THAT(after->body, ::testing::Not(HasSubstr("tessera_job_images_per_second{")));
  ExpectPromtoolAccepts(after->body);
  std::cout << "FIGURE metrics_page_bytes_after_one_job=" << after->body.size()
            << std::endl;
}

}  // namespace
}  // namespace tessera
