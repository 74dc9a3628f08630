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
 * Only the *_fast programs use it; older kernels load the others (userspace/sampler.cpp). */
#define can_loop ({ __label__ l_break, l_continue; bool ret = true; \
	asm volatile goto("1:.byte 0xe5; .byte 0; .long ((%l[l_break] - 1b - 8) / 8) & 0xffff; .short 0" :::: l_break); \
	goto l_continue; l_break: ret = false; l_continue:; ret; })

/* Set by user space before load. */
const volatile __u32 target_tgid = 0;
const volatile __u32 max_frames = 512;
const volatile __u32 max_stack_words = 1 << 17;   /* 1 MiB of Erlang stack per walk */
const volatile __u32 blame_scan_words = 2048;     /* 16 KiB of native stack */
const volatile __u32 wakeup_bytes = 1 << 20;      /* wake the reader past this much data */
const volatile __u32 measure_walk = 0;            /* keep the handler-time histogram */
const volatile __u32 frame_layout = 0;            /* the JIT's: 0 return address only, 1 FP + RA */
const volatile __u64 jit_descriptor = 0;          /* &__jit_debug_descriptor in the target */
/* The VM build's struct offsets: the release's table, DWARF, or found in the live VM
 * (userspace/offsets.cpp), checked against the live VM before load. */
const volatile struct bb_vm_layout vm = {};
/* Bytes of struct process the walk needs, from its start: read in one go. */
const volatile __u32 proc_span = 0;
const volatile __u32 alloc_mode = 0;              /* -e alloc: weigh GC entries by words allocated */
/* Native frames to unwind at most (0: none, --only-erlang), and whether to add the kernel's
 * (--kernel). */
const volatile __u32 max_native_frames = 0;
const volatile __u32 kernel_stacks = 0;
const volatile __u32 nr_blame_ranges = 0;
/* Blame by the stack-word scan alone, as before native unwinding (BB_BLAME_SCAN_ONLY=1): only to
 * measure the scan's false positives against the unwound frames (tests/integration/native_test.cpp). */
const volatile __u32 blame_scan_only = 0;
const volatile struct bb_range blame_ranges[BB_MAX_BLAME_RANGES] = {};

/* Updated by user space while running: the JIT may map more executable code. A torn
 * update only costs frames of one sample, because ranges are appended, never moved. */
__u32 nr_code_ranges = 0;
struct bb_range code_ranges[BB_MAX_CODE_RANGES] = {};

/* The unwind rows of the target's executable files (userspace/unwind_table.cpp), appended as
 * it maps more: a module's rows are in place before nr_unwind_modules counts it. */
__u32 nr_unwind_modules = 0;
struct bb_unwind_module unwind_modules[BB_MAX_UNWIND_MODULES] = {};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);           /* sized by user space */
	__type(key, __u32);
	__type(value, struct bb_unwind_row);
} unwind_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);           /* sized by user space */
	__type(key, __u32);
	__type(value, __u32);
} unwind_buckets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);               /* tid */
	__type(value, struct bb_sched);
} sched_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);    /* resized by user space */
} records SEC(".maps");

#define PROC_SPAN_MAX 1024

/* -e alloc: what a process had allocated when last seen at a GC entry (alloc_weight()). */
struct alloc_seen {
	__u64 pid, high_water;
	__u64 heap_words, frag_words;  /* young heap use and mbuf_sz at the last GC entry */
	__u64 frag_counted;            /* words of erts_heap_alloc fragments since */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1 << 16);
	__type(key, __u64);               /* Process * */
	__type(value, struct alloc_seen);
} alloc_seen SEC(".maps");

/* The native walk's state (native_step()): in map memory, like scan_chunk's, so the verifier
 * does not follow its values frame by frame (that cost 5x the load time). */
struct native_walk {
	__u64 ip, sp, bp;
	__u32 n, limit;   /* frames[] index of the next frame, and the end of the room */
	__u32 flags;
	__u32 clean;      /* ended in JIT code or at the thread's root */
};

struct scratch {
	struct bb_record rec;
	struct native_walk native;
	__u64 words[BB_STACK_CHUNK_WORDS];
	__u64 proc[PROC_SPAN_MAX / 8];
	/* scan_chunk's loop state, kept in map memory so the verifier does not follow its
	 * values word by word and the may_goto loop converges. */
	__u64 j, nw, n, limit, stop;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BB_C_NR);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BB_WALK_HIST_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} walk_ns_hist SEC(".maps");

