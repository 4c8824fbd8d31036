// FakeWorkerService: a coordinator's WorkerService that tests script, so that
// a WorkerAgent (in-process, or a tessera-worker process on 127.0.0.1) can be
// given launch, kill and preempt orders and watched: it records every
// registration and heartbeat, acknowledges reported exits when told to, and
// takes shipped logs.
//
// FakeTrainerScript writes a /bin/sh stand-in for tessera-train that records
// the signals it gets in files, so tests can see what reached each rank.
//
// Thread-safety: the service is safe from gRPC's threads and the test thread.
#ifndef TESSERA_TESTS_WORKER_FAKE_WORKER_SERVICE_H_
#define TESSERA_TESTS_WORKER_FAKE_WORKER_SERVICE_H_

#include <sys/stat.h>

#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "tessera/v1/tessera.grpc.pb.h"

namespace tessera::testing {

namespace v1 = ::tessera::v1;

inline v1::KillOrder Order(int64_t job, int32_t attempt, int32_t rank) {
  v1::KillOrder k;
  k.set_job_id(job);
  k.set_attempt(attempt);
  k.set_rank(rank);
  return k;
}

inline v1::LaunchOrder Launch(int64_t job, int32_t attempt, int32_t rank,
                              int32_t world_size) {
  v1::LaunchOrder o;
  o.set_job_id(job);
  o.set_attempt(attempt);
  o.set_rank(rank);
  o.set_world_size(world_size);
  o.set_local_rank(rank);
  o.set_slot(rank);
  return o;
}

class FakeWorkerService final : public v1::WorkerService::Service {
 public:
  using Key = std::tuple<int64_t, int32_t, int32_t>;

