// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Walks the Erlang stack of the process a BEAM scheduler is running, at the instant of a
 * perf sample (or at the entry of a probed function), and emits one bb_record.
 *
 * Everything read here belongs to the target VM and is untrusted: each read is bounded and
 * may fail, and a failure flags the record instead of losing the sample.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "beam_bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* may_goto (kernel 6.9+), spelled in bytes as the kernel's bpf_experimental.h does for
 * compilers without the mnemonic: a loop the verifier bounds itself, no call per iteration.
 * Only the *_fast programs use it; older kernels load the others
 * (userspace/sampling/walker.cpp). */
#define can_loop ({ __label__ l_break, l_continue; bool ret = true; \
	asm volatile goto("1:.byte 0xe5; .byte 0; .long ((%l[l_break] - 1b - 8) / 8) & 0xffff; .short 0" :::: l_break); \
	goto l_continue; l_break: ret = false; l_continue:; ret; })

#include "maps.bpf.h"
#include "memory.bpf.h"
#include "process.bpf.h"
#include "erlang_walk.bpf.h"
#include "native_walk.bpf.h"
#include "blame.bpf.h"
#include "emit.bpf.h"

/* --process: the one process whose samples are kept (its pid term under the mask). */
const volatile __u64 only_pid = 0;
const volatile __u64 only_pid_mask = 0;

static __always_inline bool filtered_out(__u64 erl_pid)
{
	return only_pid_mask && (erl_pid & only_pid_mask) != only_pid;
}

static __always_inline int sample(void *ctx, const struct bb_vm *v, __u64 ip, __u64 sp, __u64 bp, __u64 r13,
				  __u32 flags, bool fast, __u64 arg_p, __u64 need, __u64 watch_weight, __u64 watch_owner);
static __always_inline int call_sample(struct pt_regs *ctx, bool fast, bool note_watch);
#include "alloc_watch.bpf.h"

/* A fresh record of a sample of thread `tid` (on scheduler `sch`, NULL for other threads). */
static __always_inline void init_record(struct bb_record *rec, __u64 ip, __u32 tid, const struct bb_sched *sch)
{
	rec->time_ns = bpf_ktime_get_ns();
	rec->ip = ip;
	rec->tid = tid;
	rec->tgid = bpf_get_current_pid_tgid() >> 32;
	rec->cpu = bpf_get_smp_processor_id();
	rec->c_p = 0;
	rec->erl_pid = 0;
	rec->nframes = 0;
	rec->nskipped = 0;
	rec->nkernel = 0;
	rec->nnative = 0;
	rec->reg_name = 0;
	rec->initial[0] = rec->initial[1] = rec->initial[2] = 0;
	rec->dict_initial[0] = rec->dict_initial[1] = rec->dict_initial[2] = rec->dict_caller = 0;
	rec->alloc_words = rec->frag_words = 0;
	rec->heap_owner = 0;
	rec->sched_type = sch ? sch->type : BB_SCHED_NONE;
	rec->sched_no = sch ? sch->no : 0;
}

/*
 * One sample: the kernel's frames (leaf first), then the native ones, then the Erlang ones of
 * the process running here, into one record. Dropped (counted as filtered) when blame's
 * function is not running, when --process names another process, or when an allocation
 * record weighs nothing. `v` is the sampled VM (this_vm()).
 */
