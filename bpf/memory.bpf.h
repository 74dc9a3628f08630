/* Reads of the target's memory, and where an address is: JIT code, a blamed function. Each read is bounded and may fail. */
#pragma once

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

static __always_inline bool in_jit_code(const struct bb_vm *v, __u64 addr)
{
	return in_ranges(addr, v->code_ranges, v->nr_code_ranges, BB_MAX_CODE_RANGES);
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
