// LocalGroup: the replicas of one process meeting in memory (internal to parallel/).
// The in-process world is one LocalGroup; an MPI process's local replicas are one LocalGroup whose
// member 0 (the leader) also talks to the other processes.
//
// A collective is a fixed sequence of rendezvous: arrive() (publish this member's call and buffer,
// wait for all, check that every member called the same collective), then sync() once per later
// phase. Every wait obeys the timeout and the group's abort flag, so nothing hangs.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "parallel/communicator.h"
#include "parallel/spin_condition.h"

namespace onnxdp {

// One collective call as a member made it; compared across members to catch mismatches.
struct CollectiveCall {
  const char* op = "";   // "all_reduce", "broadcast", "all_gather", "barrier"
  uint64_t index = 0;    // the caller's collective number, 1-based: "all_reduce #12"
  int64_t count = -1;    // elements (all_reduce) or bytes (broadcast); -1: not compared
  DType dtype = DType::f32;
  int root = -1;
  void* data = nullptr;         // the member's buffer (all_reduce, broadcast)
  const void* cdata = nullptr;  // the member's input (all_gather)
  size_t bytes = 0;             // size of cdata (all_gather; may differ between members)
  bool untimed = false;         // waits without the timeout (an idle barrier; abort still ends it)
};
std::string describe_call(const CollectiveCall& c);  // "all_reduce #12 (1000 f32)"

class LocalGroup {
 public:
  // member_names[i]: how messages name member i ("replica 1", "local replica 1 (replica 3)").
  LocalGroup(int n, CommOptions opts, std::vector<std::string> member_names);

  int size() const { return n_; }
  const std::string& name(int member) const { return names_[member]; }

  // Publishes `call` for member `me` and waits for every member to arrive. Throws when a member
  // called a different collective (same message on every member), on abort, left or timeout.
  void arrive(int me, const CollectiveCall& call);
  // The next rendezvous of the current collective. extra_s: seconds added to the timeout, for a
  // phase that waits on the leader's inter-process work (the leader reports its own timeout first).
  void sync(int me, double extra_s = 0.0);
  // Member m's call of the current collective; valid between arrive() and the next sync().
  const CollectiveCall& call(int m) const { return calls_[m]; }

  // Pending and future waits of every member throw "<collective> aborted: <reason>". First reason wins.
  void abort(const std::string& reason);
  bool aborted(std::string* reason = nullptr) const;
  // left: member `me` will make no more calls, members waiting for it fail at once instead of
  // timing out; false: it will again (a new run of the same world).
  void leave(int me, bool left);

  // Shared scratch for the hierarchical all_gather (the leader fills it, members copy it).
  std::vector<std::vector<uint8_t>> gathered;

 private:
  void wait_all(std::unique_lock<std::mutex>& lk, int me, uint64_t target, double extra_s);

  int n_;
  CommOptions opts_;
  std::vector<std::string> names_;
  mutable std::mutex mu_;
  SpinCondition cv_;
  std::vector<uint64_t> reached_;      // per member: rendezvous count reached (monotonic)
  std::vector<uint64_t> at_arrive_;    // per member: rendezvous count at its latest arrive()
  std::vector<CollectiveCall> calls_;  // per member: its latest call
  std::vector<bool> left_;
  bool aborted_ = false;
  std::string abort_reason_;
};

// Element-wise sum of the n buffers bufs[0..n) over elements [lo, hi), in member order
// (((b0 + b1) + b2) + …), written to every buffer of dests. Reads and writes only [lo, hi).
void sum_range(const std::vector<void*>& bufs, const std::vector<void*>& dests, int64_t lo, int64_t hi,
               DType dtype);
// The slice [lo, hi) of `count` elements that member m of n reduces.
void reduce_slice(int64_t count, int n, int m, int64_t* lo, int64_t* hi);

// Throws unless dtype is one all_reduce_sum supports.
void check_reduce_dtype(DType dtype);

std::string format_seconds(double s);  // "300 s", "0.5 s"

}  // namespace onnxdp
