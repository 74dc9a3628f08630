#include "target/discovery.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <memory>

#include "target/node_name.hpp"

namespace bb {

std::string read_bounded(const std::string& path, size_t max) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {};
    std::string out;
    char buf[4096];
    while (out.size() < max) {
        ssize_t n = read(fd, buf, std::min(sizeof buf, max - out.size()));
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    return out;
}

namespace {

std::vector<std::string> split_nul(const std::string& s) {
    std::vector<std::string> out;
    size_t at = 0;
    while (at < s.size()) {
        size_t end = s.find('\0', at);
        if (end == std::string::npos) end = s.size();
        out.push_back(s.substr(at, end - at));
        at = end + 1;
    }
    return out;
}

// Field 22 of /proc/PID/stat, after the command in parentheses (which may hold anything).
uint64_t start_time_of(const std::string& stat) {
    size_t close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) return 0;
    size_t at = close_paren + 2;  // field 3
    for (int field = 3; field < 22 && at < stat.size(); field++) {
        at = stat.find(' ', at);
        if (at == std::string::npos) return 0;
        at++;
    }
    uint64_t v = 0;
    std::from_chars(stat.data() + std::min(at, stat.size()), stat.data() + stat.size(), v);
    return v;
}

bool is_hex64(std::string_view s) {
    return s.size() == 64 &&
           std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

}  // namespace

bool is_beam_exe(const std::string& exe) {
    std::string base = exe.substr(exe.rfind('/') + 1);
    if (base.ends_with(" (deleted)")) base.resize(base.size() - 10);
    return base.starts_with("beam") && base.ends_with(".smp");
}

std::optional<BeamProcess> read_beam(const std::string& proc, pid_t pid) {
    const std::string dir = proc + "/" + std::to_string(pid);
    ProcTexts t;
    char link[4096];  // PATH_MAX: readlink writes no more
    ssize_t n = readlink((dir + "/exe").c_str(), link, sizeof link);
    if (n <= 0) return std::nullopt;  // gone, a kernel thread, or not ours to read
    t.exe.assign(link, static_cast<size_t>(n));
    if (!is_beam_exe(t.exe)) return std::nullopt;  // the other files of every process are not read
    t.stat = read_bounded(dir + "/stat", 4096);
    t.cmdline = read_bounded(dir + "/cmdline", kMaxCmdline);
    t.environ = read_bounded(dir + "/environ", kMaxEnviron);
    t.cgroup = read_bounded(dir + "/cgroup", 16 * 1024);
    t.status = read_bounded(dir + "/status", 16 * 1024);
    auto p = parse_beam(pid, t);
    if (p && proc == "/proc") p->node_in_memory = node_name_in_memory(pid, p->start_time);
    return p;
}

std::optional<BeamProcess> parse_beam(pid_t pid, const ProcTexts& t) {
    BeamProcess p;
    p.pid = pid;
    p.exe = t.exe;
    if (!is_beam_exe(p.exe)) return std::nullopt;
    p.start_time = start_time_of(t.stat);
    if (p.start_time == 0) return std::nullopt;
    p.argv = split_nul(t.cmdline.substr(0, kMaxCmdline));
    // Only the keys that name the VM are kept: the rest may hold secrets and is no business of ours.
    for (const std::string& e : split_nul(t.environ.substr(0, kMaxEnviron)))
        for (const char* key : kEnvKeys)
            if (e.starts_with(key)) p.env.push_back(e.substr(0, 1024));
    const std::string& cg = t.cgroup;
    for (size_t at = 0; at < cg.size();) {
        size_t end = cg.find('\n', at);
        if (end == std::string::npos) end = cg.size();
        std::string_view line(cg.data() + at, end - at);
        at = end + 1;
        size_t c1 = line.find(':'), c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
        if (c2 == std::string_view::npos) continue;
        std::string path(line.substr(c2 + 1));
        if (line.starts_with("0::")) {  // cgroup v2: the one that counts
            p.cgroup = path;
            break;
        }
        if (p.cgroup.empty()) p.cgroup = path;
    }
    const std::string& status = t.status;
    if (size_t at = status.find("\nNSpid:"); at != std::string::npos) {
        size_t end = status.find('\n', at + 1);
        std::string_view line(status.data() + at + 7, (end == std::string::npos ? status.size() : end) - at - 7);
        size_t last = line.find_last_of(" \t");
        if (last != std::string_view::npos) line.remove_prefix(last + 1);
        std::from_chars(line.data(), line.data() + line.size(), p.ns_pid);
    }
    return p;
}

std::vector<BeamProcess> find_beams(const std::string& proc) {
    std::vector<BeamProcess> out;
    std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(proc.c_str()), closedir);
    if (!d) return out;
    while (dirent* e = readdir(d.get())) {
        pid_t pid = 0;
        auto [end, ec] = std::from_chars(e->d_name, e->d_name + strlen(e->d_name), pid);
        if (ec != std::errc() || *end || pid <= 0) continue;
        if (auto p = read_beam(proc, pid)) out.push_back(std::move(*p));
    }
    std::sort(out.begin(), out.end(), [](const BeamProcess& a, const BeamProcess& b) { return a.pid < b.pid; });
    return out;
}

