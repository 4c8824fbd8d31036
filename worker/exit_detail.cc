#include "worker/exit_detail.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <string_view>

#include "common/trainer_exit.h"

namespace tessera {

std::string ExitDetailIn(std::string_view log) {
  size_t found = std::string_view::npos;
  for (size_t at = log.find(kTrainerExitReasonPrefix); at != std::string_view::npos;
       at = log.find(kTrainerExitReasonPrefix, at + 1)) {
    if (at == 0 || log[at - 1] == '\n') found = at;  // at the start of a line
  }
  if (found == std::string_view::npos) return "";
  std::string_view rest = log.substr(found + kTrainerExitReasonPrefix.size());
  rest = rest.substr(0, std::min(rest.find('\n'), kMaxExitDetail));
  std::string detail(rest);
  for (char& c : detail) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  while (!detail.empty() && detail.back() == ' ') detail.pop_back();
  return detail;
}

std::string ReadExitDetail(const std::string& path, size_t tail_bytes) {
  return ExitDetailIn(ReadLogTail(path, tail_bytes));
}

std::string ReadLogTail(const std::string& path, size_t tail_bytes) {
  if (path.empty()) return "";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return "";
  struct stat st {};
  std::string tail;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const off_t start = st.st_size > static_cast<off_t>(tail_bytes)
                            ? st.st_size - static_cast<off_t>(tail_bytes)
                            : 0;
    tail.resize(static_cast<size_t>(st.st_size - start));
    const ssize_t got = pread(fd, tail.data(), tail.size(), start);
    tail.resize(got > 0 ? static_cast<size_t>(got) : 0);
  }
  close(fd);
  return tail;
}

}  // namespace tessera
