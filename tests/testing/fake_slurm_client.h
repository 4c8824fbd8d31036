// FakeSlurmClient: a SlurmClient for the pool tests, with no Slurm behind it.
// It records every call; submitted jobs get ids from 100 up and sit in `jobs`
// (state "PD") until the test changes or removes them (a removed job has
// ended and been purged). Cancel marks a known job "CA".
//
// Thread-safety: none; the tests drive it from one thread.
#ifndef TESSERA_TESTS_TESTING_FAKE_SLURM_CLIENT_H_
#define TESSERA_TESTS_TESTING_FAKE_SLURM_CLIENT_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "coordinator/core/slurm/slurm_client.h"

namespace tessera::testing {

class FakeSlurmClient : public SlurmClient {
 public:
  absl::StatusOr<std::string> Submit(const SbatchRequest& request) override {
    submitted.push_back(request);
    if (!submit_errors.empty()) {
      absl::Status e = submit_errors.front();
      submit_errors.erase(submit_errors.begin());
      return e;
    }
    const std::string id = absl::StrCat(next_id++);
    jobs[id] = {id, "PD", "None", ""};
    return id;
  }
  absl::StatusOr<std::map<std::string, SlurmJobInfo>> Query(
      const std::vector<std::string>& ids) override {
    ++queries;
    if (!query_error.ok()) return query_error;
    std::map<std::string, SlurmJobInfo> out;
    for (const std::string& id : ids) {
      if (jobs.contains(id)) out[id] = jobs[id];
    }
    return out;
  }
  absl::Status Cancel(const std::string& id, std::optional<std::string> signal) override {
    cancelled.push_back(id);
    if (jobs.contains(id)) jobs[id].state = "CA";
    return absl::OkStatus();
  }

  std::map<std::string, SlurmJobInfo> jobs;
  std::vector<SbatchRequest> submitted;
  std::vector<absl::Status> submit_errors;
  std::vector<std::string> cancelled;
  absl::Status query_error;
  int queries = 0;
  int next_id = 100;
};

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_TESTING_FAKE_SLURM_CLIENT_H_
