/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * -e alloc's sampler: one hardware write watchpoint on a heap word of one Erlang process, shared
 * by the BPF side (bpf/alloc_watch.bpf.h) and user space (userspace/sampling/alloc_watch.cpp)
 * through the program's mmaped .bss. Kernel types only.
 */
#ifndef BB_ALLOC_WATCH_H
#define BB_ALLOC_WATCH_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/*
 * One sample's life. Its epoch (what the process allocates between two collections) is chosen
 * when a collection returns, before a word of it is allocated, so the choice cannot depend on
 * what the epoch holds:
 *   IDLE    --a GC returns, coin flip (BPF, which then waits)--> ARMING
 *   ARMING  --user space has moved the watchpoints to `addr`--> ARMED
 *   ARMED   --the BPF side sees it and lets the process go on--> LIVE
 *           (user space too slow: the BPF side stops waiting, LATE, IDLE)
 *   LIVE    --the allocation that writes addr (BPF)--> IDLE, one record
 *           --the process's next GC entry: the epoch did not reach addr--> IDLE, no record
 *           --LIVE for BB_WATCH_EXPIRY_NS (user space): EXPIRED, IDLE, no record
 * Each end is told to user space, for its counts.
 */
enum bb_watch_state {
	BB_WATCH_IDLE = 0,
	BB_WATCH_ARMING,
	BB_WATCH_ARMED,
	BB_WATCH_LIVE,
};

/* How a watch ended, counted by user space. */
enum bb_watch_outcome {
	BB_WATCH_SAMPLED = 1,   /* a record */
	BB_WATCH_MISSED,        /* the epoch ended below addr (its heap filled up to the stack first) */
	BB_WATCH_LATE,          /* user space did not arm within late_ns: the epoch is not used */
	BB_WATCH_STACK,         /* the process's stack reached addr first: no allocation there */
	BB_WATCH_EXPIRED,       /* LIVE too long (user space ended it): see BB_WATCH_EXPIRY_NS */
};

/* A watch ends after this long LIVE. One watch at a time: an epoch flipped in a process that
 * then waits (an idle gen_server) would hold it for as long, minutes, and no other epoch of the
 * VM could be sampled meanwhile (a burst of 1.9 million words got 117 samples instead of about
 * 3,500). The price: words allocated later than this after their epoch began are not sampled,
 * i.e. the allocation of processes that take longer than this to fill their young heap
 * (docs/allocation-profiling.md, Where it is still biased). */
#define BB_WATCH_EXPIRY_NS 100000000ULL

struct bb_watch {
	__u64 interval;     /* mean words per sample, set by user space */
	__u64 state;        /* enum bb_watch_state (64 bits: the BPF side compares and swaps it) */
	/* Set by BPF at the flip: the process and its epoch's free words, from the heap top to the
	 * end of the block. */
	__u64 c_p;
	__u64 lo, hi;
	/* The words the flip's chance was capped at (~0: none), for the sample's weight: a uprobe
	 * session decides at the GC entry whether to see the return, from the heap size then
	 * (bpf/alloc_watch.bpf.h, on_gc_session). */
	__u64 bound;
	/* Set by user space when arming. */
	__u64 addr;
};

/* CPUs whose arming thread is known (armer_of_cpu[]); a CPU numbered past it may wake the
 * thread of its own half, which then runs only once the flip gave up (LATE). */
#define BB_WATCH_MAX_CPUS 1024

/* What the BPF side tells an arming thread (ring buffer `watch_ticks_0` or `_1`, woken at each). */
struct bb_watch_tick {
	__u64 time_ns;
	__u32 state;
	__u32 outcome;
};

#endif /* BB_ALLOC_WATCH_H */