static __always_inline int walk_and_emit(void *ctx, const struct bb_vm *v, __u64 ip, __u64 sp, __u64 bp, __u64 r13,
					 __u32 flags, bool fast, __u64 arg_p, __u64 need, __u64 watch_weight,
					 __u64 watch_owner)
{
	__u32 base = 0;
	__u32 zero = 0, tid = (__u32)bpf_get_current_pid_tgid();
	struct scratch *s = bpf_map_lookup_elem(&scratch_map, &zero);
	struct bb_sched *sch = bpf_map_lookup_elem(&sched_threads, &tid);
	struct bb_record *rec;
	struct native_walk *nw;
	struct proc_view p = {};
	__u64 c_p = 0;
	bool jit;

	if (!s)
		return 0;
	count(BB_C_SEEN);
	rec = &s->rec;
	nw = &s->native;
	nw->flags = 0;
	nw->clean = 0;
	init_record(rec, ip, tid, sch);

	jit = in_jit_code(v, ip);
	if (jit) {
		rec->where = BB_WHERE_JIT;
		c_p = r13;   /* the JIT keeps c_p in r13 in Erlang code and its helpers */
	} else if (sch) {
		rec->where = BB_WHERE_SCHED_C;
		c_p = read_word(sch->esdp + v->layout.esd_current_process, &flags);
	} else {
		rec->where = BB_WHERE_OTHER;
	}
	/* --process: decided before any walk, from the process's own pid. */
	if (c_p)
		read_process(s, v, c_p, jit, sp, &p, &flags);
	if (only_pid_mask && (!c_p || filtered_out(p.id))) {
		count(BB_C_FILTERED);
		return 0;
	}

	if (kernel_stacks && ctx && (flags & BB_F_KERNEL)) {
		long got = bpf_get_stack(ctx, rec->frames, BB_MAX_KERNEL_FRAMES * 8, 0);

		if (got > 0)
			base = rec->nkernel = got / 8;
	}
	nw->n = base;
	nw->sp = sp;
	if (!jit && (max_native_frames || nr_blame_ranges)) {
		struct native_walk_ctx nctx = { .s = s, .v = v };
		__u64 t0 = measure_walk ? bpf_ktime_get_ns() : 0;

		nw->ip = ip;
		nw->bp = bp;
		nw->limit = base + (max_native_frames ? max_native_frames : BB_MAX_NATIVE_FRAMES);
		bpf_loop(BB_MAX_NATIVE_FRAMES, native_step, &nctx, 0);
		if (measure_walk)
			count_n(BB_C_NATIVE_NS, bpf_ktime_get_ns() - t0);
		/* nw.flags joins the record's flags only at the end: were they in `flags` now,
		 * every test of it below would fork the verifier's states (4x the load time). */
	}

	if (nr_blame_ranges) {
		__u32 m = blame_match(s, v, ip, sp, jit, sch, c_p, fast, nw, base);

		if (!m) {
			count(BB_C_FILTERED);
			return 0;
		}
		flags |= m;
	}
	/* Blame unwinds to decide; the record keeps native frames only if asked for. */
	if (max_native_frames) {
		__u32 n = nw->n;

		if (n > base && n <= BB_MAX_FRAMES) {
			rec->nnative = n - base;
			base = n;
		}
	}
	rec->nframes = base;

	if (c_p) {
		/* Each sample whose process fails a check is counted by the first it fails. */
		__u32 bad = process_check(&p, flags, sch), why = process_in_transition(&p, bad);

		if (bad)
			count(bad);
		if (bad == BB_C_BAD_STATE) {
			flags |= BB_F_NOT_RUNNING;
		} else if (why) {
			count(why == BB_F_IN_GC ? BB_C_IN_GC : BB_C_EXITING);
			flags |= BB_F_PROC | why;
			rec->c_p = c_p;
			rec->erl_pid = p.id;
			name_process(s, v, rec);
		} else if (!bad) {
			/* erts_heap_alloc for another process's heap (a message built in it), or
			 * during a collection (the VM's own, a gc trace message's), is not the running
			 * code's allocation. */
			if (alloc_mode && !watch_weight && ((need && (arg_p != c_p || (p.state & BB_PSFLG_GC))) ||
					   !alloc_weight(s, v, rec, c_p, p.id, p.heap, p.htop, need))) {
				count(BB_C_FILTERED);
				return 0;
			}
			rec->alloc_words += watch_weight;
			rec->heap_owner = watch_owner;
			flags |= BB_F_PROC;
			rec->c_p = c_p;
			rec->erl_pid = p.id;
			name_process(s, v, rec);
			/* Sampled by watchpoints, a GC entry gives the exact words only: no stack. */
			if (watch_mode && !need && !watch_weight) {
				watch_gc_entry(c_p);
				if (!(rec->alloc_words + rec->frag_words)) {
					count(BB_C_FILTERED);
					return 0;
				}
				rec->flags = flags | BB_F_ALLOC_TOTAL;
				return emit(rec);
			}
			flags |= walk_erlang(s, v, &p, base, jit, bp, fast);
		} else {
			flags |= BB_F_BAD_PROC;
		}
	}
	/* --process keeps only samples attributed to its process (not a stale current_process). */
	if (only_pid_mask && !(flags & BB_F_PROC)) {
		count(BB_C_FILTERED);
		return 0;
	}
	/* An allocation profile weighs stacks by words: a record of nothing adds nothing. */
	if (alloc_mode && !(rec->alloc_words + rec->frag_words)) {
		count(BB_C_FILTERED);
		return 0;
	}
	rec->flags = flags | nw->flags;
	return emit(rec);
}

