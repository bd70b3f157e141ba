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

// Whether a and b name one file: the same inode when both exist, else the same path once symlinks,
// "." and ".." are resolved.
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec) && !ec;
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ec), ec), cb = fs::weakly_canonical(fs::absolute(b, ec), ec);
  return ca == cb;
}

}  // namespace

void check_distinct(const std::vector<FlagPath>& outputs, const std::vector<FlagPath>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const FlagPath& out = outputs[i];
    if (out.path.empty()) continue;
    for (size_t j = 0; j < i; ++j)
      MT_CHECK(outputs[j].path.empty() || !same_file(outputs[j].path, out.path), outputs[j].flag, " ",
               outputs[j].path, " and ", out.flag, " ", out.path, " are one file: give each output its own path");
    for (const FlagPath& in : inputs)
      MT_CHECK(in.path.empty() || !same_file(in.path, out.path), out.flag, " ", out.path, " is also ", in.flag, " ",
               in.path, ", which this command reads: writing it would destroy it; give another path");
  }
}

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
  check_distinct({{"--save", o.save}, {"--log-json", o.log_json}, {"--trace", o.trace}},
                 {{"--inputs", o.inputs}, {"--targets", o.targets}, {"--resume", o.resume == "auto" ? "" : o.resume}});
  check_distinct({{"--log-json", o.log_json}, {"--trace", o.trace}}, {{"--init", o.init}});
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
