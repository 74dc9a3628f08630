/* The walker's configuration (set by user space before load), its maps, and its counters. Included once, by beam_walk.bpf.c. */
#pragma once

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
/* -e alloc sampled by watchpoints (alloc_watch.bpf.h): GC entries give the exact totals only. */
const volatile __u32 watch_mode = 0;
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
