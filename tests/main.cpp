// The doctest runner. Like the onnxdp binary it asks OpenMP to wait passively (exec/device.h):
// spinning threads make the training tests many times slower on a shared machine.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "exec/device.h"

int main(int argc, char** argv) {
  onnxdp::prefer_passive_openmp_wait(argv);
  return doctest::Context(argc, argv).run();
}
