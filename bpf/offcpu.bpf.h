/*
 * -e offcpu: where a VM thread blocks, and for how long.
 *
 * The walk is not made when the thread blocks but when its system call returns: the thread has
 * not run a user instruction meanwhile, so its registers (the system call's pt_regs), its native
 * stack and the Erlang stack of the process its scheduler runs are as they were when it blocked,
 * and the time it stood blocked is known by then. So a block is walked only if it is kept:
 *   - every block of threshold ns or more, weighed by its ns;
 *   - a shorter one with probability ns / threshold, weighed by the threshold:
 * each block's expected weight is its ns, whatever its length (the totals stay unbiased), and
 * the walks of a VM that blocks 100,000 times a second for microseconds are few.
 * Blocked means switched out not runnable, up to the wakeup: the wait for a CPU after it is
 * run-queue latency, not off-CPU time. Blocks outside a system call (a page fault reading from
 * disk) are charged to the thread's next system call.
 */
#pragma once

const volatile __u64 offcpu_threshold_ns = 1000000;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);           /* sized by user space */
	__type(key, __u32);               /* tid */
	__type(value, struct bb_offcpu_thread);
} offcpu_threads SEC(".maps");

#define BB_TASK_BLOCKED 0x3  /* TASK_INTERRUPTIBLE | TASK_UNINTERRUPTIBLE */

static __always_inline bool vm_task(const struct task_struct *t)
{
	__u32 tgid = BPF_CORE_READ(t, tgid);

	return bpf_map_lookup_elem(&vm_slots, &tgid) != NULL;
}

/* A thread blocked from `since` is running again (or runnable): the block's ns are its call's. */
static __always_inline void offcpu_unblock(__u32 tid, __u64 now)
{
	struct bb_offcpu_thread *t = bpf_map_lookup_elem(&offcpu_threads, &tid);

	if (t && t->since && now > t->since) {
		t->off_ns += now - t->since;
		t->since = 0;
	}
}

static __always_inline void offcpu_block(const struct task_struct *prev, __u64 now)
{
	__u32 tid = BPF_CORE_READ(prev, pid);
	struct bb_offcpu_thread *t = bpf_map_lookup_elem(&offcpu_threads, &tid), fresh = { .since = now };

	if (t)
		t->since = now;
	else
		bpf_map_update_elem(&offcpu_threads, &tid, &fresh, BPF_ANY);
}

/*
 * Whether a call that blocked `ns` is kept, and its weight: ns from the threshold up; below it,
 * the threshold with probability ns / threshold (bpf_get_prandom_u32() / 2^32 < ns / threshold;
 * user space keeps the threshold under 2^32).
 */
static __always_inline __u64 offcpu_weight(__u64 ns)
{
	if (ns >= offcpu_threshold_ns)
		return ns;
	if ((__u64)bpf_get_prandom_u32() * offcpu_threshold_ns < (ns << 32))
		return offcpu_threshold_ns;
	return 0;
}
