#include "exec/cuda/host_stream.h"

#include <chrono>
#include <utility>

namespace onnxdp::cuda {

HostStream::HostStream(std::string name) : name_(std::move(name)), thread_([this] { main(); }) {}

HostStream::~HostStream() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HostStream::enqueue(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(work));
    ++queued_;
  }
  cv_.notify_all();
}

HostEvent HostStream::record() {
  std::lock_guard<std::mutex> lk(mu_);
  return HostEvent{this, queued_};
}

void HostStream::wait(HostEvent e) {
  if (!e.stream || e.stream == this) return;  // never recorded, or already in this queue's order
  enqueue([this, s = e.stream, t = e.ticket] {
    const auto t0 = std::chrono::steady_clock::now();
    s->wait_for_ticket(t);
    waited_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  });
}

double HostStream::take_waited_ms() { return double(waited_ns_.exchange(0)) / 1e6; }

bool HostStream::done(HostEvent e) const {
  if (!e.stream) return true;
  std::lock_guard<std::mutex> lk(e.stream->mu_);
  return e.stream->done_ >= e.ticket;
}

void HostStream::wait_for_ticket(uint64_t ticket) const {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return done_ >= ticket; });
}

void HostStream::synchronize(const std::function<void()>& poll) {
  std::unique_lock<std::mutex> lk(mu_);
  const uint64_t target = queued_;
  while (done_ < target) {
    cv_.wait_for(lk, std::chrono::milliseconds(1), [&] { return done_ >= target; });
    if (done_ >= target || !poll) continue;
    lk.unlock();
    poll();
    lk.lock();
  }
  if (std::exception_ptr e = std::exchange(error_, nullptr)) std::rethrow_exception(e);
}

void HostStream::drain() {
  std::unique_lock<std::mutex> lk(mu_);
  const uint64_t target = queued_;
  cv_.wait(lk, [&] { return done_ >= target; });
}

bool HostStream::idle() const {
  std::lock_guard<std::mutex> lk(mu_);
  return done_ == queued_;
}

void HostStream::main() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopped, and everything queued ran
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    const bool skip = error_ != nullptr;  // after an error nothing more runs until it is reported
    lk.unlock();
    std::exception_ptr failed;
    if (!skip) {
      try {
        work();
      } catch (...) {
        failed = std::current_exception();
      }
    }
    work = nullptr;  // its captures go before the work counts as run
    lk.lock();
    if (failed && !error_) error_ = failed;
    ++done_;
    cv_.notify_all();
  }
}

}  // namespace onnxdp::cuda
