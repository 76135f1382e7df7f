// The trainer's reader: one background thread, for the trainer's life, that reads the next
// micro-batch while a step runs (train/trainer.cpp's batch_at).
//
// A thread started per micro-batch (std::async) cost its creation and, at its exit, a madvise of
// its stack that flushes the TLBs of the process's other threads by interrupts: with the pages
// given back per batch (MappedFile::release), about a tenth of the mlp's 0.6 ms step on a 2-core
// VM. This thread is started on the first job and joined when the reader goes.
#pragma once
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace onnxdp {

template <class R>
class ReadAhead {
 public:
  ReadAhead() = default;
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;
  // Finishes the job in hand (if any), then joins the thread.
  ~ReadAhead() {
    {
      std::lock_guard l(m_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // Runs job on the thread once the job before it has finished (one in hand at a time, so a job
  // abandoned by its caller never runs beside the next); its value, or what it threw, comes out
  // of the future.
  std::future<R> run(std::function<R()> job) {
    std::packaged_task<R()> task(std::move(job));
    std::future<R> result = task.get_future();
    {
      std::unique_lock l(m_);
      if (!thread_.joinable()) thread_ = std::thread([this] { serve(); });
      wake_.wait(l, [&] { return !busy_; });
      task_ = std::move(task);
      busy_ = true;
    }
    wake_.notify_all();
    return result;
  }

 private:
  void serve() {
    for (;;) {
      std::packaged_task<R()> task;
      {
        std::unique_lock l(m_);
        wake_.wait(l, [&] { return busy_ || stop_; });
        if (!busy_) return;  // stopping, nothing in hand
        task = std::move(task_);
      }
      task();  // (packaged_task keeps what the job throws for the future)
      {
        std::lock_guard l(m_);
        busy_ = false;
      }
      wake_.notify_all();
    }
  }

  std::mutex m_;
  std::condition_variable wake_;
  std::packaged_task<R()> task_;
  bool busy_ = false, stop_ = false;
  std::thread thread_;  // last: started after the members it reads
};

}  // namespace onnxdp
