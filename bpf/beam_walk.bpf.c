// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Walks the Erlang stack of the process a BEAM scheduler is running, at the instant of a
 * perf sample (or at the entry of a probed function), and emits one bb_record.
 *
 * Everything read here belongs to the target VM and is untrusted: each read is bounded and
 * may fail, and a failure flags the record instead of losing the sample.
 *
 * Every program (SEC) is in this file; the units included below hold helpers and maps only,
 * each after those it uses.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "beam_bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#include "maps.bpf.h"
#include "memory.bpf.h"
#include "process.bpf.h"
#include "erlang_walk.bpf.h"
#include "native_walk.bpf.h"
#include "blame.bpf.h"
#include "emit.bpf.h"
#include "alloc_watch.bpf.h"
#include "offcpu.bpf.h"
#include "sample.bpf.h"

/*
 * The VM calls __jit_debug_register_code() with its JIT descriptor's mutex held, after linking
 * a new jit_code_entry (or before unlinking and freeing one): struct jit_descriptor is
 * { u32 version; u32 action_flag; jit_code_entry *relevant_entry; jit_code_entry *first_entry },
 * and an entry { next, prev, symfile_addr, symfile_size }. The record carries the instant and
 * what the user-space index needs to recognise the entry when it reads the list.
 */
SEC("uprobe")
int on_code_event(struct pt_regs *ctx)
{
	struct bb_record *rec;
	__u64 desc[3], entry[4];
	__u32 zero = 0;
	const struct bb_vm *v = this_vm();
	struct scratch *s = bpf_map_lookup_elem(&scratch_map, &zero);

	if (!s || !v)
		return 0;
	rec = &s->rec;
	__builtin_memset(rec, 0, bb_record_size(BB_CODE_EVENT_NFRAMES));
	if (bpf_probe_read_user(desc, sizeof(desc), (void *)v->jit_descriptor) ||
	    bpf_probe_read_user(entry, sizeof(entry), (void *)desc[1]) ||
	    bpf_probe_read_user(&rec->frames[2], 24, (void *)entry[2])) {
		count(BB_C_CODE_EVENTS_LOST);
		return 0;
	}
	rec->time_ns = bpf_ktime_get_ns();
	rec->tid = (__u32)bpf_get_current_pid_tgid();
	rec->tgid = v->tgid;
	rec->where = BB_WHERE_CODE_EVENT;
	rec->BB_CODE_EVENT_ACTION = desc[0] >> 32;
	rec->BB_CODE_EVENT_ENTRY = desc[1];
	rec->frames[0] = entry[2];
	rec->frames[1] = entry[3];
	rec->nframes = BB_CODE_EVENT_NFRAMES;
	/* The reader refreshes its code index at once, while the entry's symfile still exists. */
	if (bpf_ringbuf_output(&records, rec, bb_record_size(BB_CODE_EVENT_NFRAMES), BPF_RB_FORCE_WAKEUP)) {
		count(BB_C_CODE_EVENTS_LOST);
		return 0;
	}
	count(BB_C_CODE_EVENTS);
	return 0;
}

/* The sampling programs (sample.bpf.h), each with a *_fast twin for kernels with may_goto
 * (erlang_walk.bpf.h); user space loads one of each pair (userspace/sampling/walker.cpp). */
SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx) { return perf_sample(ctx, false); }

SEC("perf_event")
int on_sample_fast(struct bpf_perf_event_data *ctx) { return perf_sample(ctx, true); }

SEC("uprobe")
int on_call(struct pt_regs *ctx) { return call_sample(ctx, false, true); }

SEC("uprobe")
int on_call_fast(struct pt_regs *ctx) { return call_sample(ctx, true, true); }

SEC("uprobe")
int on_heap_alloc(struct pt_regs *ctx) { return heap_alloc_sample(ctx, false); }

SEC("uprobe")
int on_heap_alloc_fast(struct pt_regs *ctx) { return heap_alloc_sample(ctx, true); }

/* -e alloc's flips (alloc_watch.bpf.h): at each collection's return, where the kernel has no
 * uprobe sessions. */
SEC("uretprobe.s")
int on_gc_return(struct pt_regs *ctx)
{
	__u64 interval = watch.interval;

	if (!interval || interval > 0xffffffffULL)
		return 0;
	return watch_gc_return(ctx, bpf_get_prandom_u32() % interval, ~0ULL, false);
}

/* The same as a uprobe session (kernel 6.13), which also samples each collection's entry as
 * on_call does; its return is seen only if the entry asks (watch_gc_session_entry()). */
SEC("uprobe.s")
int on_gc_session(struct pt_regs *ctx)
{
	__u64 *cookie = bpf_session_cookie(), interval = watch.interval;
	bool free;

	if (!cookie)
		return 1;
	if (bpf_session_is_return())
		return watch_gc_return(ctx, *cookie & 0xffffffffULL, *cookie >> 32, true);
	/* Free from here to the return, or no candidate: a return is seen only if it was free here
	 * (no map of it per thread, as the separate probes need). */
	free = watch.state == BB_WATCH_IDLE;
	call_sample(ctx, false, false);  /* the exact words, and the end of the process's own watch */
	return watch_gc_session_entry(ctx, cookie, interval, free);
}

/* -e offcpu (offcpu.bpf.h): a VM thread blocks, a thread is woken, and a system call returns. */
SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_ns();

	/* Preempted while it was going to sleep, a thread is still runnable: waiting for a CPU. */
	if (!preempt && (prev_state & BB_TASK_BLOCKED) && vm_task(prev))
		offcpu_block(prev, now);
	/* Woken while the waker's wakeup was not seen (its thread blocked before the attach). */
	offcpu_unblock(BPF_CORE_READ(next, pid), now);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(on_wakeup, struct task_struct *p)
{
	offcpu_unblock(BPF_CORE_READ(p, pid), bpf_ktime_get_ns());
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
	return offcpu_sample(regs, false);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit_fast, struct pt_regs *regs, long ret)
{
	return offcpu_sample(regs, true);
}

/* -e alloc: a write to the watched word (watch_hit()). */
SEC("perf_event")
int on_watch(struct bpf_perf_event_data *ctx) { return watch_sample(ctx, false); }

SEC("perf_event")
int on_watch_fast(struct bpf_perf_event_data *ctx) { return watch_sample(ctx, true); }
