/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * -e alloc: which code allocates, sampled where it allocates. A hardware write watchpoint on one
 * word of a process's heap fires in the instruction that writes it, i.e. the allocation that
 * takes that word: its stack, weighed by the words a sample stands for, is the record.
 *
 * The heap is bump-allocated between collections: an epoch (what a process allocates between two
 * collections) fills its block upwards from the heap top the collection left, each word once. A
 * word drawn uniformly in [heap top, block end), watched for the whole epoch, samples every word
 * of the epoch with the same chance. The epoch is chosen by a coin flip when the collection
 * returns, before its first word is allocated, and the collection's return waits (microseconds)
 * until user space has moved the watchpoints: no word of a chosen epoch goes unwatched, whatever
 * block the collector gave it. Both choices are blind to what the epoch holds, which keeps
 * periodic code unbiased (the stack at the GC entry alone charged all of 3:1 work to one
 * function). The states: include/bb_alloc_watch.h.
 *
 * Included by beam_walk.bpf.c before sample.bpf.h, which ends a watch at a GC entry
 * (watch_gc_entry()) and samples an accepted hit (watch_sample()); the programs are in
 * beam_walk.bpf.c.
 */
#pragma once
#include "bb_alloc_watch.h"

/* Shared with user space through the mmaped .bss (userspace/sampling/alloc_watch.cpp). */
struct bb_watch watch = {};
/* Which of the two arming threads' CPU sets holds each CPU (user space pins them and fills it). */
__u8 armer_of_cpu[BB_WATCH_MAX_CPUS] = {};
/* How long a flip waits for user space to arm: past it the epoch is not used (LATE). Measured
 * here, an arming thread on another CPU answers in 10 to 60 us on a loaded 2-CPU machine. */
const volatile __u64 watch_late_ns = 1000000;

/* One ring per arming thread. The kernel here is not preemptible (PREEMPT_NONE): a scheduler
 * waiting in watch_gc_return() keeps its CPU until the wait ends, and a thread woken onto that
 * CPU cannot run before. With one arming thread, every flip whose thread had last run on the
 * waiting CPU went LATE (18,005 of 18,077 flips under load). So the tick goes to the thread
 * pinned to the other half of the CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 << 10);
} watch_ticks_0 SEC(".maps"), watch_ticks_1 SEC(".maps");

/* Whether the watch was free when each thread's collection began (tid -> 1 or 0): a collection
 * is a candidate only if the watch was free from its entry to its return. Without this, a
 * process whose own watch ends at its GC entry (its epoch did not reach the word) was flipped
 * again at that very collection's return, ahead of every other process: a process with long
 * epochs (bb_alloc's trace receiver) held the watch 98% of the time, and the worker beside it
 * had 94 samples instead of about 3,500. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} watch_free_at_entry SEC(".maps");

static __always_inline void watch_note_gc_entry(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u8 free = watch.state == BB_WATCH_IDLE;

	bpf_map_update_elem(&watch_free_at_entry, &tid, &free, BPF_ANY);
}

/* The arming thread of the other CPUs sleeps on its ring: each tick wakes it at once. */
static __always_inline void watch_tick(__u32 state, __u32 outcome)
{
	struct bb_watch_tick t = { .time_ns = bpf_ktime_get_ns(), .state = state, .outcome = outcome };

	if (armer_of_cpu[bpf_get_smp_processor_id() & (BB_WATCH_MAX_CPUS - 1)])
		bpf_ringbuf_output(&watch_ticks_0, &t, sizeof(t), BPF_RB_FORCE_WAKEUP);
	else
		bpf_ringbuf_output(&watch_ticks_1, &t, sizeof(t), BPF_RB_FORCE_WAKEUP);
}

/* Back to IDLE. The watchpoint stays on the old word until the next arm moves it; its traps
 * there are ignored (state, addr). */
static __always_inline bool watch_end(__u64 from, __u32 outcome)
{
	if (__sync_val_compare_and_swap(&watch.state, from, BB_WATCH_IDLE) != from)
		return false;
	watch_tick(BB_WATCH_IDLE, outcome);
	return true;
}

/* At each GC entry (walk_and_emit(), once alloc_weight() has read it): the watched process's
 * epoch is over. */
static __always_inline void watch_gc_entry(__u64 c_p)
{
	if (c_p == watch.c_p && c_p && watch.state == BB_WATCH_LIVE)
		watch_end(BB_WATCH_LIVE, BB_WATCH_MISSED);
}

/* What a sample of an epoch of `words` free words stands for: 1 / the chance of each of its
 * words, which was min(words, bound, interval) / interval for the epoch, 1 / words for the word. */
static __always_inline __u64 watch_sample_weight(__u64 words, __u64 interval, __u64 bound)
{
	__u64 m = words < bound ? words : bound;

	if (m > interval)
		m = interval;
	if (!m)
		return 0;
	if (m == words)
		return interval;  /* the usual case: max(interval, words) as before bounds */
	return words < (1ULL << 32) ? words * interval / m : words / m * interval;
}