static __always_inline void count_n(__u32 which, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &which);

	if (c)
		*c += n;
}

static __always_inline void count(__u32 which)
{
	count_n(which, 1);
}

static __always_inline void note_walk_time(__u64 start)
{
	__u64 ns = bpf_ktime_get_ns() - start;
	__u32 b = 0;

	for (; b < BB_WALK_HIST_BUCKETS - 1; b++)
		if (!(ns >> (b + 1)))
			break;
	count_n(BB_C_WALK_NS, ns);
	__u64 *h = bpf_map_lookup_elem(&walk_ns_hist, &b);
	if (h)
		*h += 1;
}

static __always_inline bool in_ranges(__u64 addr, const volatile struct bb_range *r, __u32 nr,
				      __u32 max)
{
	for (__u32 i = 0; i < max; i++) {
		if (i >= nr)
			break;
		if (addr >= r[i].start && addr < r[i].end)
			return true;
	}
	return false;
}

static __always_inline bool in_jit_code(__u64 addr)
{
	return in_ranges(addr, code_ranges, nr_code_ranges, BB_MAX_CODE_RANGES);
}

static __always_inline bool in_blame_func(__u64 addr)
{
	return in_ranges(addr, blame_ranges, nr_blame_ranges, BB_MAX_BLAME_RANGES);
}

static __always_inline __u64 read_word(__u64 addr, __u32 *flags)
{
	__u64 v = 0;

	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		*flags |= BB_F_READ_FAULT;
	return v;
}

/*
 * A bounded word-by-word scan of user memory [lo, hi), read in chunks. bpf_loop keeps the
 * verifier's work constant however long the scan is allowed to run.
 */
enum scan_mode { SCAN_ERLANG_STACK, SCAN_NATIVE_FOR_BLAME };

struct scan {
	struct scratch *s;
	__u64 lo, hi;
	__u32 mode;
	__u32 limit;    /* frames to collect at most */
	__u32 n;        /* frames collected */
	__u32 flags;
	bool found;     /* blame: a return address into FUNC */
};

static long scan_word(__u32 i, struct scan *c)
{
	__u32 j = i & (BB_STACK_CHUNK_WORDS - 1);
	__u64 w;

	if (j == 0) {
		__u64 addr = c->lo + (__u64)i * 8;
		__u64 len = c->hi - addr;

		if (len > sizeof(c->s->words))
			len = sizeof(c->s->words);
		if (bpf_probe_read_user(c->s->words, len, (void *)addr)) {
			c->flags |= BB_F_READ_FAULT;
			return 1;
		}
	}
	w = c->s->words[j];

	if (c->mode == SCAN_NATIVE_FOR_BLAME) {
		/* A return address into FUNC follows a call inside FUNC, so it is never FUNC's
		 * first byte; a word equal to that is a function pointer, not a caller. */
		if (in_blame_func(w) && in_blame_func(w - 1)) {
			c->found = true;
			return 1;
		}
		return 0;
	}

	/* On the Erlang stack, a word with tag bits 00 is a continuation pointer: terms are
	 * tagged and headers never live on the stack. Requiring it to point into JIT code also
	 * skips the saved frame pointers of a VM that runs with them. */
	if ((w & 3) == 0 && in_jit_code(w)) {
		__u32 n = c->n;

		if (n >= c->limit) {
			c->flags |= BB_F_TRUNCATED;
			return 1;
		}
		c->s->rec.frames[n & (BB_MAX_FRAMES - 1)] = w;
		c->n = n + 1;
	}
	return 0;
}

/*
 * With frame pointers (+JPperf true), every Erlang frame the JIT has set up is
 * [saved rbp][return address], linked from rbp. Each link must point further up the
 * same stack, so a corrupt chain ends the walk instead of leading it elsewhere.
 */
struct fp_walk {
	struct scan *c;
	__u64 fp;
};

