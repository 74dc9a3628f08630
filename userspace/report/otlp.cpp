#include "report/otlp.hpp"

#include <map>
#include <stdexcept>
#include <unordered_map>

#include "base/text.hpp"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"
#include "report/report.hpp"

namespace bb {

namespace {

namespace common = opentelemetry::proto::common::v1;
namespace pb = opentelemetry::proto::profiles::v1development;

// The dictionary's tables: element 0 of each is its empty value (present, as the protocol
// requires: index 0 means "none"), and an entry is added once, at its first use.
class Dictionary {
public:
    explicit Dictionary(pb::ProfilesDictionary& d) : d_(d) {
        d_.add_string_table("");
        d_.add_mapping_table();
        d_.add_location_table();
        d_.add_function_table();
        d_.add_attribute_table();
        d_.add_stack_table();
        // Zero ids of the lengths trace ids and span ids have: what the protocol recommends
        // for codecs that check the lengths.
        pb::Link* none = d_.add_link_table();
        none->set_trace_id(std::string(16, '\0'));
        none->set_span_id(std::string(8, '\0'));
        // The empty key of each table is its element 0.
        strings_[""] = mappings_[""] = attributes_[{"", ""}] = stacks_[{}] = 0;
    }
    int32_t str(const std::string& s) {
        return index(strings_, s, [&] { d_.add_string_table(s); });
    }
    int32_t attribute(const std::string& key, const std::string& value) {
        return index(attributes_, {key, value}, [&] {
            pb::KeyValueAndUnit* kv = d_.add_attribute_table();
            kv->set_key_strindex(str(key));
            kv->mutable_value()->set_string_value(value);
        });
    }
    int32_t mapping(const std::string& file) {
        return index(mappings_, file, [&] { d_.add_mapping_table()->set_filename_strindex(str(file)); });
    }
    int32_t stack(const std::vector<int32_t>& locations) {
        return index(stacks_, locations, [&] {
            pb::Stack* st = d_.add_stack_table();
            for (int32_t l : locations) st->add_location_indices(l);
        });
    }
    pb::ProfilesDictionary& tables() { return d_; }

private:
    // The entry's index, added by `add` (which appends to the table) the first time.
    template <typename Map, typename Add>
    static int32_t index(Map& m, const typename Map::key_type& key, Add add) {
        auto it = m.find(key);
        if (it != m.end()) return it->second;
        add();
        const auto i = static_cast<int32_t>(m.size());
        m.emplace(key, i);
        return i;
    }
    pb::ProfilesDictionary& d_;
    std::unordered_map<std::string, int32_t> strings_, mappings_;
    std::map<std::pair<std::string, std::string>, int32_t> attributes_;
    std::map<std::vector<int32_t>, int32_t> stacks_;
};

const char* frame_type(FrameKind k) {
    switch (k) {
    case FrameKind::native: return "native";
    case FrameKind::kernel: return "kernel";
    // The VM's pseudo frames (JIT shared code, a process's root) are the Erlang runtime's.
    case FrameKind::erlang:
    case FrameKind::vm: break;
    }
    return "beam";
}

}  // namespace

std::string otlp_request(const Profile& profile, const std::vector<OtlpAttribute>& resource) {
    // The names are the target's text: escaped as every report escapes them.
    std::optional<Profile> copy = printable_copy(profile);
    const Profile& p = copy ? *copy : profile;

    opentelemetry::proto::collector::profiles::v1development::ExportProfilesServiceRequest req;
    Dictionary dict(*req.mutable_dictionary());
    pb::ResourceProfiles* rp = req.add_resource_profiles();
    for (const auto& [key, value] : resource) {
        common::KeyValue* kv = rp->mutable_resource()->add_attributes();
        kv->set_key(printable(key));
        if (const auto* s = std::get_if<std::string>(&value)) kv->mutable_value()->set_string_value(printable(*s));
        else kv->mutable_value()->set_int_value(std::get<int64_t>(value));
    }
    pb::ScopeProfiles* sp = rp->add_scope_profiles();
    sp->mutable_scope()->set_name("beam-bpf");
    pb::Profile* op = sp->add_profiles();

    const ProfileKind& kind = kind_of(p.unit);
    const bool cpu = p.period_ns > 0 && !kind.period_type.empty();
    op->mutable_sample_type()->set_type_strindex(dict.str(cpu ? std::string(kind.period_type) : p.unit));
    op->mutable_sample_type()->set_unit_strindex(dict.str(cpu || kind.timed ? "nanoseconds" : "count"));
    if (cpu) {
        *op->mutable_period_type() = op->sample_type();
        op->set_period(static_cast<int64_t>(p.period_ns));
    }
    op->set_time_unix_nano(p.start_unix_ns);
    op->set_duration_nano(p.duration_ns);

    // Profile::functions[i] is function_table[i + 1], Profile::locations[i] location_table[i + 1].
    pb::ProfilesDictionary& t = dict.tables();
    for (const Function& f : p.functions) {
        pb::Function* of = t.add_function_table();
        of->set_name_strindex(dict.str(f.name));
        of->set_system_name_strindex(dict.str(f.system_name));
        of->set_filename_strindex(dict.str(f.file));
        of->set_start_line(f.start_line);
    }
    for (const Location& l : p.locations) {
        const Function& f = p.functions[l.function];
        pb::Location* ol = t.add_location_table();
        ol->set_mapping_index(dict.mapping(f.mapping));
        pb::Line* line = ol->add_lines();
        line->set_function_index(static_cast<int32_t>(l.function + 1));
        line->set_line(l.line);
        ol->add_attribute_indices(dict.attribute("profile.frame.type", frame_type(f.kind)));
    }
    // Samples of one identity (stack and attributes) are one Sample, as the protocol asks.
    std::map<std::pair<int32_t, std::vector<int32_t>>, pb::Sample*> by_identity;
    for (const Sample& s : p.samples) {
        std::vector<int32_t> leaf_first;
        for (auto it = s.stack.rbegin(); it != s.stack.rend(); ++it)
            leaf_first.push_back(static_cast<int32_t>(*it + 1));
        std::vector<int32_t> attrs;
        if (!s.pid.empty()) attrs.push_back(dict.attribute("beam.process.pid", s.pid));
        if (!s.process.empty()) attrs.push_back(dict.attribute("beam.process.name", s.process));
        if (!s.scheduler.empty()) attrs.push_back(dict.attribute("thread.name", s.scheduler));
        auto [it, added] = by_identity.try_emplace({dict.stack(leaf_first), attrs}, nullptr);
        if (added) {
            it->second = op->add_samples();
            it->second->set_stack_index(it->first.first);
            for (int32_t a : attrs) it->second->add_attribute_indices(a);
            it->second->add_values(0);
        }
        const uint64_t value = cpu ? s.count * p.period_ns : s.count;
        it->second->set_values(0, it->second->values(0) + static_cast<int64_t>(value));
    }
    std::string bytes;
    if (!req.SerializeToString(&bytes)) throw std::runtime_error("otlp: cannot serialize the profile");
    return bytes;
}

}  // namespace bb