struct watch_wait {
	__u64 deadline;
	bool armed;
};

static long watch_wait_step(__u32 i, struct watch_wait *w)
{
	if (*(volatile __u64 *)&watch.state == BB_WATCH_ARMED) {
		w->armed = true;
		return 1;
	}
	return (i & 63) == 63 && bpf_ktime_get_ns() > w->deadline;
}

/*
 * A collection returns (a sleepable return probe on each GC entry point: it may wait). If no
 * watch is on, a coin flip with chance (free words) / interval chooses the epoch of the process
 * that starts now, whichever it is (--process: only its own); a sample then stands for
 * max(interval, free words). One watch at a time: an epoch that starts while another is watched
 * is not a candidate, which costs each process the same share of its epochs when the watches
 * are few (a watch lasts one epoch; at the default interval about 1 epoch in 60 is flipped).
 * A process chosen in advance (by the words its GC entries reported, as a first version did)
 * never saw a burst shorter than the choice's period: 2 million words in 30 ms went unsampled.
 */
/* The process whose collection this is (0 if it cannot be read, or --process filters it out):
 * c_p in r13 where JIT code is running, else the scheduler's current process. */
static __always_inline __u64 watch_gc_process(struct pt_regs *ctx, const struct bb_vm *v, __u32 tid)
{
	__u64 cur = 0, id;
	__u32 flags = 0;

	if (in_jit_code(v, PT_REGS_IP(ctx))) {
		cur = ctx->r13;
	} else {
		struct bb_sched *sch = bpf_map_lookup_elem(&sched_threads, &tid);

		if (sch)
			cur = read_word(sch->esdp + v->layout.esd_current_process, &flags);
	}
	if (!cur || (cur & 7) || flags || bpf_probe_read_user(&id, 8, (void *)(cur + v->layout.proc_id)) ||
	    filtered_out(id))
		return 0;
	return cur;
}

/* The flip at a collection's return, with `r` drawn uniformly in [0, interval): chance
 * min(free words, bound) / interval, `bound` as the session's entry capped it (~0: none).
 * `entry_free`: the session's entry found the watch free (else: look it up, as noted). */
static __always_inline int watch_gc_return(struct pt_regs *ctx, __u64 r, __u64 bound, bool entry_free)
{
	__u64 cur, t0, words, htop, hend;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct watch_wait w = {};
	const struct bb_vm *v = this_vm();
	__u8 *free_at_entry;

	if (!v)
		return 0;
	free_at_entry = entry_free ? NULL : bpf_map_lookup_elem(&watch_free_at_entry, &tid);
	if (watch.state != BB_WATCH_IDLE || (!entry_free && (!free_at_entry || !*free_at_entry))) {
		count(BB_C_WATCH_BUSY);
		return 0;
	}
	cur = watch_gc_process(ctx, v, tid);
	if (!cur || bpf_probe_read_user(&htop, 8, (void *)(cur + v->layout.proc_htop)) ||
	    bpf_probe_read_user(&hend, 8, (void *)(cur + v->layout.proc_hend)) || hend <= htop || (htop & 7))
		return 0;
	words = (hend - htop) / 8;
	if (r >= words)
		return 0;
	/* The scheduler that wins the flip owns the watch until it is ARMING: then the rest. */
	if (__sync_val_compare_and_swap(&watch.state, BB_WATCH_IDLE, BB_WATCH_ARMING) != BB_WATCH_IDLE)
		return 0;
	watch.c_p = cur;
	watch.lo = htop;
	watch.hi = hend;
	watch.bound = bound;
	watch_tick(BB_WATCH_ARMING, 0);
	t0 = bpf_ktime_get_ns();
	w.deadline = t0 + watch_late_ns;
	bpf_loop(1 << 23, watch_wait_step, &w, 0);
	count_n(BB_C_WATCH_WAIT_NS, bpf_ktime_get_ns() - t0);
	if (!w.armed || __sync_val_compare_and_swap(&watch.state, BB_WATCH_ARMED, BB_WATCH_LIVE) != BB_WATCH_ARMED) {
		if (!watch_end(BB_WATCH_ARMED, BB_WATCH_LATE))
			watch_end(BB_WATCH_ARMING, BB_WATCH_LATE);
	}
	return 0;
}

/*
 * The same, where the kernel has uprobe sessions (6.13; beam-bpf loads on_gc_session as one,
 * libbpf 1.1 knows no such section): one program at the entry and, only if the entry asks, at
 * the return. The return probe of every collection was half of what -e alloc cost; now a
 * collection returns through a trap only when its flip can win. The entry draws the flip's r
 * and asks for the return only if r < 2 x the young heap's size now: a minor collection's new
 * epoch has at most that heap's words free, so the flip is the one at the return (r < free
 * words); an epoch whose heap grew past the bound had chance bound / interval instead, and its
 * sample weighs that (watch_sample_weight()). An epoch that begins while a watch is on is no candidate
 * (as at the return), and its return is not seen either.
 */
