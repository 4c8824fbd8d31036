// Helpers for the data layer's tests: a scratch directory, generated pixel
// patterns (smooth gradients and shapes, which survive JPEG compression closely)
// encoded as JPEG or PNG at run time, and small image folders built from them.
//
// Thread-safety: none; use from the test thread.
#ifndef TESSERA_TESTS_WORKER_TRAINER_DATA_DATA_TEST_UTIL_H_
#define TESSERA_TESTS_WORKER_TRAINER_DATA_DATA_TEST_UTIL_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tessera::trainer::data::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// height x width x channels pixels: gradients plus a disc and a bar whose
// placement depends on `seed`.
std::vector<uint8_t> Pattern(int width, int height, int channels, uint64_t seed);

std::string MakeJpeg(int width, int height, uint64_t seed, int channels = 3,
                     int quality = 95);
std::string MakePng(int width, int height, uint64_t seed, int channels = 3);

void WriteFile(const std::string& path, const std::string& bytes);
std::string ReadFile(const std::string& path);

// Writes ROOT/SPLIT/CLASS/imgNNN.jpg (JPEG) for every split and class, with
// `per_class[split]` images per class, `size` x `size` pixels (size + 7 wide).
// Returns the paths written, in the folder's sample order per split.
std::map<std::string, std::vector<std::string>> MakeImageFolder(
    const std::string& root, const std::vector<std::string>& classes,
    const std::map<std::string, int>& per_class, int size = 40);

// Runs a shell command; its exit status (-1 when it could not run).
int RunCommand(const std::string& command);
bool HavePython3();

}  // namespace tessera::trainer::data::testing

#endif  // TESSERA_TESTS_WORKER_TRAINER_DATA_DATA_TEST_UTIL_H_
