#include "cli/export_command.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/command_util.h"
#include "cli/exit_codes.h"

extern char** environ;

namespace tessera::cli {
namespace {

constexpr char kExporterName[] = "tessera-export";

// Input channels of the datasets the trainer reads: the grayscale ones (and
// the synthetic images, generated as one channel) have 1, the rest 3.
int ChannelsOf(const std::string& dataset) {
  return dataset == "fashion-mnist" || dataset == "synthetic" ? 1 : 3;
}

// The job's data kind and the preprocessing keys its spec sets, which the
// exporter writes into the file's metadata for image data (the keys left
// unset are the trainer's defaults, which are the exporter's too).
void AddPreprocessing(const v1::TrainerConfig& trainer, std::vector<std::string>& argv) {
  argv.push_back("--dataset");
  argv.push_back(trainer.dataset().empty() ? "fashion-mnist" : trainer.dataset());
  for (const auto& [flag, values] :
       {std::pair{"--mean", &trainer.mean()}, std::pair{"--std", &trainer.std()}}) {
    if (values->empty()) continue;
    argv.push_back(flag);
    for (const double v : *values) argv.push_back(absl::StrCat(v));
  }
  if (trainer.crop_fraction() > 0) {
    argv.push_back("--crop-fraction");
    argv.push_back(absl::StrCat(trainer.crop_fraction()));
  }
  if (!trainer.interpolation().empty()) {
    argv.push_back("--interpolation");
    argv.push_back(trainer.interpolation());
  }
}

bool IsExecutable(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExportCommand(const v1::Job& job,
                                                       const ExportOptions& options,
                                                       const std::string& exporter) {
  const v1::TrainerConfig& trainer = job.spec().trainer();
  const std::string checkpoint =
      options.checkpoint.empty() ? trainer.checkpoint_dir() : options.checkpoint;
  if (checkpoint.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id(),
                     " wrote no checkpoints (its spec sets no trainer.checkpoint_dir): "
                     "there is no trained model to export"));
  }
  std::vector<std::string> argv = {
      exporter,
      "--checkpoint",
      checkpoint,
      "--model",
      trainer.model().empty() ? "vit-micro" : trainer.model(),
      "--channels",
      std::to_string(ChannelsOf(trainer.dataset())),
      "--image-size",
      std::to_string(trainer.image_size()),
      "--names",
      options.names,
      "-o",
      options.out};
  if (options.step > 0) {
    argv.push_back("--step");
    argv.push_back(std::to_string(options.step));
  }
  AddPreprocessing(trainer, argv);
  return argv;
}

absl::StatusOr<std::string> FindExporter(const ExportOptions& options) {
  if (!options.exporter.empty()) {
    if (IsExecutable(options.exporter)) return options.exporter;
    return absl::NotFoundError(
        absl::StrCat("--exporter ", options.exporter, " is not an executable file"));
  }
  std::vector<std::string> tried;
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    const std::string beside =
        (std::filesystem::path(std::string(self, static_cast<size_t>(n))).parent_path() /
         kExporterName)
            .string();
    if (IsExecutable(beside)) return beside;
    tried.push_back(beside);
  }
  const char* path = std::getenv("PATH");
  for (const absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "", ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/", kExporterName);
    if (IsExecutable(candidate)) return candidate;
  }
  tried.push_back("$PATH");
  return absl::NotFoundError(absl::StrCat(
      kExporterName, " was not found (tried ", absl::StrJoin(tried, ", "),
      "); it is built with the trainer (scripts/build.sh --target tessera-export)"));
}

int RunExport(const ExportOptions& options, CoordinatorClient& client, std::ostream& out,
              std::ostream& err) {
  absl::StatusOr<v1::Job> job = client.GetJob(options.job_id);
  if (!job.ok()) {
    return ReportRpcError(job.status(), client, absl::StrCat("job ", options.job_id),
                          err);
  }
  absl::StatusOr<std::string> exporter = FindExporter(options);
  if (!exporter.ok()) {
    err << "tessctl export: " << exporter.status().message() << "\n";
    return kExitFailed;
  }
  absl::StatusOr<std::vector<std::string>> argv = ExportCommand(*job, options, *exporter);
  if (!argv.ok()) {
    err << "tessctl export: " << argv.status().message() << "\n";
    return kExitFailed;
  }
  out << "tessctl export: job " << options.job_id << " (" << job->spec().trainer().model()
      << ") from " << (*argv)[2] << "\n";
  out.flush();
  err.flush();
  std::vector<char*> args;
  for (std::string& a : *argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, args[0], nullptr, nullptr, args.data(), environ);
  if (spawned != 0) {
    err << "tessctl export: cannot run " << *exporter << ": " << std::strerror(spawned)
        << "\n";
    return kExitFailed;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      err << "tessctl export: waiting for " << *exporter << ": " << std::strerror(errno)
          << "\n";
      return kExitFailed;
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  err << "tessctl export: " << *exporter << " was killed by signal " << WTERMSIG(status)
      << "\n";
  return kExitFailed;
}

}  // namespace tessera::cli
