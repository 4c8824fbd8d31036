// StoreWrapper: a Store that forwards every call to a target Store, in the
// manner of LevelDB's EnvWrapper. Derive from it and override only the methods
// whose behaviour should differ, e.g. a test store that fails writes on demand:
//
//   class FailingStore final : public StoreWrapper {
//    public:
//     using StoreWrapper::StoreWrapper;
//     absl::Status UpdateJob(const JobRecord& job) override {
//       if (fail) return absl::ResourceExhaustedError("disk full");
//       return StoreWrapper::UpdateJob(job);
//     }
//     std::atomic<bool> fail{false};
//   };
//
// A subclass that overrides ListJobs(const JobFilter&) should also say
// `using StoreWrapper::ListJobs;` to keep Store's ListJobs() overload visible.
//
// The wrapper owns its target, so that a wrapped store is handed around as one
// std::unique_ptr<Store> and never outlives what it forwards to.
//
// Thread-safety: as safe as the target; the wrapper adds no state of its own.
// A subclass that adds state must make it safe to touch from any thread.
#ifndef TESSERA_COORDINATOR_STORE_STORE_WRAPPER_H_
#define TESSERA_COORDINATOR_STORE_STORE_WRAPPER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/store/store.h"

namespace tessera {

class StoreWrapper : public Store {
 public:
  // `target` must not be null.
  explicit StoreWrapper(std::unique_ptr<Store> target) : target_(std::move(target)) {}
  ~StoreWrapper() override = default;

  StoreWrapper(const StoreWrapper&) = delete;
  StoreWrapper& operator=(const StoreWrapper&) = delete;

  // The store every call is forwarded to.
  Store* target() const { return target_.get(); }

  absl::StatusOr<int64_t> CreateJob(const JobRecord& job) override {
    return target_->CreateJob(job);
  }
  absl::StatusOr<JobRecord> GetJob(int64_t id) override { return target_->GetJob(id); }
  using Store::ListJobs;
  absl::StatusOr<std::vector<JobRecord>> ListJobs(const JobFilter& filter) override {
    return target_->ListJobs(filter);
  }
  absl::StatusOr<std::vector<JobRecord>> ListActiveJobs() override {
    return target_->ListActiveJobs();
  }
  absl::Status UpdateJob(const JobRecord& job) override {
    return target_->UpdateJob(job);
  }
  absl::StatusOr<std::vector<JobEvent>> ListEvents(int64_t job_id) override {
    return target_->ListEvents(job_id);
  }

  absl::Status UpsertWorker(const WorkerRecord& worker) override {
    return target_->UpsertWorker(worker);
  }
  absl::StatusOr<std::vector<WorkerRecord>> ListWorkers() override {
    return target_->ListWorkers();
  }
  absl::Status PutWorkerCredential(const WorkerCredentialRecord& credential) override {
    return target_->PutWorkerCredential(credential);
  }
  absl::StatusOr<std::vector<WorkerCredentialRecord>> ListWorkerCredentials() override {
    return target_->ListWorkerCredentials();
  }
  absl::Status PutSlurmAllocation(const SlurmAllocationRecord& allocation) override {
    return target_->PutSlurmAllocation(allocation);
  }
  absl::Status DeleteSlurmAllocation(const std::string& slurm_job_id) override {
    return target_->DeleteSlurmAllocation(slurm_job_id);
  }
  absl::StatusOr<std::vector<SlurmAllocationRecord>> ListSlurmAllocations() override {
    return target_->ListSlurmAllocations();
  }

  absl::Status PutRanks(const std::vector<RankRecord>& ranks) override {
    return target_->PutRanks(ranks);
  }
  absl::StatusOr<std::vector<RankRecord>> GetRanks(int64_t job_id,
                                                   int32_t attempt) override {
    return target_->GetRanks(job_id, attempt);
  }

  absl::Status AppendLog(const LogChunk& chunk) override {
    return target_->AppendLog(chunk);
  }
  absl::StatusOr<int64_t> LogEnd(int64_t job_id, int32_t attempt, int32_t rank) override {
    return target_->LogEnd(job_id, attempt, rank);
  }
  absl::StatusOr<std::string> ReadLog(int64_t job_id, int32_t attempt, int32_t rank,
                                      int64_t from_offset, int64_t max_bytes) override {
    return target_->ReadLog(job_id, attempt, rank, from_offset, max_bytes);
  }