static long fp_step(__u32 i, struct fp_walk *w)
{
	struct scan *c = w->c;
	__u64 frame[2];

	if (w->fp < c->lo || w->fp + 16 > c->hi || (w->fp & 7))
		return 1;
	if (bpf_probe_read_user(frame, sizeof(frame), (void *)w->fp)) {
		c->flags |= BB_F_READ_FAULT;
		return 1;
	}
	if ((frame[1] & 3) == 0 && in_jit_code(frame[1])) {
		__u32 n = c->n;

		if (n >= c->limit) {
			c->flags |= BB_F_TRUNCATED;
			return 1;
		}
		c->s->rec.frames[n & (BB_MAX_FRAMES - 1)] = frame[1];
		c->n = n + 1;
	}
	if (frame[0] <= w->fp)
		return 1;
	w->fp = frame[0];
	return 0;
}

/* The same scan a chunk per callback: a callback per word costs ~11 ns here, mostly the call
 * and return; this loop costs ~3 ns a word (scripts/bench.sh, kernel time per sample). */
static long scan_chunk(__u32 k, struct scan *c)
{
	struct scratch *s = c->s;
	__u64 addr = c->lo + (__u64)k * sizeof(s->words);
	__u64 len = c->hi - addr;

	if (len > sizeof(s->words))
		len = sizeof(s->words);
	if (bpf_probe_read_user(s->words, len, (void *)addr)) {
		c->flags |= BB_F_READ_FAULT;
		return 1;
	}
	s->nw = len / 8;
	s->j = 0;
	s->n = c->n;
	s->limit = c->limit;
	s->stop = 0;
	while (can_loop) {
		__u64 j = s->j, w;

		if (j >= s->nw)
			break;
		s->j = j + 1;
		w = s->words[j & (BB_STACK_CHUNK_WORDS - 1)];
		if (c->mode == SCAN_NATIVE_FOR_BLAME) {
			if (in_blame_func(w) && in_blame_func(w - 1)) {
				c->found = true;
				return 1;
			}
		} else if ((w & 3) == 0 && in_jit_code(w)) {
			__u64 n = s->n;

			if (n >= s->limit) {
				s->stop = 1;
				break;
			}
			s->rec.frames[n & (BB_MAX_FRAMES - 1)] = w;
			s->n = n + 1;
		}
	}
	c->n = s->n;
	if (s->stop) {
		c->flags |= BB_F_TRUNCATED;
		return 1;
	}
	return 0;
}

/* `fast` is a constant in each program: each one references only its own callback. */
static __always_inline __u32 scan_words(struct scan *c, __u32 budget, bool fast)
{
	__u64 words = (c->hi - c->lo) / 8;

	if (words > budget) {
		words = budget;
		c->hi = c->lo + words * 8;
		if (c->mode == SCAN_ERLANG_STACK)
			c->flags |= BB_F_SCAN_LIMIT | BB_F_TRUNCATED;
	}
	if (fast)
		return bpf_loop((words + BB_STACK_CHUNK_WORDS - 1) / BB_STACK_CHUNK_WORDS, scan_chunk, c, 0);
	return bpf_loop(words, scan_word, c, 0);
}

/*
 * Native frames, unwound with the rows of .eh_frame: for each frame, the row of its address
 * gives the CFA (the caller's rsp) from rsp or rbp; the return address is at CFA - 8 and the
 * caller's rbp, if this frame saved it, at CFA + 8 * rbp_slot. The walk ends at a return
 * address into JIT code (where a scheduler entered C from Erlang: the Erlang stack follows), at
 * the thread's root, or where the rows give out (flagged).
 */
struct native_walk_ctx {
	struct scratch *s;
};

/*
 * The row that covers `pc` (the last one starting at or below it), as its 8 bytes; 0 (a
 * BB_CFA_NONE row) if none. A global function: the verifier checks it once, not at each call.
 */
