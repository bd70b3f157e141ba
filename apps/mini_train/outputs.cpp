// The pre-flight check of mini_train's output paths (see outputs.h).
#include "apps/mini_train/outputs.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include "tensor/check.h"
#include "tensor/output_file.h"

namespace mt::app {

namespace {

namespace fs = std::filesystem;

// Creates and removes a probe file in `dir`: the only test that sees read-only mounts, permissions,
// ACLs and odd filesystems (/proc) the way the real save will.
void probe(const char* flag, const std::string& path, const std::string& dir) {
  const std::string name = (fs::path(dir) / (".mini_train-probe." + std::to_string(::getpid()))).string();
  const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  const int err = errno;
  MT_CHECK(fd >= 0, flag, " ", path, ": cannot write in ", dir, ": ", std::strerror(err));
  ::close(fd);
  ::unlink(name.c_str());
}

// The filesystem of `dir` has room for `bytes` more (what an unprivileged user may use).
void room(const char* flag, const std::string& path, const std::string& dir, int64_t bytes) {
  struct statvfs st;
  if (::statvfs(dir.c_str(), &st) != 0) return;  // cannot tell: the probe already passed
  const auto free_bytes = static_cast<long double>(st.f_bavail) * static_cast<long double>(st.f_frsize);
  MT_CHECK(free_bytes >= static_cast<long double>(bytes), flag, " ", path, ": ", dir, " has ",
           static_cast<long long>(free_bytes), " bytes free, but the file needs about ", bytes);
}

}  // namespace

void check_output_file(const char* flag, const std::string& path, int64_t bytes) {
  if (path.empty()) return;
  // A symlink is checked where it leads; a device, FIFO, socket or folder is refused here, before
  // any training (Note [Output files] in tensor/output_file.cpp).
  const std::string target = resolve_output_path(path, flag);
  const fs::path parent = fs::path(target).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  std::error_code ec;
  MT_CHECK(fs::is_directory(dir, ec), flag, " ", path, ": the folder ", dir, " does not exist");
  probe(flag, path, dir);
  room(flag, path, dir, bytes);
}

void check_outputs(const Options& o, const OutputSizes& sizes) {
  check_output_file("--save", o.save, sizes.model_bytes);
  check_output_file("--log-json", o.log_json, 0);
  check_output_file("--trace", o.trace, 0);
  if (!o.checkpoint_dir.empty()) {
    std::error_code ec;
    // A folder, or a symlink to one; a file, FIFO or device there is refused (Note [Output files]).
    MT_CHECK(!fs::exists(o.checkpoint_dir, ec) || fs::is_directory(o.checkpoint_dir, ec), "--checkpoint-dir ",
             o.checkpoint_dir, ": not a folder; give a folder path");
    fs::create_directories(o.checkpoint_dir, ec);
    MT_CHECK(!ec, "--checkpoint-dir ", o.checkpoint_dir, ": cannot create the folder: ", ec.message());
    MT_CHECK(fs::is_directory(o.checkpoint_dir, ec), "--checkpoint-dir ", o.checkpoint_dir, ": not a folder");
    probe("--checkpoint-dir", o.checkpoint_dir, o.checkpoint_dir);
    room("--checkpoint-dir", o.checkpoint_dir, o.checkpoint_dir, sizes.checkpoint_bytes);
  }
}

}  // namespace mt::app
