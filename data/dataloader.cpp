// dataloader.cpp: one epoch of batches (EpochRun), built in the consumer's thread or by worker
// threads that fill a bounded, batch-indexed queue, then moved to the options' device
// (batch_transfer.h); and the DataLoader/Iterator around it.
#include "data/dataloader.h"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <span>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "data/detail/batch_transfer.h"

namespace mt::data {
namespace detail {

class EpochRun {
 public:
  // The epoch's batches first_batch, first_batch + 1, ... (DataLoader::begin_at), moved to the
  // options' device by transfer (none: they stay where the dataset built them).
  EpochRun(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices, const DataLoaderOptions& opts,
           std::shared_ptr<BatchTransfer> transfer, int64_t first_batch)
      : dataset_(std::move(dataset)), indices_(std::move(indices)), batch_size_(opts.batch_size),
        transfer_(std::move(transfer)), next_(first_batch), next_claim_(first_batch) {
    const auto n = static_cast<int64_t>(indices_.size());
    num_batches_ = opts.drop_last ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
    window_ = static_cast<int64_t>(opts.prefetch) * opts.num_workers;
    const int threads = static_cast<int>(std::min<int64_t>(opts.num_workers, num_batches_ - first_batch));
    try {
      for (int w = 0; w < threads; ++w) workers_.emplace_back([this] { work(); });
    } catch (...) {
      stop_and_join();  // a thread failed to start: the ones that did must not outlive us
      throw;
    }
  }
  ~EpochRun() { stop_and_join(); }
  EpochRun(const EpochRun&) = delete;
  EpochRun& operator=(const EpochRun&) = delete;

  // False at the end, and after an error: a failed epoch ends there (the workers stopped claiming
  // batches, so waiting for the next one could hang).
  bool has_next() const { return !broken_ && (ahead_ || ahead_error_ || next_ < num_batches_); }

  // Batch next_, then next_ + 1, ...: Note [Batch order]. Rethrows whatever building it threw.
  Batch next() {
    try {
      if (!transfer_) return next_built();
      if (!transfer_->overlaps()) return transfer_->finish(transfer_->start(next_built()));
      return next_ahead();
    } catch (...) {
      broken_ = true;
      throw;
    }
  }

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;  // set instead of batch when building it threw
  };

  Batch next_built() { return workers_.empty() ? build(next_++) : take(); }

  // Note [One batch ahead]: with an asynchronous transfer (pin_memory to a GPU), handing out batch k
  // first starts the copy of batch k+1, then orders the compute stream after batch k's copy. The
  // copy of k+1 therefore runs while the GPU computes step k, which the caller queues next. A
  // failure building batch k+1 is kept and rethrown when batch k+1 is asked for, where it would
  // have been thrown without the transfer. A batch still ahead when the epoch ends or breaks is
  // finished as it is dropped (Note [Upload pool], 3).
  Batch next_ahead() {
    if (!ahead_ && !ahead_error_) ahead_ = transfer_->start(next_built());  // the epoch's first batch
    if (ahead_error_) std::rethrow_exception(std::exchange(ahead_error_, nullptr));
    InFlightBatch current = std::move(*ahead_);
    ahead_.reset();
    if (next_ < num_batches_) {
      try {
        ahead_ = transfer_->start(next_built());
      } catch (...) {
        ahead_error_ = std::current_exception();
      }
    }
    return transfer_->finish(std::move(current));
  }

  // Waits for a worker to finish batch next_ and takes it.
  Batch take() {
    std::unique_lock lock(mu_);
    ready_cv_.wait(lock, [&] { return done_.contains(next_); });
    auto node = done_.extract(next_);
    ++next_;
    lock.unlock();
    work_cv_.notify_all();  // the window moved: a waiting worker may start another batch
    Slot& slot = node.mapped();
    if (slot.error) std::rethrow_exception(slot.error);
    return std::move(slot.batch);
  }

  // Batch k is the k-th chunk of the epoch's indices; the last one may be short (unless drop_last,
  // in which case num_batches_ already leaves it out).
  Batch build(int64_t k) const {
    const int64_t begin = k * batch_size_;
    const int64_t end = std::min<int64_t>(begin + batch_size_, static_cast<int64_t>(indices_.size()));
    return dataset_->get_batch(std::span<const int64_t>(indices_).subspan(begin, end - begin));
  }

