// The one error type of onnxdp: a message a user can act on (DESIGN.md convention 10).
#pragma once
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace onnxdp {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace onnxdp
