#include "train/replicas.h"

#include "exec/device.h"

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
  return parse_devices(devices, launch.local_rank, launch.local_size);
}

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
