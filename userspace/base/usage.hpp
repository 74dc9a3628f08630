// A command line the parser refused, said in the tool's own voice: one line "TOOL: error: ...",
// the option nearest to a misspelt one, exit code 2 (every tool's usage errors; 1 is for a run
// that failed). --help and --version go to CLI11 as they are.
#pragma once
#include <CLI/CLI.hpp>

namespace bb {

inline constexpr int kUsageExit = 2;

// What `catch (const CLI::ParseError& e)` returns from a tool's main.
int usage_error(const CLI::App& app, const CLI::ParseError& e);

}  // namespace bb