  // Note [Prefetch window]: workers claim batch numbers in increasing order from one counter, and may
  // claim batch k only while k < next_ + window_ (window_ = prefetch × workers). That bounds the
  // memory held by finished batches, and guarantees the batch the consumer waits for has been claimed:
  // every batch below the highest claimed one was claimed before it, by a worker that will finish it.
  // After a failure no new batches are claimed; the consumer still receives the batches before the
  // failed one, then the exception, exactly where num_workers = 0 would have thrown it.
  void work() {
    for (;;) {
      int64_t k;
      {
        std::unique_lock lock(mu_);
        work_cv_.wait(lock, [&] {
          return stop_ || failed_ || next_claim_ >= num_batches_ || next_claim_ < next_ + window_;
        });
        if (stop_ || failed_ || next_claim_ >= num_batches_) return;
        k = next_claim_++;
      }
      Slot slot;
      try {
        slot.batch = build(k);
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard lock(mu_);
        failed_ = failed_ || slot.error != nullptr;
        done_.emplace(k, std::move(slot));
      }
      ready_cv_.notify_one();  // only the consumer waits on it
    }
  }

  // Wakes every worker and waits for them. A worker busy building a batch finishes it first
  // (get_batch cannot be interrupted), so an early break costs at most one batch per worker.
  void stop_and_join() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  const std::shared_ptr<const Dataset> dataset_;
  const std::vector<int64_t> indices_;
  const int64_t batch_size_;
  int64_t num_batches_ = 0;
  int64_t window_ = 0;
  const std::shared_ptr<BatchTransfer> transfer_;  // null: batches stay on the host
  std::optional<InFlightBatch> ahead_;             // consumer side: Note [One batch ahead]
  std::exception_ptr ahead_error_;

  std::mutex mu_;  // guards everything below, and next_ while there are workers
  std::condition_variable work_cv_;   // workers wait for room in the window (or for stop)
  std::condition_variable ready_cv_;  // the consumer waits for batch next_
  bool broken_ = false;     // consumer side: a batch failed
  int64_t next_;            // the batch the consumer takes next
  int64_t next_claim_;      // the batch the next free worker builds
  bool stop_ = false;
  bool failed_ = false;
  std::map<int64_t, Slot> done_;  // finished batches not yet taken, by batch number
  std::vector<std::thread> workers_;
};

}  // namespace detail

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions opts)
    : DataLoader(dataset, nullptr, opts) {}

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, std::shared_ptr<Sampler> sampler,
                       DataLoaderOptions opts)
    : dataset_(std::move(dataset)), sampler_(std::move(sampler)), opts_(opts) {
  MT_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  MT_CHECK(opts.batch_size >= 1, "DataLoader: batch_size must be >= 1, got ", opts.batch_size);
  MT_CHECK(opts.num_workers >= 0, "DataLoader: num_workers must be >= 0, got ", opts.num_workers);
  MT_CHECK(opts.prefetch >= 1, "DataLoader: prefetch must be >= 1, got ", opts.prefetch);
  MT_CHECK(opts.pinned_buffers >= 1, "DataLoader: pinned_buffers must be >= 1, got ", opts.pinned_buffers);
  transfer_ = detail::BatchTransfer::for_options(opts);
  if (sampler_ != nullptr) {
    MT_CHECK(!opts.shuffle, "DataLoader: shuffle = true cannot be combined with an explicit sampler; "
                            "the sampler decides the order (e.g. DistributedSampler's shuffle option)");
  } else if (opts.shuffle) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), opts.seed);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size();
  return opts_.drop_last ? n / opts_.batch_size : (n + opts_.batch_size - 1) / opts_.batch_size;
}

DataLoader::Iterator DataLoader::begin_at(int64_t first_batch) const {
  MT_CHECK(first_batch >= 0 && first_batch <= size(), "DataLoader::begin_at: batch ", first_batch,
           " is outside the epoch's 0..", size(), " batches");
  return Iterator(std::make_shared<detail::EpochRun>(dataset_, sampler_->indices(), opts_, transfer_, first_batch));
}

DataLoader::Iterator::Iterator(std::shared_ptr<detail::EpochRun> run) : run_(std::move(run)) { fetch(); }

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  MT_CHECK(run_ != nullptr, "DataLoader: iterator advanced past the end of the epoch");
  fetch();
  return *this;
}

void DataLoader::Iterator::fetch() {
  try {
    if (run_->has_next()) {
      batch_ = run_->next();
      return;
    }
  } catch (...) {
    run_.reset();  // a failed epoch ends here: this iterator becomes the end, the workers are joined
    batch_ = {};
    throw;
  }
  run_.reset();  // the end: the last copy of the run joins its (finished) workers
  batch_ = {};
}

}  // namespace mt::data
