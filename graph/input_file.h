// Files onnxdp reads whole (models, tensor files, config files, metrics logs, checkpoint state):
// each must be a regular file no larger than a limit chosen for its kind, checked before a byte
// is read, so that `--config /dev/zero`, a FIFO or a file of any size ends with an error naming
// the file and the limit instead of reading forever or without bound.
#pragma once
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>

#include "graph/error.h"

namespace onnxdp {

inline constexpr uint64_t kMiB = uint64_t(1) << 20;
inline constexpr uint64_t kGiB = uint64_t(1) << 30;

// Why `path` cannot be read whole within `limit` bytes, "" when it can; `kind` names the files
// the limit is for ("config files"). *size gets the file's size (links followed).
inline std::string input_file_problem(const std::string& path, uint64_t limit, const char* kind, uint64_t* size) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return errno == ENOENT ? "it does not exist" : fmt::format("cannot stat it: {}", std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return fmt::format("it is not a regular file but a {} (onnxdp reads {} from regular files only)",
                       S_ISDIR(st.st_mode) ? "folder" : S_ISFIFO(st.st_mode) ? "pipe" : S_ISSOCK(st.st_mode) ? "socket"
                                                                                                 : "device",
                       kind);
  *size = uint64_t(st.st_size);
  if (*size > limit) {
    const std::string lim = limit % kGiB == 0 ? fmt::format("{} GiB", limit / kGiB) : fmt::format("{} MiB", limit / kMiB);
    return fmt::format("it is {} bytes, past the limit of {} for {}", *size, lim, kind);
  }
  return "";
}

// The size of `path`, or an Error "<what> '<path>': cannot read it: <why>".
inline uint64_t input_file_size(const std::string& path, const char* what, uint64_t limit, const char* kind) {
  uint64_t size = 0;
  const std::string problem = input_file_problem(path, limit, kind, &size);
  if (!problem.empty()) fail("{} '{}': cannot read it: {}", what, path, problem);
  return size;
}

// The whole of `path`, checked as input_file_size does first.
inline std::string read_input_file(const std::string& path, const char* what, uint64_t limit, const char* kind) {
  const uint64_t size = input_file_size(path, what, limit, kind);
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{} '{}': cannot open it: {}", what, path, std::strerror(errno));
  std::string bytes(size_t(size), '\0');
  if (size && !f.read(bytes.data(), std::streamsize(size)))
    fail("{} '{}': reading it failed after {} of {} bytes", what, path, f.gcount(), size);
  return bytes;
}

}  // namespace onnxdp
