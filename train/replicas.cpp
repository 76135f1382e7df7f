#include "train/replicas.h"

#include "exec/device.h"
#include "graph/error.h"
#include "parallel/workers.h"

namespace onnxdp {

std::string cuda_report() {
  CudaInfo cuda = cuda_info();
  if (!cuda.built) return "CUDA: not built (" + cuda.status + ")\n";
  std::string report = "CUDA: built; " + cuda.versions + "; ";
  if (cuda.device_count > 0)
    report += std::to_string(cuda.device_count) + (cuda.device_count == 1 ? " device" : " devices");
  else
    report += "no device (" + (cuda.status.empty() ? std::string("none found") : cuda.status) + ")";
  report += "\n";
  size_t start = 0;
  while (start < cuda.devices.size()) {
    size_t end = cuda.devices.find('\n', start);
    if (end == std::string::npos) end = cuda.devices.size();
    if (end > start) report += "  " + cuda.devices.substr(start, end - start) + "\n";
    start = end + 1;
  }
  return report;
}

DeviceList devices_of(const std::string& devices) {
  const LaunchInfo launch = detect_launch();
  if (!launch.self_launched) return parse_devices(devices, launch.local_rank, launch.local_size);
  // The parent started one worker per device of the list: this one takes the device of its rank.
  DeviceList d = parse_devices(devices, 0, 1);
  if (int(d.index.size()) != launch.size)
    fail("--devices {} names {} device{} but onnxdp started {} worker processes for it (did the machine's GPUs "
         "change?)",
         devices, d.index.size(), d.index.size() == 1 ? "" : "s", launch.size);
  d.index = {d.index[size_t(launch.rank)]};
  return d;
}

int worker_processes_for(const std::string& devices, const std::string& launch) {
  if (launch != "auto" && launch != "threads" && launch != "processes")
    fail("--launch '{}' is not understood: use auto, threads or processes", launch);
  if (launch == "threads" || detect_launch().launched) return 0;
  const DeviceList d = parse_devices(devices, 0, 1);
  const int n = int(d.index.size());
  if (n < 2) return 0;
  if (launch == "processes") return n;
  return d.kind == DeviceKind::cuda ? n : 0;
}

int run_workers(int n, const std::vector<std::string>& argv) { return run_worker_processes(n, argv); }

void for_each_replica(const DeviceList& devices, const CommOptions& comm, bool tf32, const ReplicaBody& body) {
  const int local = int(devices.index.size());
  auto device_of = [&](int k) -> std::shared_ptr<DeviceBackend> {
    if (devices.kind == DeviceKind::cpu) return nullptr;
    std::shared_ptr<DeviceBackend> d = make_device_backend(devices.kind, devices.index[size_t(k)]);
    d->allow_tf32(tf32);
    return d;
  };
  const int host_processes = detect_launch().local_size;
  if (devices.kind == DeviceKind::cpu) prepare_cpu_replicas(local, host_processes);
  if (local == 1 && !detect_launch().launched) {
    body(nullptr, device_of(0), 0);
    return;
  }
  CommWorld world = make_world(local, comm);
  run_replicas(world, [&](Communicator& c) {
    use_replica_threads(local, host_processes);
    int k = 0;
    while (world[size_t(k)].get() != &c) ++k;
    body(&c, device_of(k), k);
  });
}

}  // namespace onnxdp