static __always_inline int sample(void *ctx, const struct bb_vm *v, __u64 ip, __u64 sp, __u64 bp, __u64 r13,
				  __u32 flags, bool fast, __u64 arg_p, __u64 need, __u64 watch_weight, __u64 watch_owner)
{
	__u64 start = measure_walk ? bpf_ktime_get_ns() : 0;
	int ret = walk_and_emit(ctx, v, ip, sp, bp, r13, flags, fast, arg_p, need, watch_weight, watch_owner);

	if (measure_walk)
		note_walk_time(start);
	return ret;
}

static __always_inline int perf_sample(struct bpf_perf_event_data *ctx, bool fast)
{
	const struct bb_vm *v = this_vm();
	struct pt_regs *regs;

	if (!v)
		return 0;
	/* User and kernel addresses are disjoint halves on x86-64 (and the context only allows
	 * whole-word loads, so cs's low bits are not at hand). */
	if (ctx->regs.ip < (1ULL << 47))
		return sample(ctx, v, ctx->regs.ip, ctx->regs.sp, ctx->regs.bp, ctx->regs.r13, 0, fast, 0, 0, 0, 0);

	/* The sample interrupted a system call or fault: walk from the registers the thread
	 * will return to user space with. */
	regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	return sample(ctx, v, BPF_CORE_READ(regs, ip), BPF_CORE_READ(regs, sp), BPF_CORE_READ(regs, bp),
		      BPF_CORE_READ(regs, r13), BB_F_KERNEL, fast, 0, 0, 0, 0);
}

/* beam-bpf-blame --count and -e alloc's GC entries: one record per call of the probed native
 * function. */
static __always_inline int call_sample(struct pt_regs *ctx, bool fast, bool note_watch)
{
	const struct bb_vm *v = this_vm();

	if (!v)
		return 0;
	if (watch_mode && note_watch)  /* before sample() ends the process's own watch, if it has it */
		watch_note_gc_entry();
	return sample(NULL, v, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx), ctx->r13, BB_F_UPROBE, fast, 0, 0, 0, 0);
}

/* -e alloc: erts_heap_alloc(Process *p, Uint need, Uint xtra), a heap fragment of `need` words. */
static __always_inline int heap_alloc_sample(struct pt_regs *ctx, bool fast)
{
	__u64 need = PT_REGS_PARM2(ctx);
	const struct bb_vm *v = need ? this_vm() : NULL;

	if (!v)
		return 0;
	return sample(NULL, v, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx), ctx->r13, BB_F_UPROBE | BB_F_HEAP_FRAG,
		      fast, PT_REGS_PARM1(ctx), need, 0, 0);
}

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