__noinline __u64 find_row(__u64 pc)
{
	__u32 nr = nr_unwind_modules, first = 0, n = 0, lo = 0, hi = 0, key, *bk;
	__u64 rel = 0, row, bucket;
	bool found = false;

	for (__u32 i = 0; i < BB_MAX_UNWIND_MODULES; i++) {
		if (i >= nr)
			break;
		if (pc >= unwind_modules[i].start && pc < unwind_modules[i].end) {
			rel = pc - unwind_modules[i].bias;
			if (rel < unwind_modules[i].pc_lo || rel > 0xffffffffULL)
				return 0;
			first = unwind_modules[i].first_row;
			n = unwind_modules[i].nrows;
			bucket = (rel - unwind_modules[i].pc_lo) >> BB_UNWIND_BUCKET_SHIFT;
			/* Past the last bucket: the last row (a file's rows end with a NONE row). */
			if (bucket >= unwind_modules[i].nbuckets)
				bucket = unwind_modules[i].nbuckets - 1;
			key = unwind_modules[i].first_bucket + (__u32)bucket;
			hi = bucket + 1 < unwind_modules[i].nbuckets ? key + 1 : 0;
			found = unwind_modules[i].nbuckets > 0;
			break;
		}
	}
	if (!found || n == 0)
		return 0;
	/* [lo, hi): from this bucket's row to the next bucket's (or the file's last row). */
	bk = bpf_map_lookup_elem(&unwind_buckets, &key);
	if (!bk)
		return 0;
	lo = *bk;
	if (hi) {
		bk = bpf_map_lookup_elem(&unwind_buckets, &hi);
		if (!bk)
			return 0;
		hi = *bk + 1;
	} else {
		hi = n;
	}
	if (lo >= n || hi > n || hi <= lo)
		return 0;
	n = hi - lo;
	lo += first;
	/* lo stays on a row at or below rel while n halves: a bucket of BB_UNWIND_BUCKET bytes holds
	 * at most that many rows, so 10 steps cover it. */
	for (int k = 0; k < BB_UNWIND_BUCKET_SHIFT + 2; k++) {
		__u32 half = n / 2, mid = lo + half;
		struct bb_unwind_row *r;

		if (n <= 1)
			break;
		r = bpf_map_lookup_elem(&unwind_rows, &mid);
		if (!r)
			return 0;
		if (r->pc <= rel)
			lo = mid;
		n -= half;
	}
	struct bb_unwind_row *r = bpf_map_lookup_elem(&unwind_rows, &lo);
	if (!r || r->pc > rel)
		return 0;
	__builtin_memcpy(&row, r, sizeof(row));
	return row;
}

static long native_step(__u32 i, struct native_walk_ctx *ctx)
{
	struct native_walk *w = &ctx->s->native;
	struct bb_unwind_row row;
	__u64 ip = w->ip, cfa, saved[2], bits;
	__u32 n = w->n;

	if (n >= w->limit) {
		w->flags |= BB_F_NATIVE_TRUNCATED;
		return 1;
	}
	ctx->s->rec.frames[n & (BB_MAX_FRAMES - 1)] = ip;
	w->n = n + 1;
	if (i > 0 && in_jit_code(ip)) {
		w->clean = 1;
		return 1;
	}
	/* A return address may be just past its function (a call to a noreturn one): look up the
	 * call instruction. */
	bits = find_row(i > 0 ? ip - 1 : ip);
	__builtin_memcpy(&row, &bits, sizeof(row));
	if (row.cfa_rule == BB_CFA_NONE) {
		w->flags |= BB_F_NATIVE_NO_ROW;
		return 1;
	}
	if (row.cfa_rule == BB_CFA_END) {
		w->clean = 1;
		return 1;
	}
	if (row.cfa_rule == BB_CFA_BAD) {
		w->flags |= BB_F_NATIVE_BAD;
		return 1;
	}
	cfa = (row.cfa_rule == BB_CFA_RSP ? w->sp : w->bp) + 8 * (__u64)row.cfa_words;
	/* Each caller's frame is further up the stack: garbage cannot make the walk go round. */
	if (cfa <= w->sp || (cfa & 7)) {
		w->flags |= BB_F_NATIVE_BAD;
		return 1;
	}
	if (row.rbp_slot == -2) {
		/* push rbp right after the call: the saved rbp and the return address together */
		if (bpf_probe_read_user(saved, sizeof(saved), (void *)(cfa - 16))) {
			w->flags |= BB_F_READ_FAULT;
			return 1;
		}
		w->bp = saved[0];
		w->ip = saved[1];
	} else {
		if (bpf_probe_read_user(&saved[1], 8, (void *)(cfa - 8)) ||
		    (row.rbp_slot && bpf_probe_read_user(&saved[0], 8, (void *)(cfa + 8 * (__s64)row.rbp_slot)))) {
			w->flags |= BB_F_READ_FAULT;
			return 1;
		}
		if (row.rbp_slot)
			w->bp = saved[0];
		w->ip = saved[1];
	}
	w->sp = cfa;
	if (w->ip == 0) {
		w->clean = 1;
		return 1;
	}
	return 0;
}

