// Launcher detection (parallel/communicator.h's detect_launch, the one place launchers' variables
// are read) under the environments Open MPI, Hydra and Slurm's srun set, and the share of named
// GPUs each process on a machine takes (exec/device_backend.h's gpus_of_process).
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "exec/device_backend.h"
#include "graph/error.h"
#include "parallel/communicator.h"

using namespace onnxdp;

namespace {

// Every variable detect_launch reads, cleared, then `vars` set; restored on destruction.
struct LauncherEnv {
  static constexpr const char* kNames[] = {
      "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
      "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_RANK",
      "MV2_COMM_WORLD_LOCAL_SIZE", "SLURM_STEP_ID", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_PROCID",
      "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"};
  std::map<std::string, std::string> saved;
  explicit LauncherEnv(const std::map<std::string, std::string>& vars) {
    for (const char* n : kNames) {
      if (const char* v = std::getenv(n)) saved[n] = v;
      unsetenv(n);
    }
    for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  }
  ~LauncherEnv() {
    for (const char* n : kNames) unsetenv(n);
    for (const auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
  }
};

}  // namespace

TEST_CASE("launch: Slurm's compressed tasks-per-node lists") {
  CHECK(slurm_tasks_on_node("4", 0) == 4);
  CHECK(slurm_tasks_on_node("2(x3),1", 0) == 2);
  CHECK(slurm_tasks_on_node("2(x3),1", 2) == 2);
  CHECK(slurm_tasks_on_node("2(x3),1", 3) == 1);
  CHECK(slurm_tasks_on_node("2(x3),1", 4) == 0);  // no such node
  CHECK(slurm_tasks_on_node("", 0) == 0);
  CHECK(slurm_tasks_on_node("x", 0) == 0);
}

TEST_CASE("launch: local rank and size from Open MPI, Hydra and srun, with and without --ntasks-per-node") {
  {
    LauncherEnv env({});
    const LaunchInfo li = detect_launch();
    CHECK(!li.launched);
    CHECK(li.local_rank == 0);
    CHECK(li.local_size == 1);
  }
  {
    LauncherEnv env({{"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_RANK", "5"},
                     {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
    const LaunchInfo li = detect_launch();
    CHECK(li.launched);
    CHECK(li.rank == 5);
    CHECK(li.local_rank == 1);
    CHECK(li.local_size == 4);
  }
  {
    LauncherEnv env({{"PMI_SIZE", "4"}, {"PMI_RANK", "3"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}});
    const LaunchInfo li = detect_launch();
    CHECK(li.size == 4);
    CHECK(li.local_rank == 1);
    CHECK(li.local_size == 2);
  }
  {
    // srun without --ntasks-per-node: SLURM_NTASKS_PER_NODE is not set; the step's per-node list
    // says node 1 runs 3 tasks.
    LauncherEnv env({{"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "7"}, {"SLURM_PROCID", "5"},
                     {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "1"}, {"SLURM_STEP_TASKS_PER_NODE", "4,3"},
                     {"SLURM_TASKS_PER_NODE", "4(x2)"}});
    const LaunchInfo li = detect_launch();
    CHECK(li.launched);
    CHECK(li.size == 7);
    CHECK(li.local_rank == 1);
    CHECK(li.local_size == 3);
  }
  {
    LauncherEnv env({{"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_PROCID", "2"},
                     {"SLURM_LOCALID", "0"}, {"SLURM_NODEID", "1"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}});
    CHECK(detect_launch().local_size == 2);
  }
  {
    LauncherEnv env({{"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "4"}, {"SLURM_PROCID", "3"},
                     {"SLURM_LOCALID", "3"}, {"SLURM_NTASKS_PER_NODE", "4"}, {"SLURM_TASKS_PER_NODE", "2(x2)"}});
    CHECK(detect_launch().local_size == 4);  // --ntasks-per-node, when given, says it
  }
  {
    LauncherEnv env({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "0"},
                     {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
    CHECK_THROWS_WITH_AS(detect_launch(), doctest::Contains("local rank 2 of 2"), Error);
  }
}

TEST_CASE("launch: under a launcher each process takes its share of the GPUs --devices cuda:i,j names") {
  CHECK(gpus_of_process({0, 2}, 0, 1, "cuda:0,2") == std::vector<int>{0, 2});  // alone: every GPU named
  CHECK(gpus_of_process({0, 2}, 0, 2, "cuda:0,2") == std::vector<int>{0});
  CHECK(gpus_of_process({0, 2}, 1, 2, "cuda:0,2") == std::vector<int>{2});
  CHECK(gpus_of_process({4, 5, 6, 7}, 1, 2, "cuda:4,5,6,7") == std::vector<int>{6, 7});
  CHECK_THROWS_WITH_AS(gpus_of_process({0, 1, 2}, 0, 2, "cuda:0,1,2"), doctest::Contains("cannot share 3 GPUs evenly"),
                       Error);
  CHECK_THROWS_WITH_AS(gpus_of_process({0}, 1, 2, "cuda:0"), doctest::Contains("2 processes"), Error);
}
