// beam-bpf-offsets: writes the offsets table (userspace/target/offsets/*.txt) for an OTP release and its
// layout-changing build features, read from the DWARF of a -g build of that release.
#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <iostream>

#include "run/output.hpp"
#include "target/offsets.hpp"
#include "target/offsets_dwarf.hpp"
#include "target/release.hpp"

namespace {

int fail(const std::string& why) {
    std::cerr << "beam-bpf-offsets: " << why << "\n";
    return 1;
}

bool is_build_id(const std::string& s) {
    if (s.empty() || s.size() % 2 != 0) return false;
    for (char c : s)
        if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{
        "Reads the struct offsets beam-bpf needs from the DWARF of a beam.smp and prints them as an\n"
        "offsets table (the format of userspace/target/offsets/*.txt).\n"
        "\n"
        "A table is for an OTP release and its layout-changing build features (lock counting,\n"
        "dynamic trace, ...), both read from the binary's own system version string: it serves every\n"
        "build of that release with those features, stripped or not. --build-id also names one\n"
        "stripped binary the table was made for (it is then preferred for that build).\n"
        "scripts/make-offsets.sh runs this on the -g builds of each tested release.",
        "beam-bpf-offsets"};
    std::string build_id, output, beam;
    app.add_option("--build-id", build_id,
                   "Build-id (hex) of the stripped binary the table was made for; default: none");
    app.add_option("-o,--output", output, "Write the table to FILE instead of stdout")->option_text("FILE");
    app.add_option("BEAM_SMP_WITH_DWARF", beam, "A beam.smp with DWARF (or its separate debug file)")->required();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help
        return fail(e.what());
    }

    if (!build_id.empty() && !is_build_id(build_id))
        return fail("--build-id " + build_id + " is not an even number of hex digits");
    auto offsets = bb::offsets_from_dwarf(beam);
    if (!offsets) return fail(offsets.error());
    auto build = bb::read_vm_build_file(beam);
    if (!build) return fail(beam + " has no Erlang/OTP system version string: not a beam.smp");
    offsets->otp_release = std::to_string(build->otp_release);
    offsets->features = build->features;
    for (char& c : build_id) c = char(std::tolower(static_cast<unsigned char>(c)));
    offsets->build_id = build_id;
    const std::string table = bb::format_table(*offsets);

    if (output.empty()) {
        std::cout << table << std::flush;
        return std::cout ? 0 : fail("cannot write to stdout");
    }
    // Written aside and renamed, so a failed run never leaves half a table behind (nor writes
    // through a link planted at the name, nor replaces a device named as the output).
    try {
        bb::write_file_atomically(output, table);
    } catch (const bb::UserError& e) {
        return fail(e.what());
    }
    return 0;
}