extern bool bpf_session_is_return(void) __ksym __weak;
extern __u64 *bpf_session_cookie(void) __ksym __weak;

/* The session's entry, after its call_sample(): the flip's r and bound into the cookie, and 0 to
 * see the return, 1 not to. `free`: the watch was free when the entry began; `interval`:
 * watch.interval, read then. */
static __always_inline int watch_gc_session_entry(struct pt_regs *ctx, __u64 *cookie, __u64 interval, bool free)
{
	__u64 cur, heap, hend, bound, r;
	const struct bb_sched *sch;
	const struct bb_vm *v;
	__u32 tid;

	if (!free) {
		count(BB_C_WATCH_BUSY);
		return 1;
	}
	v = this_vm();
	if (!v || !interval || interval > 0xffffffffULL)
		return 1;
	tid = (__u32)bpf_get_current_pid_tgid();
	cur = watch_gc_process(ctx, v, tid);
	if (!cur || bpf_probe_read_user(&heap, 8, (void *)(cur + v->layout.proc_heap)) ||
	    bpf_probe_read_user(&hend, 8, (void *)(cur + v->layout.proc_hend)) || hend <= heap)
		return 1;
	bound = (hend - heap) / 4;  /* twice the young heap's words */
	/* A collection on a dirty scheduler is of a heap of 128 Ki words or more, which the normal
	 * scheduler's collection left for a small fragment to go on in meanwhile (erl_gc.c,
	 * delay_garbage_collection): the heap read here is that fragment, not the young heap the
	 * collection gives. Bounded by it, a process of big heaps was never sampled (0 words of
	 * half a VM's). Its return is always seen: few collections are this big. */
	sch = bpf_map_lookup_elem(&sched_threads, &tid);
	if (bound > interval || (sch && sch->type != BB_SCHED_NORMAL))
		bound = interval;
	r = bpf_get_prandom_u32() % interval;
	if (r >= bound)
		return 1;
	*cookie = r | bound << 32;
	return 0;
}

/*
 * A write to the watched word. The watchpoint traps after the writing instruction: the
 * registers are the writer's, its IP the instruction after the store. Accepted once per watch,
 * when it is the allocation of that word in the live epoch: not the collector, not a write to an
 * older term, not the process's own stack reaching down to it. Another process's write there is
 * a message it copies into the watched heap: its allocation, charged to its stack. true when
 * accepted, with the words its sample stands for and the pid of the watched heap's owner.
 */
static __always_inline bool watch_hit(struct bpf_perf_event_data *ctx, const struct bb_vm *v, __u64 *weight,
				      __u64 *heap_owner)
{
	__u64 addr = ctx->addr, c_p = watch.c_p, writer, hw;
	__u32 flags = 0, zero = 0, tid = (__u32)bpf_get_current_pid_tgid();
	struct scratch *s = bpf_map_lookup_elem(&scratch_map, &zero);
	struct proc_view p = {};
	bool jit;

	if (!s)
		return false;
	count(BB_C_WATCH_HITS);
	if (watch.state != BB_WATCH_LIVE || addr != watch.addr || !c_p) {
		count(BB_C_WATCH_IGNORED);
		return false;
	}
	jit = in_jit_code(v, ctx->regs.ip);
	writer = jit ? ctx->regs.r13 : 0;
	if (!jit) {
		struct bb_sched *sch = bpf_map_lookup_elem(&sched_threads, &tid);

		if (sch)
			writer = read_word(sch->esdp + v->layout.esd_current_process, &flags);
	}
	/* The watched process as it is now: E is exact when it is the writer, in JIT code. */
	read_process(s, v, c_p, jit && writer == c_p, ctx->regs.sp, &p, &flags);
	hw = s->proc[(v->layout.proc_high_water / 8) & (PROC_SPAN_MAX / 8 - 1)];
	if ((flags & BB_F_READ_FAULT) || (p.state & BB_PSFLG_GC) || addr < hw || addr < p.heap || addr >= p.hend) {
		count(BB_C_WATCH_IGNORED);
		return false;
	}
	/* The process's own stack grows down towards the heap top: a push there is no allocation,
	 * and no allocation takes that word in this epoch. */
	if (writer == c_p && addr >= p.E) {
		watch_end(BB_WATCH_LIVE, BB_WATCH_STACK);
		return false;
	}
	*weight = watch_sample_weight((watch.hi - watch.lo) / 8, watch.interval, watch.bound);
	*heap_owner = p.id;
	return watch_end(BB_WATCH_LIVE, BB_WATCH_SAMPLED);
}