struct blame_frames {
	struct scratch *s;
	__u32 first, n;
	bool found;
};

/* Is the i-th return address of the unwound native frames one into FUNC? */
static long blame_frame(__u32 i, struct blame_frames *b)
{
	__u32 k = b->first + i;

	if (k >= b->n)
		return 1;
	if (in_blame_func(b->s->rec.frames[k & (BB_MAX_FRAMES - 1)] - 1)) {
		b->found = true;
		return 1;
	}
	return 0;
}

/*
 * beam-bpf-blame: is FUNC running? Either the IP is in it, or a return address into it is one
 * of the unwound native frames. Where the unwind stopped short (no row for an address), a
 * bounded scan of the native stack between rsp and the top of the scheduler's runtime stack
 * decides instead, flagged: it can see a stale return address in an uninitialized slot.
 */
static __always_inline __u32 blame_match(struct scratch *s, __u64 ip, __u64 sp, bool jit,
					 const struct bb_sched *sch, __u64 c_p, bool fast,
					 const struct native_walk *nw, __u32 first)
{
	struct scan c = { .s = s, .lo = sp, .mode = SCAN_NATIVE_FOR_BLAME };

	if (in_blame_func(ip))
		return BB_F_BLAME_LEAF;
	/* JIT code runs on the Erlang stack: no native callers to look at. And a scheduler
	 * with no process cannot be in a function called for one: what the scan would find
	 * there is a stale return address of an earlier call. */
	if (jit || !c_p)
		return 0;
	if (!blame_scan_only) {
		struct blame_frames b = { .s = s, .first = first + 1, .n = nw->n };

		bpf_loop(BB_MAX_NATIVE_FRAMES, blame_frame, &b, 0);
		if (b.found)
			return BB_F_BLAME_CALLER;
		if (nw->clean)
			return 0;
		c.lo = nw->sp;  /* what was unwound is known: scan only above it */
	}
	c.hi = sp + (__u64)blame_scan_words * 8;
	if (sch && sch->runtime_top > sp && sch->runtime_top < c.hi)
		c.hi = sch->runtime_top;
	scan_words(&c, blame_scan_words, fast);
	return c.found ? BB_F_BLAME_CALLER | BB_F_BLAME_SCAN : 0;
}

static __always_inline bool process_runs_here(const struct bb_sched *sch, __u32 state, __u64 sched_data)
{
	if (sch->type == BB_SCHED_NORMAL)
		return (state & (BB_PSFLG_RUNNING | BB_PSFLG_RUNNING_SYS)) && sched_data == sch->esdp;
	return state & (BB_PSFLG_DIRTY_RUNNING | BB_PSFLG_DIRTY_RUNNING_SYS);
}

