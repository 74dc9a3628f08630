#include "report/pprof.hpp"

#include <zlib.h>

#include <stdexcept>
#include <string>
#include <unordered_map>

#include "profile.pb.h"

namespace bb {

namespace {

namespace pb = perftools::profiles;

// profile.proto's string table: index 0 is "".
class Strings {
public:
    explicit Strings(pb::Profile& p) : p_(p) { (*this)(""); }
    int64_t operator()(const std::string& s) {
        auto [it, added] = ids_.try_emplace(s, p_.string_table_size());
        if (added) p_.add_string_table(s);
        return it->second;
    }

private:
    pb::Profile& p_;
    std::unordered_map<std::string, int64_t> ids_;
};

}  // namespace

std::string gzip(const std::string& in) {
    z_stream z{};
    // windowBits 15 + 16: a gzip header and trailer (profile.proto on disk, HTTP's gzip).
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        throw std::runtime_error("pprof: cannot start zlib");
    std::string out(deflateBound(&z, in.size()), '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    int rc = deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    if (rc != Z_STREAM_END) throw std::runtime_error("pprof: compression failed");
    return out;
}

void write_pprof(const Profile& p, std::ostream& out) {
    pb::Profile pp;
    Strings str(pp);

    // The count first, by convention; CPU time when a sample stands for a fixed amount of it.
    const ProfileKind& kind = kind_of(p.unit);
    const bool cpu = p.period_ns > 0 && !kind.period_type.empty();
    auto add_type = [&](pb::ValueType* t, const char* type, const char* unit) {
        t->set_type(str(type));
        t->set_unit(str(unit));
    };
    // An allocation profile (-e alloc) counts words: as pprof's heap profiles do, space in
    // bytes, the default view. Nanoseconds (-e wall, -e offcpu): go tool pprof shows durations.
    const bool words = kind.words;
    add_type(pp.add_sample_type(), std::string(kind.sample_type).c_str(), kind.timed ? "nanoseconds" : "count");
    if (words) {
        add_type(pp.add_sample_type(), "alloc_space", "bytes");
        pp.set_default_sample_type(str("alloc_space"));
    }
    if (cpu) {
        const std::string type(kind.period_type);
        add_type(pp.add_sample_type(), type.c_str(), "nanoseconds");
        add_type(pp.mutable_period_type(), type.c_str(), "nanoseconds");
        pp.set_period(static_cast<int64_t>(p.period_ns));
    }
    pp.set_time_nanos(static_cast<int64_t>(p.start_unix_ns));
    pp.set_duration_nanos(static_cast<int64_t>(p.duration_ns));
    if (!p.title.empty()) pp.add_comment(str(p.title));
    // Also as comments: a profile with no sample still says whose it is.
    for (const auto& [key, value] : p.labels)
        if (!value.empty()) pp.add_comment(str(key + "=" + value));

    // Mappings: beam.smp first (pprof takes mapping 1 for the main binary), then JIT code per
    // module and shared libraries as the frames name them. No addresses: the frames are
    // symbolized already, which has_functions tells pprof.
    std::unordered_map<std::string, uint64_t> mapping_ids;
    auto mapping = [&](const std::string& name) {
        auto [it, added] = mapping_ids.try_emplace(name, mapping_ids.size() + 1);
        if (added) {
            pb::Mapping* m = pp.add_mapping();
            m->set_id(it->second);
            m->set_filename(str(name));
            m->set_has_functions(true);
            m->set_has_filenames(name.starts_with("[JIT]"));
            m->set_has_line_numbers(name.starts_with("[JIT]"));
        }
        return it->second;
    };
    mapping("beam.smp");
    for (size_t i = 0; i < p.functions.size(); i++) {
        const Function& f = p.functions[i];
        pb::Function* pf = pp.add_function();
        pf->set_id(i + 1);
        pf->set_name(str(f.name));
        pf->set_system_name(str(f.system_name));
        pf->set_filename(str(f.file));
        pf->set_start_line(f.start_line);
    }
    for (size_t i = 0; i < p.locations.size(); i++) {
        const Location& l = p.locations[i];
        pb::Location* pl = pp.add_location();
        pl->set_id(i + 1);
        pl->set_mapping_id(mapping(p.functions[l.function].mapping));
        pb::Line* line = pl->add_line();
        line->set_function_id(l.function + 1);
        line->set_line(l.line);
    }
    for (const Sample& s : p.samples) {
        pb::Sample* ps = pp.add_sample();
        for (auto it = s.stack.rbegin(); it != s.stack.rend(); ++it) ps->add_location_id(*it + 1);  // leaf first
        ps->add_value(static_cast<int64_t>(s.count));
        if (cpu) ps->add_value(static_cast<int64_t>(s.count * p.period_ns));
        if (words) ps->add_value(static_cast<int64_t>(s.count * 8));
        auto label = [&](const char* key, const std::string& value) {
            if (value.empty()) return;
            pb::Label* l = ps->add_label();
            l->set_key(str(key));
            l->set_str(str(value));
        };
        label("pid", s.pid);
        label("process", s.process);
        label("scheduler", s.scheduler);
        for (const auto& [key, value] : p.labels) label(key.c_str(), value);
    }
    std::string bytes;
    if (!pp.SerializeToString(&bytes)) throw std::runtime_error("pprof: cannot serialize the profile");
    std::string gz = gzip(bytes);
    out.write(gz.data(), static_cast<std::streamsize>(gz.size()));
}

}  // namespace bb
