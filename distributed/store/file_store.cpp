// FileStore: an append-only log of records under flock() (Note [FileStore records] in file_store.h).
#include "distributed/store/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <thread>

namespace mt::dist {

namespace {

constexpr char kHeader[8] = {'M', 'T', 'S', 'T', 'O', 'R', 'E', '1'};
constexpr size_t kRecordHeaderBytes = 8;  // u32 key length, u32 value length

uint32_t load_u32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

void store_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void pwrite_all(int fd, const void* data, size_t n, uint64_t offset, const std::string& what) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    MT_CHECK(w > 0, what, ": write failed: ", std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

void pread_all(int fd, void* data, size_t n, uint64_t offset, const std::string& what) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    MT_CHECK(r > 0, what, ": read failed: ", r == 0 ? "the file is shorter than it was" : std::strerror(errno));
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
}

}  // namespace

class FileStore::Lock {
 public:
  Lock(int fd, bool exclusive, const std::string& what) : fd_(fd) {
    int rc;
    while ((rc = ::flock(fd_, exclusive ? LOCK_EX : LOCK_SH)) != 0 && errno == EINTR) {}
    MT_CHECK(rc == 0, what, ": flock: ", std::strerror(errno));
  }
  ~Lock() { ::flock(fd_, LOCK_UN); }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

 private:
  int fd_;
};

FileStore::FileStore(FileStoreOptions opts) : Store(opts.timeout), path_(std::move(opts.path)) {
  MT_CHECK(!path_.empty(), "FileStore: no path given");
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  MT_CHECK(fd_ >= 0, describe(), ": cannot open: ", std::strerror(errno));
  try {
    Lock lock(fd_, true, describe());
    refresh(true);  // writes the header into a new file; checks it in an old one
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

FileStore::~FileStore() { ::close(fd_); }

std::string FileStore::describe() const { return "FileStore " + path_; }

void FileStore::refresh(bool exclusive) {
  struct stat st {};
  MT_CHECK(::fstat(fd_, &st) == 0, describe(), ": fstat: ", std::strerror(errno));
  const auto size = static_cast<uint64_t>(st.st_size);
  if (read_offset_ == 0) {
    if (size < sizeof(kHeader)) {  // new, or its creator died before the header was complete
      if (exclusive) {
        MT_CHECK(::ftruncate(fd_, 0) == 0, describe(), ": ftruncate: ", std::strerror(errno));
        pwrite_all(fd_, kHeader, sizeof(kHeader), 0, describe());
        read_offset_ = sizeof(kHeader);
      }
      return;
    }
    char header[sizeof(kHeader)];
    pread_all(fd_, header, sizeof(header), 0, describe());
    MT_CHECK(std::memcmp(header, kHeader, sizeof(kHeader)) == 0, describe(),
             ": the file exists but is not a minitrain store; give the store a path of its own");
    read_offset_ = sizeof(kHeader);
  }
  MT_CHECK(size >= read_offset_, describe(), ": the file shrank from ", read_offset_, " to ", size,
           " bytes; did another job delete or rewrite it? Give every job its own store path.");
  if (size == read_offset_) return;

  Bytes fresh(size - read_offset_);
  pread_all(fd_, fresh.data(), fresh.size(), read_offset_, describe());
  size_t pos = 0;
  while (fresh.size() - pos >= kRecordHeaderBytes) {
    const uint32_t key_len = load_u32(&fresh[pos]), value_len = load_u32(&fresh[pos + 4]);
    // The file is shared with every process that can write the path: lengths are not trusted.
    MT_CHECK(key_len >= 1 && key_len <= kMaxKeyBytes && value_len <= kMaxValueBytes, describe(),
             ": corrupt record at offset ", read_offset_ + pos, " (key ", key_len, " bytes, value ",
             value_len, " bytes)");
    const size_t record = kRecordHeaderBytes + key_len + value_len;
    if (fresh.size() - pos < record) break;  // torn: its writer died mid-append
    const auto* key = reinterpret_cast<const char*>(&fresh[pos + kRecordHeaderBytes]);
    const uint8_t* value = &fresh[pos + kRecordHeaderBytes + key_len];
    cache_[std::string(key, key_len)] = Bytes(value, value + value_len);
    pos += record;
  }
  read_offset_ += pos;
  // Under the exclusive lock nobody else is writing, so bytes past the last whole record are a dead
  // writer's torn record: cut them off, or the next append would land behind garbage.
  if (exclusive && read_offset_ < size)
    MT_CHECK(::ftruncate(fd_, static_cast<off_t>(read_offset_)) == 0, describe(), ": ftruncate: ",
             std::strerror(errno));
}

void FileStore::append(const std::string& key, const Bytes& value) {
  Bytes record;
  record.reserve(kRecordHeaderBytes + key.size() + value.size());
  store_u32(record, static_cast<uint32_t>(key.size()));
  store_u32(record, static_cast<uint32_t>(value.size()));
  record.insert(record.end(), key.begin(), key.end());
  record.insert(record.end(), value.begin(), value.end());
  pwrite_all(fd_, record.data(), record.size(), read_offset_, describe());
  read_offset_ += record.size();
  cache_[key] = value;
}

void FileStore::set_impl(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> guard(mutex_);
  Lock lock(fd_, true, describe());
  refresh(true);
  append(key, value);
}

int64_t FileStore::add_impl(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> guard(mutex_);
  Lock lock(fd_, true, describe());
  refresh(true);
  int64_t value = 0;
  if (const auto it = cache_.find(key); it != cache_.end()) {
    const char* first = reinterpret_cast<const char*>(it->second.data());
    const char* last = first + it->second.size();
    const auto [end, ec] = std::from_chars(first, last, value);
    MT_CHECK(ec == std::errc() && end == last && first != last, describe(), ": add('", key,
             "'): the key holds a value that is not an integer");
  }
  value += delta;
  const std::string text = std::to_string(value);
  append(key, Bytes(text.begin(), text.end()));
  return value;
}

bool FileStore::check_impl(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> guard(mutex_);
  Lock lock(fd_, false, describe());
  refresh(false);
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return cache_.count(k) > 0; });
}

std::vector<std::string> FileStore::poll_for(const std::vector<std::string>& keys,
                                             std::chrono::milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    std::vector<std::string> missing;
    {
      std::lock_guard<std::mutex> guard(mutex_);
      Lock lock(fd_, false, describe());
      refresh(false);
      for (const auto& k : keys)
        if (cache_.count(k) == 0) missing.push_back(k);
    }
    const Clock::time_point now = Clock::now();
    if (missing.empty() || now >= deadline) return missing;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

bool FileStore::get_impl(const std::string& key, std::chrono::milliseconds timeout, Bytes& value) {
  if (!poll_for({key}, timeout).empty()) return false;
  std::lock_guard<std::mutex> guard(mutex_);
  value = cache_.at(key);
  return true;
}

std::vector<std::string> FileStore::wait_impl(const std::vector<std::string>& keys,
                                              std::chrono::milliseconds timeout) {
  return poll_for(keys, timeout);
}

}  // namespace mt::dist
