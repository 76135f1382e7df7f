// `--config FILE.toml` for a subcommand: option values from a TOML file, the command line winning.
//
// CLI11 2.1 (Debian 12) has set_config(), but only the top-level app reads its file: on a
// subcommand it is accepted and silently ignored, a top-level file applies to a subcommand only
// inside its [section], keys must be spelt exactly like the option (learning_rate does not match
// --learning-rate) and unknown keys are ignored by default. So the subcommand takes --config as a
// plain option, and its action calls apply_config_file() before it reads any option. The TOML is
// parsed by CLI11's own reader (CLI::ConfigTOML); the values go through each option's callback,
// conversion and validators as if typed on the command line.
//
// Accepted:
//   lr = 3e-4                   # a key is an option's long name without the dashes
//   learning_rate = 3e-4        # '_' and '-' are the same in keys (Hugging Face spelling works)
//   nesterov = true             # flags: true / false
//   freeze = ["^conv1", "bn"]   # repeatable options: an array
//   [train]                     # keys may also sit in a section named like the subcommand
// An unknown key, another section, a bad value, or a key excluded by another option (given on the
// command line or in the file, e.g. --epochs with max_steps) is an onnxdp error naming the file
// and the key.
// Header-only so that tests can use it without the CLI's sources.
#pragma once
#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>

#include "graph/error.h"
#include "graph/input_file.h"

namespace onnxdp::cli {

inline void apply_config_file(CLI::App& sub, const std::string& path) {
  std::vector<std::pair<CLI::Option*, std::string>> applied;  // option, the key that set it
  std::vector<CLI::ConfigItem> items;
  // CLI11 reads to the end of the file: a regular file of at most 16 MiB (a config is a few
  // lines), checked first, so that /dev/zero or a pipe is an error instead of a read without end.
  uint64_t size = 0;
  if (const std::string why = input_file_problem(path, 16 * kMiB, "config files", &size); !why.empty())
    fail("config '{}': cannot read it: {}", path, why);
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::Error& e) {
    fail("config '{}': cannot read it: {}", path, e.what());
  }
  for (const CLI::ConfigItem& item : items) {
    // "++" and "--" are CLI11's section open / close markers, not keys.
    if (item.name == "++" || item.name == "--") continue;
    if (!(item.parents.empty() || (item.parents.size() == 1 && item.parents[0] == sub.get_name())))
      fail("config '{}': unknown section '{}' (keys go at the top or under [{}])", path,
           CLI::detail::join(item.parents, "."), sub.get_name());
    std::string name = item.name;
    std::replace(name.begin(), name.end(), '_', '-');
    CLI::Option* opt = sub.get_option_no_throw("--" + name);
    if (!opt && name.size() == 1) opt = sub.get_option_no_throw("-" + name);
    if (!opt || !opt->get_configurable() || opt == sub.get_help_ptr())
      fail("config '{}': unknown key '{}' (not an option of `onnxdp {}`)", path, item.fullname(), sub.get_name());
    for (const auto& [seen, key] : applied)
      if (seen == opt) fail("config '{}': key '{}' sets {} again (first set by '{}')", path, item.fullname(), opt->get_name(), key);
    if (opt->count() > 0) continue;  // given on the command line: that wins
    try {
      if (opt->get_expected_min() == 0)  // a flag
        opt->add_result(opt->get_flag_value(name, CLI::ConfigTOML().to_flag(item)));
      else
        opt->add_result(item.inputs);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      fail("config '{}': key '{}': {}", path, item.fullname(), e.what());
    }
    applied.emplace_back(opt, item.fullname());
  }
  // CLI11 checked excludes()/needs() during parsing, before the file's values existed.
  for (const auto& [opt, key] : applied) {
    for (CLI::Option* other : opt->get_excludes())
      if (other->count() > 0)
        fail("config '{}': key '{}' cannot be used with {}", path, key, other->get_name());
    for (CLI::Option* other : opt->get_needs())
      if (other->count() == 0) fail("config '{}': key '{}' needs {}", path, key, other->get_name());
  }
}

}  // namespace onnxdp::cli