  absl::Status AppendMetrics(const std::vector<MetricRow>& rows) override {
    return target_->AppendMetrics(rows);
  }
  absl::StatusOr<std::vector<MetricRow>> QueryMetrics(const MetricQuery& query) override {
    return target_->QueryMetrics(query);
  }

  absl::StatusOr<int64_t> CreateSweep(const SweepRecord& sweep) override {
    return target_->CreateSweep(sweep);
  }
  absl::StatusOr<SweepRecord> GetSweep(int64_t id) override {
    return target_->GetSweep(id);
  }
  absl::StatusOr<std::vector<SweepRecord>> ListSweeps() override {
    return target_->ListSweeps();
  }
  absl::Status UpdateSweep(const SweepRecord& sweep) override {
    return target_->UpdateSweep(sweep);
  }

  absl::StatusOr<int64_t> CreateSearch(const SearchRecord& search) override {
    return target_->CreateSearch(search);
  }
  absl::StatusOr<SearchRecord> GetSearch(int64_t id) override {
    return target_->GetSearch(id);
  }
  absl::StatusOr<std::vector<SearchRecord>> ListSearches() override {
    return target_->ListSearches();
  }
  absl::Status UpdateSearch(const SearchRecord& search) override {
    return target_->UpdateSearch(search);
  }
  absl::Status PutSearchJob(const SearchJobRecord& job) override {
    return target_->PutSearchJob(job);
  }
  absl::StatusOr<std::vector<SearchJobRecord>> ListSearchJobs(
      int64_t search_id) override {
    return target_->ListSearchJobs(search_id);
  }

  absl::StatusOr<int64_t> CreateToken(const TokenRecord& token) override {
    return target_->CreateToken(token);
  }
  absl::StatusOr<TokenRecord> GetToken(int64_t id) override {
    return target_->GetToken(id);
  }
  absl::StatusOr<std::vector<TokenRecord>> ListTokens() override {
    return target_->ListTokens();
  }
  absl::Status RevokeToken(int64_t id) override { return target_->RevokeToken(id); }
  absl::StatusOr<int64_t> ExternalWrites() override { return target_->ExternalWrites(); }
  absl::Status PutUsage(const std::vector<UsageRecord>& usage) override {
    return target_->PutUsage(usage);
  }
  absl::StatusOr<std::vector<UsageRecord>> ListUsage() override {
    return target_->ListUsage();
  }
  absl::StatusOr<JobOutputUsage> GetJobOutputUsage(int64_t job_id) override {
    return target_->GetJobOutputUsage(job_id);
  }
  absl::StatusOr<DiskSpace> GetDiskSpace() override { return target_->GetDiskSpace(); }
  absl::Status CompactJournal() override { return target_->CompactJournal(); }
  absl::Status LimitJournal(int64_t bytes) override {
    return target_->LimitJournal(bytes);
  }
  absl::StatusOr<std::vector<FinishedJobOutputs>> ListFinishedJobOutputs() override {
    return target_->ListFinishedJobOutputs();
  }
  absl::StatusOr<int64_t> DownsampleMetrics(int64_t job_id, int max_points,
                                            const RetentionNote& note) override {
    return target_->DownsampleMetrics(job_id, max_points, note);
  }
  absl::StatusOr<int64_t> ThinMetrics(int64_t job_id,
                                      const RetentionNote& note) override {
    return target_->ThinMetrics(job_id, note);
  }
  absl::StatusOr<int64_t> DropMetrics(int64_t job_id,
                                      const RetentionNote& note) override {
    return target_->DropMetrics(job_id, note);
  }
  absl::StatusOr<int64_t> DropLogs(int64_t job_id, const RetentionNote& note) override {
    return target_->DropLogs(job_id, note);
  }
  absl::StatusOr<StoreSize> GetStoreSize() override { return target_->GetStoreSize(); }
  absl::Status ReclaimSpace() override { return target_->ReclaimSpace(); }
  absl::StatusOr<StoreStats> GetStoreStats() override { return target_->GetStoreStats(); }
  absl::StatusOr<std::string> GetOrCreateSecret(
      const std::string& name, const std::string& value_if_new) override {
    return target_->GetOrCreateSecret(name, value_if_new);
  }

 private:
  const std::unique_ptr<Store> target_;
};

}  // namespace tessera

#endif  // TESSERA_COORDINATOR_STORE_STORE_WRAPPER_H_
