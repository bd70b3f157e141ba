// output_file: the one rule for every file the project writes (a model, a checkpoint, a trace, a
// .npy of predictions, a JSON log): which paths may be written, and how a whole file is replaced
// without ever leaving a torn one (Note [Output files] in output_file.cpp).
//
// It lives in tensor/, the bottom layer, because writers sit in several layers above it (nn/ saves
// safetensors, data/ writes .npy, distributed/ the merged trace, apps/ the log) and must share it.
// Not here: what goes into the file, streaming writes that outlive one call (a log is opened on the
// resolved path and appended to by its owner).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace mt {

// The path a writer of `path` writes: `path` itself when it names a regular file or nothing yet,
// the file a symlink points to (through every link, made absolute) when it is one. Anything else
// (a device, a FIFO, a socket, a folder) is an mt::Error of one line starting with `who` and the
// path: "--save /dev/null: not a regular file (a character device); give a file path".
std::string resolve_output_path(const std::string& path, const std::string& who);

// What `path` is, symlinks followed, when it is there but not a regular file: "a directory", "a
// FIFO", "a character device", ..., the words the refusals above use; "" for a regular file or
// nothing there. For a reader's refusal of the same paths.
const char* file_kind(const std::string& path);

// A whole file written atomically (Note [Output files]): bytes go to a temporary beside the
// resolved target, and commit() makes them the target's contents in one step. Errors name `who`
// and the path the caller gave. Destroyed without commit() (an exception), it removes the temporary
// and leaves the target as it was.
class AtomicFile {
 public:
  AtomicFile(const std::string& path, std::string who);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  // Writes over bytes written earlier (a header whose checksums are known only at the end).
  void write_at(uint64_t offset, const void* data, size_t n);
  // fsync, rename over the target, fsync its folder.
  void commit();

  // The file that commit() replaces (resolve_output_path of the caller's path).
  const std::string& target() const { return target_; }

 private:
  [[noreturn]] void fail(const char* what) const;
  std::string path_, who_, target_, temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// `bytes` as the whole new contents of `path`, through an AtomicFile.
void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& who);

}  // namespace mt
