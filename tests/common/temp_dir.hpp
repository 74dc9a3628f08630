// A directory of the test's own, removed with all it holds at the end: for the unit and the
// integration tests alike.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>

namespace bbt {

struct TempDir {
    std::filesystem::path path;
    TempDir() {
        char tmpl[] = "/tmp/bb-test-XXXXXX";
        if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
};

}  // namespace bbt