  grpc::Status RegisterWorker(grpc::ServerContext*, const v1::RegisterWorkerRequest* req,
                              v1::RegisterWorkerResponse* resp) override {
    absl::MutexLock lock(&mu_);
    registrations_.push_back(*req);
    if (refuse_registrations_ != grpc::StatusCode::OK) {
      return grpc::Status(refuse_registrations_, "token revoked");
    }
    resp->set_epoch(++epoch_);
    resp->set_heartbeat_interval_ms(heartbeat_interval_ms_);
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    absl::MutexLock lock(&mu_);
    if (refuse_registrations_ != grpc::StatusCode::OK) {
      return grpc::Status(refuse_registrations_, "token revoked");
    }
    if (forget_session_) {
      forget_session_ = false;
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such session");
    }
    if (req->epoch() != epoch_) return grpc::Status(grpc::StatusCode::ABORTED, "stale");
    heartbeats_.push_back(*req);
    for (const v1::LocalRank& r : req->ranks()) {
      if (!r.exited()) continue;
      const Key key{r.job_id(), r.attempt(), r.rank()};
      exits_[key] = r;
      if (acknowledge_exits_) {
        *resp->add_acknowledged_exits() = Order(r.job_id(), r.attempt(), r.rank());
        acknowledged_.insert({key, r});
      }
    }
    for (const v1::LaunchOrder& o : launches_) *resp->add_launch() = o;
    launches_.clear();
    for (const v1::KillOrder& k : kills_) *resp->add_kill() = k;
    kills_.clear();
    for (auto it = preempts_.begin(); it != preempts_.end();) {
      *resp->add_preempt() = it->first;
      ++preempts_sent_;
      if (--it->second == 0) {
        it = preempts_.erase(it);
      } else {
        ++it;
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status ShipLogs(grpc::ServerContext*, const v1::ShipLogsRequest* req,
                        v1::ShipLogsResponse* resp) override {
    absl::MutexLock lock(&mu_);
    std::string& log = logs_[Key{req->job_id(), req->attempt(), req->rank()}];
    if (req->offset() == static_cast<int64_t>(log.size())) log += req->data();
    resp->set_next_offset(static_cast<int64_t>(log.size()));
    return grpc::Status::OK;
  }

  // ---- Scripting, from the test thread ----
  void QueueLaunch(const v1::LaunchOrder& o) {
    absl::MutexLock lock(&mu_);
    launches_.push_back(o);
  }
  void QueueKill(const v1::KillOrder& k) {
    absl::MutexLock lock(&mu_);
    kills_.push_back(k);
  }
  // Sends the preempt order in the next `times` heartbeat replies.
  void QueuePreempt(const v1::KillOrder& k, int times) {
    absl::MutexLock lock(&mu_);
    preempts_.emplace_back(k, times);
  }
  // The next heartbeat fails with NOT_FOUND, as from a coordinator that lost
  // the session; the worker registers again.
  void ForgetSession() {
    absl::MutexLock lock(&mu_);
    forget_session_ = true;
  }
  // Every later registration and heartbeat fails with `code` (OK: accepted
  // again), as a coordinator's authentication refuses a revoked join token.
  void RefuseRegistrations(grpc::StatusCode code) {
    absl::MutexLock lock(&mu_);
    refuse_registrations_ = code;
  }
  void SetAcknowledgeExits(bool ack) {
    absl::MutexLock lock(&mu_);
    acknowledge_exits_ = ack;
  }

  // Waits until `done` (called under the lock) holds or `timeout` passes.
  bool WaitUntil(const std::function<bool(const FakeWorkerService&)>& done,
                 absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto cond = [&] { return done(*this); };
    return mu_.AwaitWithTimeout(absl::Condition(&cond), timeout);
  }
  // Runs `f` under the lock.
  template <typename F>
  auto Read(F f) const {
    absl::MutexLock lock(&mu_);
    return f(*this);
  }

  // Readable through WaitUntil / Read only.
  std::vector<v1::RegisterWorkerRequest> registrations_;
  std::vector<v1::HeartbeatRequest> heartbeats_;
  std::map<Key, v1::LocalRank> exits_;         // last report of each exited rank
  std::map<Key, v1::LocalRank> acknowledged_;  // exits acknowledged
  std::map<Key, std::string> logs_;
  int preempts_sent_ = 0;

 private:
  mutable absl::Mutex mu_;
  int64_t epoch_ = 0;
  int heartbeat_interval_ms_ = 100;
  bool forget_session_ = false;
  grpc::StatusCode refuse_registrations_ = grpc::StatusCode::OK;
  bool acknowledge_exits_ = true;
  std::vector<v1::LaunchOrder> launches_;
  std::vector<v1::KillOrder> kills_;
  std::vector<std::pair<v1::KillOrder, int>> preempts_;
};

// A FakeWorkerService served on 127.0.0.1 (a free port) and in-process.
class FakeCoordinator {
 public:
  FakeCoordinator() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~FakeCoordinator() { server_->Shutdown(absl::ToChronoTime(absl::Now())); }
  FakeWorkerService& service() { return service_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  std::shared_ptr<grpc::Channel> InProcessChannel() {
    return server_->InProcessChannel(grpc::ChannelArguments());
  }

 private:
  FakeWorkerService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// What a fake trainer does on SIGUSR1.
enum class OnUsr1 {
  kExitPreempted,  // exits with code 5, as tessera-train after its checkpoint
  kCarryOn,        // notes it and runs on
  kIgnore,         // the signal is ignored (SIG_IGN), as is SIGTERM when ignore_term
};

// Writes an executable /bin/sh script to `path` that acts as tessera-train:
// it appends "usr1" / "usr2" to `dir`/rank-R.usr1 / .usr2 for each SIGUSR1 /
// SIGUSR2 it handles, writes its pid to rank-R.pid once its traps are set,
// and runs until a signal ends it. R is $RANK. Ranks listed in `exit_now`
// exit at once with `exit_code`.
inline void WriteFakeTrainer(const std::string& path, const std::string& dir,
                             OnUsr1 on_usr1, bool ignore_term = false,
                             const std::string& exit_now = "", int exit_code = 3) {
  const std::string base = dir + "/rank-$RANK";
  std::string usr1;
  switch (on_usr1) {
    case OnUsr1::kExitPreempted:
      usr1 = "trap 'echo usr1 >> " + base + ".usr1; exit 5' USR1\n";
      break;
    case OnUsr1::kCarryOn:
      usr1 = "trap 'echo usr1 >> " + base + ".usr1' USR1\n";
      break;
    case OnUsr1::kIgnore:
      usr1 = "trap '' USR1\n";
      break;
  }
  std::ofstream(path) << "#!/bin/sh\n"
                      << "for r in " << (exit_now.empty() ? "none" : exit_now)
                      << "; do [ \"$r\" = \"$RANK\" ] && exit " << exit_code << "; done\n"
                      << usr1 << "trap 'echo usr2 >> " << base << ".usr2' USR2\n"
                      << (ignore_term ? "trap '' TERM\n" : "") << "echo $$ > " << base
                      << ".pid.tmp && mv " << base << ".pid.tmp " << base << ".pid\n"
                      << "while :; do sleep 0.02; done\n";
  ::chmod(path.c_str(), 0755);
}

}  // namespace tessera::testing

#endif  // TESSERA_TESTS_WORKER_FAKE_WORKER_SERVICE_H_