std::string node_name(const std::vector<std::string>& argv) {
    for (size_t i = 0; i + 1 < argv.size(); i++)
        if (argv[i] == "-name" || argv[i] == "-sname") return argv[i + 1];
    return {};
}

std::string env_value(const std::vector<std::string>& env, std::string_view key) {
    for (const std::string& e : env)
        if (e.starts_with(key)) return e.substr(key.size());
    return {};
}

std::string release_name(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    for (const char* key : {"RELEASE_NAME=", "REL_NAME="})
        if (std::string v = env_value(env, key); !v.empty()) return v;
    std::string root, boot;
    for (size_t i = 0; i + 1 < argv.size(); i++) {
        if (argv[i] == "-root" && root.empty()) root = argv[i + 1];
        if (argv[i] == "-boot" && boot.empty()) boot = argv[i + 1];
    }
    // OTP's own boot scripts (start_clean, start_sasl, no_dot_erlang) live in ROOT/releases.
    if (boot.empty() || (!root.empty() && boot.starts_with(root + "/"))) return {};
    size_t rel = boot.rfind("/releases/");
    if (rel == std::string::npos || rel == 0) return {};
    size_t dir = boot.rfind('/', rel - 1);
    return boot.substr(dir == std::string::npos ? 0 : dir + 1, rel - (dir == std::string::npos ? 0 : dir + 1));
}

std::string container_id(const std::string& cgroup) {
    std::string found;
    for (size_t i = 0; i + 64 <= cgroup.size(); i++) {
        bool starts = i == 0 || !std::isxdigit(static_cast<unsigned char>(cgroup[i - 1]));
        bool ends = i + 64 == cgroup.size() || !std::isxdigit(static_cast<unsigned char>(cgroup[i + 64]));
        if (starts && ends && is_hex64(std::string_view(cgroup).substr(i, 64))) found = cgroup.substr(i, 64);
    }
    return found;
}

namespace {

// "1234abcd-..." (8-4-4-4-12 hex digits, '-' or '_' between): the systemd driver writes the
// uid's dashes as underscores, a dash being its slice hierarchy's separator.
bool is_uid(std::string_view s) {
    if (s.size() != 36) return false;
    for (size_t i = 0; i < 36; i++) {
        bool sep = i == 8 || i == 13 || i == 18 || i == 23;
        if (sep ? s[i] != '-' && s[i] != '_' : !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
    }
    return true;
}

}  // namespace

std::string pod_uid(const std::string& cgroup) {
    if (cgroup.find("kubepods") == std::string::npos) return {};
    std::string found;
    for (size_t at = 0; at < cgroup.size();) {
        size_t end = cgroup.find('/', at);
        if (end == std::string::npos) end = cgroup.size();
        std::string_view seg(cgroup.data() + at, end - at);
        at = end + 1;
        if (seg.ends_with(".slice")) seg.remove_suffix(6);
        // "pod<uid>" alone (cgroupfs) or at the end of "kubepods-<qos>-pod<uid>" (systemd).
        if (seg.size() >= 39 && seg.substr(seg.size() - 39, 3) == "pod" && is_uid(seg.substr(seg.size() - 36)) &&
            (seg.size() == 39 || seg[seg.size() - 40] == '-'))
            found = seg.substr(seg.size() - 36);
    }
    std::replace(found.begin(), found.end(), '_', '-');
    return found;
}

std::string clean(const std::string& text, size_t max) {
    std::string out = text.substr(0, max);
    for (char& c : out)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    return out;
}

VmLabels labels_of(const BeamProcess& p) {
    VmLabels l;
    if (p.node_in_memory && !p.node_in_memory->empty()) {
        l.node = clean(*p.node_in_memory);
    } else {
        l.node = clean(node_name(p.argv));
        l.node_from_command_line = !l.node.empty();
    }
    l.release = clean(release_name(p.argv, p.env));
    l.container_id = container_id(p.cgroup);
    l.cgroup = clean(p.cgroup, 1024);
    l.pod_uid = pod_uid(p.cgroup);
    // Kubernetes' own bounds: a pod name is a DNS subdomain (253), a namespace a label (63).
    l.pod_name = clean(env_value(p.env, "POD_NAME="), 253);
    l.pod_namespace = clean(env_value(p.env, "POD_NAMESPACE="), 63);
    return l;
}

}  // namespace bb
