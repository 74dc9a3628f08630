// The one error vocabulary of every tool:
// - UserError: a problem the user can act on (a bad option, a VM that cannot be read, a budget
//   spent), thrown up to guarded_main(), which prints it as one line "TOOL: error: ..." and
//   exits 1. Any other exception is a bug, printed the same way.
// - Result<T>: what a parser of untrusted bytes returns (a table, a symbol file, a memory
//   image): the value, or why there is none. Parsers never throw on bad input.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace bb {

struct UserError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The failure side of a Result: Result<T> r = Fail{"why"};
struct Fail {
    std::string why;
};

// std::expected<T, std::string> in the shape this toolchain (GCC 12, C++20) can build.
template <typename T>
class Result {
public:
    Result(T value) : v_(std::move(value)) {}
    Result(Fail f) : v_(std::move(f)) {}
    explicit operator bool() const { return v_.index() == 0; }
    bool has_value() const { return v_.index() == 0; }
    T& operator*() { return std::get<0>(v_); }
    const T& operator*() const { return std::get<0>(v_); }
    T* operator->() { return &std::get<0>(v_); }
    const T* operator->() const { return &std::get<0>(v_); }
    // Why there is no value ("" when there is one).
    const std::string& error() const {
        static const std::string none;
        return has_value() ? none : std::get<1>(v_).why;
    }
    // The value, or UserError(context + ": " + why).
    T& value_or_throw(const std::string& context) {
        if (!has_value()) throw UserError(context.empty() ? error() : context + ": " + error());
        return **this;
    }

private:
    std::variant<T, Fail> v_;
};

// The one prefix of a tool's messages ("beam-bpf-sample"), set by guarded_main().
const char* tool_name();
// strerror of an errno value or of a libbpf-style negative one.
std::string errno_text(int err);

// Runs `body` as the tool `prog`: UserError and any other exception become one line
// "PROG: error: ..." on stderr and exit code 1.
int guarded_main(const char* prog, const std::function<int()>& body);

}  // namespace bb
