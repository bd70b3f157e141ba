// FileStore: a Store in one file on a filesystem that every rank can see (a cluster's shared home or
// scratch, or /tmp for ranks on one machine). No server and no port: useful where ranks cannot reach
// each other before the job starts, or no port can be reserved.
//
//   FileStore store({.path = "/shared/job-1234.store"});
//
// Note [FileStore records]: the file is an append-only log. An 8-byte header ("MTSTORE1"), then
// records {u32 key length, u32 value length, key, value}, little-endian; a later record for a key
// replaces an earlier one. Writers append under an exclusive flock(), readers parse under a shared one,
// and each FileStore object remembers how far it has read, so an operation reads only what is new.
// A writer that dies mid-append leaves a torn last record: readers stop before it, and the next writer
// truncates it away before appending. add() is read-modify-write under the exclusive lock.
//
// Waiting polls the file (1 ms, doubling to 50 ms): a filesystem has no way to say "a key arrived".
//
// Not here: removing the file. Keys are never deleted, so a file left by an earlier job would answer
// this job's get()s with stale values: give every job its own path (a launcher puts the job id in it).
// On NFS, flock() works through NFS's byte-range locks (Linux ≥ 2.6.12) and taking the lock revalidates
// the client's cache; other network filesystems may need checking.
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>

#include "distributed/store/store.h"

namespace mt::dist {

struct FileStoreOptions {
  std::string path{};  // created if missing; required
  std::chrono::milliseconds timeout = kDefaultTimeout;
};

class FileStore : public Store {
 public:
  explicit FileStore(FileStoreOptions opts);
  ~FileStore() override;

  const std::string& path() const { return path_; }
  std::string describe() const override;

 protected:
  void set_impl(const std::string& key, const Bytes& value) override;
  bool get_impl(const std::string& key, std::chrono::milliseconds timeout, Bytes& value) override;
  int64_t add_impl(const std::string& key, int64_t delta) override;
  bool check_impl(const std::vector<std::string>& keys) override;
  std::vector<std::string> wait_impl(const std::vector<std::string>& keys,
                                     std::chrono::milliseconds timeout) override;

 private:
  class Lock;  // flock() for one operation (file_store.cpp)
  // Parses the records appended since the last call into cache_. With `exclusive`, also truncates a
  // torn last record (Note [FileStore records]). Call with the lock held.
  void refresh(bool exclusive);
  void append(const std::string& key, const Bytes& value);  // call with the exclusive lock held
  // Polls until every key is in cache_ or `timeout` passes; returns the keys still missing.
  std::vector<std::string> poll_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  std::string path_;
  std::mutex mutex_;  // flock() does not exclude threads sharing one descriptor; this does
  int fd_ = -1;
  uint64_t read_offset_ = 0;  // how far the file has been parsed
  std::unordered_map<std::string, Bytes> cache_;
};

}  // namespace mt::dist
