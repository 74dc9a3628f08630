/* beam-bpf-blame: is the blamed function running, as the leaf or as a caller on the native stack. */
#pragma once

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
static __always_inline __u32 blame_match(struct scratch *s, const struct bb_vm *v, __u64 ip, __u64 sp, bool jit,
					 const struct bb_sched *sch, __u64 c_p, bool fast,
					 const struct native_walk *nw, __u32 first)
{
	struct scan c = { .s = s, .v = v, .lo = sp, .mode = SCAN_NATIVE_FOR_BLAME };

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
