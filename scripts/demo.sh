#!/usr/bin/env bash
# Sets up beam-bpf, starts a demo Erlang VM (scripts/demo_workload.erl) and profiles it:
# the hottest functions, one stack of each scheduler, its processes (and one's heap), which
# code allocates, where every process waits (-e wall), where its threads block (-e offcpu), who triggers GC, the host agent (files
# and a push to a local stand-in for Pyroscope), and flame graphs (also by process and of
# process time), pprof and folded-stack files. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

work=$(mktemp -d /tmp/beam-bpf-demo.XXXXXX)
erlc -o "$work" scripts/demo_workload.erl
# `erl` execs beam.smp, so $! is the VM's OS pid.
erl -noshell -pa "$work" -eval 'demo_workload:start()' > "$work/vm.log" 2>&1 &
vm=$!
trap 'kill $vm 2>/dev/null || true; rm -f "/tmp/perf-$vm.map"' EXIT
sleep 2

echo "== beam-bpf-vms: the BEAM VMs on this host"
build/beam-bpf-vms
echo
echo "== beam-bpf-sample -d 5 $vm: the hottest Erlang functions"
build/beam-bpf-sample -d 5 -t 15 "$vm"
echo
echo "== beam-bpf-sample --pstack $vm: what each scheduler runs right now"
build/beam-bpf-sample --pstack "$vm"
echo "== beam-bpf-procs -t 8 $vm: the processes holding the most memory, read from outside"
build/beam-bpf-procs -t 8 "$vm"
echo
echo "== beam-bpf-procs --inspect demo_cache -t 6 $vm: what one process's heap holds, biggest first"
build/beam-bpf-procs --inspect demo_cache -t 6 "$vm"
echo
echo "== beam-bpf-procs --binaries -t 5 $vm: the node's off-heap (refc) binaries, biggest first, and who holds each"
build/beam-bpf-procs --binaries -t 5 "$vm"
echo
echo "== beam-bpf-procs --ets -t 5 $vm: every ETS table, biggest first, read from the tables' own counters"
build/beam-bpf-procs --ets -t 5 "$vm"
echo
echo "== beam-bpf-procs --watch 1 --count 2 -t 5 $vm: what grew in each second, and how busy each scheduler was (the VM's own busy: spinning is idle)"
build/beam-bpf-procs --watch 1 --count 2 -t 5 "$vm"
echo
# --watchpoints-in-vm: the demo's VM is ours to lose, and this machine is likely a virtual one
# (docs/allocation-profiling.md#virtual-machines).
echo "== beam-bpf-sample -e alloc --watchpoints-in-vm -d 3 $vm: which Erlang code allocates the words that drive GC"
build/beam-bpf-sample -e alloc --watchpoints-in-vm -d 3 -t 12 "$vm"
echo
echo "== beam-bpf-sample -e wall -d 3 $vm: where every process spends its time, running or not, and whom it waits for"
build/beam-bpf-sample -e wall -d 3 -t 10 "$vm"
echo
echo "== beam-bpf-sample -e offcpu -d 3 $vm: where the VM's threads block (locks, system calls; idle named as idle)"
build/beam-bpf-sample -e offcpu -d 3 -t 10 "$vm"
echo
echo "== beam-bpf-blame -d 3 erts_garbage_collect $vm: who triggers garbage collection"
build/beam-bpf-blame -d 3 -t 10 erts_garbage_collect "$vm"
echo
echo "== beam-bpf-agent -e cpu,offcpu --every 2 for 5 s: every VM on this host, a CPU and an off-CPU pprof profile per VM per interval,"
echo "   to files and pushed to a local stand-in for Pyroscope's ingest API (tests/agent/pyroscope_receiver.py)"
python3 tests/agent/pyroscope_receiver.py --out "$work/pushed" --port-file "$work/port" > /dev/null &
receiver=$!
trap 'kill $vm $receiver 2>/dev/null || true; rm -f "/tmp/perf-$vm.map"' EXIT
while [ ! -s "$work/port" ]; do sleep 0.1; done
timeout -s TERM 5 build/beam-bpf-agent -e cpu,offcpu --every 2 --output "$work/agent" --push "http://127.0.0.1:$(cat "$work/port")" \
  --match demo_workload --stats "$work/agent-stats.json" || true
ls "$work"/agent/*/
echo "pushed: $(ls "$work"/pushed/*.json | wc -l) profiles; the labels of the first:"
python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["query"]["name"])' "$(ls "$work"/pushed/*.json | head -1)"
echo
echo "== beam-bpf-perfmap $vm: /tmp/perf-$vm.map written from outside, as +JPperf map has the VM write it"
build/beam-bpf-perfmap "$vm"
grep -m 5 'demo_workload:' "/tmp/perf-$vm.map"
echo "(perf and bcc read it for JIT code mapped anonymously: a VM run with +JPperf, or OTP 27's +JMsingle true; see docs/perfmap.md)"
echo
build/beam-bpf-sample -d 3 --format html,pprof,folded -o "$work/demo" "$vm"
build/beam-bpf-sample -d 3 --by-process --format html -o "$work/demo-by-process.html" "$vm"
build/beam-bpf-sample -e wall -d 3 --format html -o "$work/demo-wall.html" "$vm"
echo "a flame graph to open in a browser: $work/demo.html (by Erlang process: $work/demo-by-process.html; where processes wait: $work/demo-wall.html)"
echo "for go tool pprof: $work/demo.pb.gz; folded stacks: $work/demo.folded"
