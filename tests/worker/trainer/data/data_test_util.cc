#include "tests/worker/trainer/data/data_test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "worker/trainer/data/image_encoder.h"

namespace tessera::trainer::data::testing {

namespace fs = std::filesystem;

ScratchDir::ScratchDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp ? tmp : "/tmp") + "/tessera-data-test-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) std::abort();
  path_ = pattern;
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::vector<uint8_t> Pattern(int width, int height, int channels, uint64_t seed) {
  std::vector<uint8_t> px(static_cast<size_t>(width) * height * channels);
  const double cx = width * (0.3 + 0.4 * ((seed * 7) % 10) / 10.0);
  const double cy = height * (0.3 + 0.4 * ((seed * 3) % 10) / 10.0);
  const double r = std::min(width, height) * 0.2;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const bool disc = (x - cx) * (x - cx) + (y - cy) * (y - cy) < r * r;
      const bool bar = (y > height * 0.7 && y < height * 0.8);
      for (int c = 0; c < channels; ++c) {
        double v = 40 + 150.0 * (c == 0   ? x / double(width)
                                 : c == 1 ? y / double(height)
                                          : (x + y) / double(width + height));
        if (disc) v = 230 - 60 * c;
        if (bar) v = 20 + 30 * c + (seed % 5) * 10;
        px[(static_cast<size_t>(y) * width + x) * channels + c] = static_cast<uint8_t>(v);
      }
    }
  }
  return px;
}

std::string MakeJpeg(int width, int height, uint64_t seed, int channels, int quality) {
  const std::vector<uint8_t> px = Pattern(width, height, channels, seed);
  auto jpeg = EncodeJpeg(px.data(), width, height, channels, quality);
  if (!jpeg.ok()) std::abort();
  return *jpeg;
}

std::string MakePng(int width, int height, uint64_t seed, int channels) {
  const std::vector<uint8_t> px = Pattern(width, height, channels, seed);
  auto png = EncodePng(px.data(), width, height, channels);
  if (!png.ok()) std::abort();
  return *png;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::map<std::string, std::vector<std::string>> MakeImageFolder(
    const std::string& root, const std::vector<std::string>& classes,
    const std::map<std::string, int>& per_class, int size) {
  std::map<std::string, std::vector<std::string>> written;
  uint64_t seed = 1;
  for (const auto& [split, count] : per_class) {
    for (const std::string& cls : classes) {
      for (int i = 0; i < count; ++i) {
        const std::string path =
            absl::StrFormat("%s/%s/%s/img%03d.jpg", root, split, cls, i);
        WriteFile(path, MakeJpeg(size + 7, size, seed++));
        written[split].push_back(path);
      }
    }
  }
  return written;
}

int RunCommand(const std::string& command) {
  const int status = std::system(command.c_str());
  if (status == -1 || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

bool HavePython3() { return access("/usr/bin/python3", X_OK) == 0; }

}  // namespace tessera::trainer::data::testing