static __always_inline int emit(struct bb_record *rec)
{
	__u32 n = rec->nframes;
	__u64 flags = BPF_RB_NO_WAKEUP;

	if (n > BB_MAX_FRAMES)
		n = BB_MAX_FRAMES;
	/* Waking the reader on every record costs a wake-up per sample (it collapsed the rate
	 * 100-fold here); the reader drains on a timer and is woken only past wakeup_bytes. */
	if (bpf_ringbuf_query(&records, BPF_RB_AVAIL_DATA) > wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	if (bpf_ringbuf_output(&records, rec, bb_record_size(n), flags)) {
		count(BB_C_DROPPED);
		return 0;
	}
	count(BB_C_EMITTED);
	return 0;
}

/* The process's registered name and initial call, for reports that name processes. A failed
 * read only leaves the name out: it says nothing about the stack. */
static __always_inline void name_process(struct scratch *s, struct bb_record *rec)
{
	__u64 reg = s->proc[(vm.proc_reg / 8) & (PROC_SPAN_MAX / 8 - 1)];
	__u32 ignored = 0;

	if (reg)
		rec->reg_name = read_word(reg + vm.regproc_name, &ignored);
	rec->initial[0] = s->proc[(vm.proc_initial / 8) & (PROC_SPAN_MAX / 8 - 1)];
	rec->initial[1] = s->proc[(vm.proc_initial / 8 + 1) & (PROC_SPAN_MAX / 8 - 1)];
	rec->initial[2] = s->proc[(vm.proc_initial / 8 + 2) & (PROC_SPAN_MAX / 8 - 1)];
}

/*
 * -e alloc: the words a process allocated, from two kinds of probe.
 * - GC entries: a collection leaves high_water at the heap top, so above it is what was
 *   allocated on the young heap since. An entry that did not collect (a delayed GC, or entry
 *   points calling each other) leaves high_water where it was: then only the growth since the
 *   last entry counts, so no word is counted twice.
 * - erts_heap_alloc(p, need, xtra): a heap fragment (a BIF's result that did not fit on the
 *   heap), counted at once with the stack that asked for it (`need` words).
 * The rest of the growth of mbuf_sz between two GC entries, fragments that did not come from
 * erts_heap_alloc (received messages, NIF environments), goes to rec->frag_words, which is
 * reported apart and weighs no stack. false if high_water is not inside the heap.
 */
static __always_inline bool alloc_weight(struct scratch *s, struct bb_record *rec, __u64 c_p, __u64 id,
					 __u64 heap, __u64 htop, __u64 need)
{
	struct alloc_seen now = { .pid = id }, *prev;
	__u64 young, mbuf, grown;

	now.high_water = s->proc[(vm.proc_high_water / 8) & (PROC_SPAN_MAX / 8 - 1)];
	mbuf = s->proc[(vm.proc_mbuf_sz / 8) & (PROC_SPAN_MAX / 8 - 1)];
	if (now.high_water < heap || now.high_water > htop || (now.high_water & 7))
		return false;
	prev = bpf_map_lookup_elem(&alloc_seen, &c_p);
	/* Otherwise a collection since (or the first sight): all above high_water is new. */
	if (prev && prev->pid == id && prev->high_water == now.high_water) {
		now.heap_words = prev->heap_words;
		now.frag_words = prev->frag_words;
		now.frag_counted = prev->frag_counted;
	}
	if (need) {
		rec->alloc_words = need;
		now.frag_counted += need;
	} else {
		young = (htop - now.high_water) / 8;
		grown = mbuf > now.frag_words ? mbuf - now.frag_words : 0;
		rec->alloc_words = young > now.heap_words ? young - now.heap_words : 0;
		rec->frag_words = grown > now.frag_counted ? grown - now.frag_counted : 0;
		now.heap_words = young;
		now.frag_words = mbuf;
		now.frag_counted = 0;
	}
	bpf_map_update_elem(&alloc_seen, &c_p, &now, BPF_ANY);
	return true;
}

static __always_inline int walk_and_emit(void *ctx, __u64 ip, __u64 sp, __u64 bp, __u64 r13, __u32 flags,
					 bool fast, __u64 arg_p, __u64 need)
{
	struct native_walk *nw;
	__u32 base = 0;
	__u32 zero = 0, tid = (__u32)bpf_get_current_pid_tgid();
	struct scratch *s = bpf_map_lookup_elem(&scratch_map, &zero);
	struct bb_sched *sch = bpf_map_lookup_elem(&sched_threads, &tid);
	struct bb_record *rec;
	__u64 c_p = 0, id, htop, stop, heap, hend, E, sched_data;
	__u32 state;
	bool jit;

	if (!s)
		return 0;
	count(BB_C_SEEN);
	rec = &s->rec;
	nw = &s->native;
	nw->flags = 0;
	nw->clean = 0;
	rec->time_ns = bpf_ktime_get_ns();
	rec->ip = ip;
	rec->tid = tid;
	rec->cpu = bpf_get_smp_processor_id();
	rec->c_p = 0;
	rec->erl_pid = 0;
	rec->nframes = 0;
	rec->nkernel = 0;
	rec->nnative = 0;
	rec->reg_name = 0;
	rec->initial[0] = rec->initial[1] = rec->initial[2] = 0;
	rec->alloc_words = rec->frag_words = 0;
	rec->sched_type = sch ? sch->type : BB_SCHED_NONE;
	rec->sched_no = sch ? sch->no : 0;

	jit = in_jit_code(ip);
	if (jit) {
		rec->where = BB_WHERE_JIT;
		c_p = r13;   /* the JIT keeps c_p in r13 in Erlang code and its helpers */
	} else if (sch) {
		rec->where = BB_WHERE_SCHED_C;
		c_p = read_word(sch->esdp + vm.esd_current_process, &flags);
	} else {
		rec->where = BB_WHERE_OTHER;
	}

	/* Kernel frames first (leaf first), then native, then Erlang. */
	if (kernel_stacks && ctx && (flags & BB_F_KERNEL)) {
		long got = bpf_get_stack(ctx, rec->frames, BB_MAX_KERNEL_FRAMES * 8, 0);

		if (got > 0)
			base = rec->nkernel = got / 8;
	}
	nw->n = base;
	nw->sp = sp;
	if (!jit && (max_native_frames || nr_blame_ranges)) {
		struct native_walk_ctx nctx = { .s = s };
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
		__u32 m = blame_match(s, ip, sp, jit, sch, c_p, fast, nw, base);

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
		/* One read for all fields: each user-memory read costs more than the copy. */
		__u32 span = proc_span;

		if (span > sizeof(s->proc))
			span = sizeof(s->proc);
		if (bpf_probe_read_user(s->proc, span, (void *)c_p))
			flags |= BB_F_READ_FAULT;
		id = s->proc[(vm.proc_id / 8) & (PROC_SPAN_MAX / 8 - 1)];
		htop = s->proc[(vm.proc_htop / 8) & (PROC_SPAN_MAX / 8 - 1)];
		stop = s->proc[(vm.proc_stop / 8) & (PROC_SPAN_MAX / 8 - 1)];
		heap = s->proc[(vm.proc_heap / 8) & (PROC_SPAN_MAX / 8 - 1)];
		hend = s->proc[(vm.proc_hend / 8) & (PROC_SPAN_MAX / 8 - 1)];
		sched_data = s->proc[(vm.proc_scheduler_data / 8) & (PROC_SPAN_MAX / 8 - 1)];
		state = ((__u32 *)s->proc)[(vm.proc_state / 4) & (PROC_SPAN_MAX / 4 - 1)];
		/* In JIT code E is rsp, but JIT helpers run on the C stack with E in c_p->stop. */
		if (jit && sp >= htop && sp < hend) {
			E = sp;
			flags |= BB_F_E_FROM_RSP;
		} else {
			E = stop;
			flags |= BB_F_E_FROM_STOP;
		}
		/* The process must run here: a scheduler's current_process outlives the process's
		 * time on it (a dirty scheduler going to sleep after a dirty GC still points at
		 * it). A normal scheduler's process is RUNNING(_SYS) with scheduler_data naming that
		 * scheduler; a dirty scheduler's is DIRTY_RUNNING(_SYS). */
		if (!(flags & BB_F_READ_FAULT) && sch && !process_runs_here(sch, state, sched_data)) {
			flags |= BB_F_NOT_RUNNING;
		/* An internal pid has tag 0011; the stack grows down from hend towards htop. */
		} else if (!(flags & BB_F_READ_FAULT) && (id & 0xf) == 0x3 && heap <= htop && htop <= E &&
		    E <= hend && (E & 7) == 0) {
			/* max_frames counts Erlang frames, and in JIT code the running function is
			 * one of them. */
			struct scan c = { .s = s, .lo = E, .hi = hend, .mode = SCAN_ERLANG_STACK, .n = base,
					  .limit = base + (jit ? max_frames - 1 : max_frames) };

			if (c.limit > BB_MAX_FRAMES)
				c.limit = BB_MAX_FRAMES;

			/* erts_heap_alloc for another process's heap (a message built in it), or
			 * during a collection (the VM's own, a gc trace message's), is not the running
			 * code's allocation. */
			if (alloc_mode && ((need && (arg_p != c_p || (state & BB_PSFLG_GC))) ||
					   !alloc_weight(s, rec, c_p, id, heap, htop, need))) {
				count(BB_C_FILTERED);
				return 0;
			}
			flags |= BB_F_PROC;
			rec->c_p = c_p;
			rec->erl_pid = id;
			name_process(s, rec);
			if (frame_layout == 1 && (flags & BB_F_E_FROM_RSP) && bp >= E && bp < hend) {
				/* Below rbp: the running function's own slots, and the return address of
				 * a call whose frame is not set up yet. Above: the chain. */
				struct fp_walk w = { .c = &c, .fp = bp };

				c.hi = bp;
				scan_words(&c, max_stack_words, fast);
				c.hi = hend;
				c.flags &= ~(__u32)(BB_F_SCAN_LIMIT | BB_F_TRUNCATED);
				if (c.n < c.limit)
					bpf_loop(max_stack_words, fp_step, &w, 0);
				else
					c.flags |= BB_F_TRUNCATED;
				flags |= BB_F_FP_WALK;
			} else {
				scan_words(&c, max_stack_words, fast);
			}
			flags |= c.flags;
			rec->nframes = c.n;
		} else {
			flags |= BB_F_BAD_PROC;
		}
	}
	/* An allocation profile weighs stacks by words: a record of nothing adds nothing. */
	if (alloc_mode && !(rec->alloc_words + rec->frag_words)) {
		count(BB_C_FILTERED);
		return 0;
	}
	rec->flags = flags | nw->flags;
	return emit(rec);
}

static __always_inline int sample(void *ctx, __u64 ip, __u64 sp, __u64 bp, __u64 r13, __u32 flags, bool fast,
				  __u64 arg_p, __u64 need)
{
	__u64 start = measure_walk ? bpf_ktime_get_ns() : 0;
	int ret = walk_and_emit(ctx, ip, sp, bp, r13, flags, fast, arg_p, need);

	if (measure_walk)
		note_walk_time(start);
	return ret;
}

static __always_inline int perf_sample(struct bpf_perf_event_data *ctx, bool fast)
{
	struct pt_regs *regs;

	if ((bpf_get_current_pid_tgid() >> 32) != target_tgid)
		return 0;
	/* User and kernel addresses are disjoint halves on x86-64 (and the context only allows
	 * whole-word loads, so cs's low bits are not at hand). */
	if (ctx->regs.ip < (1ULL << 47))
		return sample(ctx, ctx->regs.ip, ctx->regs.sp, ctx->regs.bp, ctx->regs.r13, 0, fast, 0, 0);

	/* The sample interrupted a system call or fault: walk from the registers the thread
	 * will return to user space with. */
	regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	return sample(ctx, BPF_CORE_READ(regs, ip), BPF_CORE_READ(regs, sp), BPF_CORE_READ(regs, bp),
		      BPF_CORE_READ(regs, r13), BB_F_KERNEL, fast, 0, 0);
}

/* beam-bpf-blame --count and -e alloc's GC entries: one record per call of the probed native
 * function. */
static __always_inline int call_sample(struct pt_regs *ctx, bool fast)
{
	if ((bpf_get_current_pid_tgid() >> 32) != target_tgid)
		return 0;
	return sample(NULL, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx), ctx->r13, BB_F_UPROBE, fast, 0, 0);
}

