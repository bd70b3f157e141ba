// output_file.cpp: resolve_output_path and AtomicFile (see output_file.h), on POSIX calls: open,
// write, fsync, rename.
//
// Note [Output files]: every file the project writes follows one rule, decided by what the path
// names before any work starts:
//   - nothing yet, or a regular file: the new contents are written to "<path>.tmp.<pid>" in the
//     same folder, fsync'ed, and rename()d over the path. rename within one filesystem swaps the
//     name atomically, so a reader, or a restart after a crash, finds the old file or the complete
//     new one, never a torn mix. The fsync before the rename matters: without it a power loss can
//     leave the name pointing at data that never reached the disk (a zero-length checkpoint); the
//     fsync of the folder afterwards makes the rename itself durable. Same folder, because rename
//     cannot cross filesystems. A file that existed keeps its permission bits.
//   - a symlink: resolved through every link to the file it names, which is then written the same
//     way, beside itself. Renaming over the link would replace it with a plain file and leave what
//     the user pointed at unchanged (a model "saved" to a link into shared storage would never
//     arrive there).
//   - anything else (a character or block device, a FIFO, a socket, a folder): refused with one
//     line. A rename over /dev/null, which a root process may do, replaces the device node with a
//     regular file and breaks every later user of it; writing through a FIFO would block on a
//     reader that may never come.
// Callers that check their paths up front (mini_train's outputs.h) call resolve_output_path with
// the flag's name, so that the refusal names the flag and comes before any training.
// What it does not handle: two saves to one path from the same process at the same time (they share
// a temporary name; mini_train writes each file from one thread of rank 0), and hard links (the
// rename gives the name a new inode; other names keep the old contents).
#include "tensor/output_file.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tensor/check.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

// What a path that is not a regular file names, for the refusal.
const char* kind_of(fs::file_type type) {
  switch (type) {
    case fs::file_type::directory: return "a directory";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::fifo: return "a FIFO";
    case fs::file_type::socket: return "a socket";
    default: return "of an unknown kind";
  }
}

void fsync_folder_of(const std::string& path, const std::string& who) {
  const std::string dir = fs::path(path).parent_path().string();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const int rc = fd < 0 ? -1 : ::fsync(fd);
  const int err = errno;
  if (fd >= 0) ::close(fd);
  // Some filesystems cannot fsync a folder and say EINVAL; the rename has happened regardless.
  MT_CHECK(rc == 0 || err == EINVAL, who, ": saved '", path, "' but cannot fsync its folder: ", std::strerror(err));
}

}  // namespace

const char* file_kind(const std::string& path) {
  std::error_code ec;
  const fs::file_type type = fs::status(path, ec).type();
  return type == fs::file_type::regular || type == fs::file_type::not_found || type == fs::file_type::none
             ? ""
             : kind_of(type);
}

std::string resolve_output_path(const std::string& path, const std::string& who) {
  MT_CHECK(!path.empty(), who, ": the path is empty; give a file path");
  fs::path p = path;
  std::error_code ec;
  // Follow the links one at a time: a link to a file that does not exist yet (a dangling link)
  // still names where the file goes, which fs::canonical would refuse.
  for (int hops = 0; fs::is_symlink(fs::symlink_status(p, ec)); ++hops) {
    MT_CHECK(hops < 40, who, " ", path, ": too many levels of symbolic links");
    const fs::path to = fs::read_symlink(p, ec);
    MT_CHECK(!ec, who, " ", path, ": cannot read the symbolic link ", p.string(), " (", ec.message(), ")");
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  const fs::file_status status = fs::symlink_status(p, ec);
  if (status.type() == fs::file_type::not_found) return p == fs::path(path) ? path : fs::absolute(p, ec).string();
  MT_CHECK(status.type() == fs::file_type::regular, who, " ", path, ": not a regular file (", kind_of(status.type()),
           "); give a file path");
  if (p == fs::path(path)) return path;  // the user's own spelling in every later message
  const fs::path real = fs::canonical(p, ec);
  return ec ? p.string() : real.string();
}

AtomicFile::AtomicFile(const std::string& path, std::string who)
    : path_(path), who_(std::move(who)), target_(resolve_output_path(path, who_)) {
  temp_ = target_ + ".tmp." + std::to_string(::getpid());
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) fail("cannot create");
  struct stat old {};
  if (::stat(target_.c_str(), &old) == 0 && ::fchmod(fd_, old.st_mode & 07777) != 0) fail("cannot set the mode of");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {  // write() may write less than asked, or be interrupted by a signal
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("cannot write");
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("cannot write");
    p += w, offset += static_cast<uint64_t>(w), n -= static_cast<size_t>(w);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("cannot fsync");
  const int rc = ::close(fd_);  // close can report a delayed write error (NFS): check it too
  fd_ = -1;
  if (rc != 0) fail("cannot close");
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail("cannot rename its temporary over");
  committed_ = true;
  fsync_folder_of(target_, who_);
}

void AtomicFile::fail(const char* what) const {
  const int err = errno;
  std::string why = std::strerror(err);
  rlimit limit{};
  if (err == EFBIG && ::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    why += ": this process may write files of at most " + std::to_string(limit.rlim_cur) + " bytes (ulimit -f)";
  MT_FAIL(who_, ": ", what, " '", path_, "' (its temporary '", temp_, "'): ", why);
}

void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& who) {
  AtomicFile file(path, who);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

}  // namespace mt
