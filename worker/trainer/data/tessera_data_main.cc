// tessera-data: prepares and checks the image datasets tessera-train reads.
//
//   tessera-data pack ROOT --out DIR [--shard-size N]
//       packs the image folder ROOT (ROOT/train/CLASS/*.jpg, ROOT/val/...) into
//       WebDataset-style tar shards DIR/train-000000.tar ... with
//       DIR/classes.txt and DIR/index.json (shard_packer.h).
//   tessera-data check ROOT [--workers N]
//       decodes every image of an image folder or a shard dataset and prints
//       class counts, image sizes and unreadable files (dataset_check.h).
//
// Wiring only. Exit codes: 0 success, 1 failure or (check) unreadable images
// found, 2 usage error. Progress goes to stderr, results to stdout.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flag_checks.h"
#include "worker/trainer/data/dataset_check.h"
#include "worker/trainer/data/shard_packer.h"

namespace tessera::trainer::data {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

// Progress lines on stderr, at most twice a second (and each stage's end);
// rewritten in place on a terminal.
ProgressFn StderrProgress(absl::string_view verb) {
  const bool tty = isatty(STDERR_FILENO) != 0;
  auto last = std::make_shared<absl::Time>(absl::InfinitePast());
  return [verb = std::string(verb), tty, last](absl::string_view what, int64_t done,
                                               int64_t total) {
    const absl::Time now = absl::Now();
    if (done < total && now - *last < absl::Milliseconds(500)) return;
    *last = now;
    std::fprintf(stderr, "%s%s %s: %lld/%lld images%s", tty ? "\r" : "", verb.c_str(),
                 std::string(what).c_str(), static_cast<long long>(done),
                 static_cast<long long>(total), tty && done < total ? "" : "\n");
  };
}

int Pack(const PackOptions& options) {
  const absl::StatusOr<PackReport> report = PackImageFolder(options);
  if (!report.ok()) {
    std::cerr << "tessera-data pack: " << report.status().message() << "\n";
    return kExitFailure;
  }
  std::cout << absl::StrFormat("packed %s into %s: %d classes, %d shards\n", options.root,
                               options.out, report->classes.size(), report->shards);
  for (const auto& [split, n] : report->samples) {
    std::cout << absl::StrFormat("  %s: %d samples\n", split, n);
  }
  for (const std::string& left : report->left_out)
    std::cout << "  left out: " << left << "\n";
  return 0;
}

int Check(const CheckOptions& options) {
  const absl::StatusOr<CheckReport> report = CheckDataset(options);
  if (!report.ok()) {
    std::cerr << "tessera-data check: " << report.status().message() << "\n";
    return kExitFailure;
  }
  std::cout << FormatCheckReport(*report);
  if (report->unreadable() > 0) {
    std::cerr << "tessera-data check: " << report->unreadable() << " unreadable images\n";
    return kExitFailure;
  }
  return 0;
}

int Run(int argc, char** argv) {
  CLI::App app{"tessera-data: pack image folders into tar shards and check datasets"};
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  tessera-data check /data/pets                 # image folder or shards\n"
      "  tessera-data pack /data/pets --out /data/pets-shards --shard-size 1000\n"
      "  tessera-data check /data/pets-shards");
  PackOptions pack;
  CLI::App* pack_cmd = app.add_subcommand(
      "pack", "Pack ROOT/{train,val}/CLASS/*.{jpg,jpeg,png} into WebDataset tar shards");
  pack_cmd->add_option("root", pack.root, "Image folder root")->required();
  pack_cmd->add_option("--out", pack.out, "Output directory for the shards")->required();
  pack_cmd->add_option("--shard-size", pack.shard_size, "Samples per shard")
      ->default_val(1000)
      ->check(NumberAtLeast<int64_t>(1));
  CheckOptions check;
  CLI::App* check_cmd = app.add_subcommand(
      "check", "Decode every image; print class counts, sizes and unreadable files");
  check_cmd->add_option("root", check.root, "Image folder or shard dataset root")
      ->required();
  check_cmd->add_option("--workers", check.workers, "Decode threads")
      ->default_val(2)
      ->check(NumberInRange(1, 256));
  check_cmd->add_option("--kind", check.kind, "imagefolder, shards or auto")
      ->default_val("auto")
      ->check(CLI::IsMember({"auto", "imagefolder", "shards"}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  if (pack_cmd->parsed()) {
    pack.progress = StderrProgress("pack");
    return Pack(pack);
  }
  check.progress = StderrProgress("check");
  return Check(check);
}

}  // namespace
}  // namespace tessera::trainer::data

int main(int argc, char** argv) { return tessera::trainer::data::Run(argc, argv); }