/* -e alloc: erts_heap_alloc(Process *p, Uint need, Uint xtra), a heap fragment of `need` words. */
static __always_inline int heap_alloc_sample(struct pt_regs *ctx, bool fast)
{
	__u64 need = PT_REGS_PARM2(ctx);

	if ((bpf_get_current_pid_tgid() >> 32) != target_tgid || !need)
		return 0;
	return sample(NULL, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx), ctx->r13, BB_F_UPROBE | BB_F_HEAP_FRAG,
		      fast, PT_REGS_PARM1(ctx), need);
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
	struct scratch *s = bpf_map_lookup_elem(&scratch_map, &zero);

	if (!s || (bpf_get_current_pid_tgid() >> 32) != target_tgid)
		return 0;
	rec = &s->rec;
	__builtin_memset(rec, 0, bb_record_size(BB_CODE_EVENT_NFRAMES));
	if (bpf_probe_read_user(desc, sizeof(desc), (void *)jit_descriptor) ||
	    bpf_probe_read_user(entry, sizeof(entry), (void *)desc[1]) ||
	    bpf_probe_read_user(&rec->frames[2], 24, (void *)entry[2])) {
		count(BB_C_CODE_EVENTS_LOST);
		return 0;
	}
	rec->time_ns = bpf_ktime_get_ns();
	rec->tid = (__u32)bpf_get_current_pid_tgid();
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
int on_call(struct pt_regs *ctx) { return call_sample(ctx, false); }

SEC("uprobe")
int on_call_fast(struct pt_regs *ctx) { return call_sample(ctx, true); }

SEC("uprobe")
int on_heap_alloc(struct pt_regs *ctx) { return heap_alloc_sample(ctx, false); }

SEC("uprobe")
int on_heap_alloc_fast(struct pt_regs *ctx) { return heap_alloc_sample(ctx, true); }
