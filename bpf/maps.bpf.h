/* The walker's configuration (set by user space before load), the VMs it samples, its maps and counters. Included once, by beam_walk.bpf.c. */
#pragma once

/* Set by user space before load: the same for every VM the walker samples. */
const volatile __u32 max_frames = 512;
const volatile __u32 max_stack_words = 1 << 17;   /* 1 MiB of Erlang stack per walk */
const volatile __u32 blame_scan_words = 2048;     /* 16 KiB of native stack */
const volatile __u32 wakeup_bytes = 1 << 20;      /* wake the reader past this much data */
const volatile __u32 measure_walk = 0;            /* keep the handler-time histogram */
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
/* --process: the one process whose samples are kept (its pid term under the mask). */
const volatile __u64 only_pid = 0;
const volatile __u64 only_pid_mask = 0;

/*
 * The VMs sampled, one slot each (struct bb_vm: the build's offsets, its JIT code, its unwind
 * modules), and each one's slot by OS pid. Sized by user space: one slot for beam-bpf-sample,
 * as many as beam-bpf-agent follows at once. A thread of no VM here is not sampled.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);           /* sized by user space */
	__type(key, __u32);
	__type(value, struct bb_vm);
} vms SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);           /* sized by user space */
	__type(key, __u32);               /* tgid */
	__type(value, __u32);             /* slot in vms */
} vm_slots SEC(".maps");

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
	__u64 j, nw, n, limit, ring0, stop;
	__u32 slot;  /* the sampled VM's (this_vm()): which VM's counters count() adds to */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BB_C_NR);     /* BB_C_NR a slot: sized by user space */
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BB_WALK_HIST_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} walk_ns_hist SEC(".maps");

/* Counts for the VM this program run samples (this_vm() chose it). */
static __always_inline void count_n(__u32 which, __u64 n)
{
	__u32 zero = 0, key;
	struct scratch *s = bpf_map_lookup_elem(&scratch_map, &zero);
	__u64 *c;

	if (!s)
		return;
	key = s->slot * BB_C_NR + which;
	c = bpf_map_lookup_elem(&counters, &key);
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

/*
 * The VM the running thread belongs to, NULL if this walker does not sample it. Its slot is
 * noted in the CPU's scratch for count(): a program run on this CPU cannot be interrupted by
 * another (the kernel runs one tracing program at a time per CPU), except -e alloc's sleepable
 * GC probes, whose walker samples one VM (and whose own programs cannot run inside them: no
 * probed function or watched write runs on the CPU meanwhile).
 */
static __always_inline const struct bb_vm *this_vm(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32, zero = 0, *slot;
	struct scratch *s;
	struct bb_vm *v;

	slot = bpf_map_lookup_elem(&vm_slots, &tgid);
	if (!slot)
		return NULL;
	v = bpf_map_lookup_elem(&vms, slot);
	/* A slot freed and given to another VM since the lookup is not this VM's. */
	if (!v || v->tgid != tgid)
		return NULL;
	s = bpf_map_lookup_elem(&scratch_map, &zero);
	if (!s)
		return NULL;
	s->slot = *slot;
	return v;
}
