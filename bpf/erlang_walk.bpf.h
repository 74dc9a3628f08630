/* The Erlang stack walk: return addresses into JIT code found between E and hend, by a word scan or the frame-pointer chain. */
#pragma once

/* may_goto (kernel 6.9+), spelled in bytes as the kernel's bpf_experimental.h does for
 * compilers without the mnemonic: a loop the verifier bounds itself, no call per iteration.
 * Only the *_fast programs use it; older kernels load the others
 * (userspace/sampling/walker.cpp). */
#define can_loop ({ __label__ l_break, l_continue; bool ret = true; \
	asm volatile goto("1:.byte 0xe5; .byte 0; .long ((%l[l_break] - 1b - 8) / 8) & 0xffff; .short 0" :::: l_break); \
	goto l_continue; l_break: ret = false; l_continue:; ret; })

struct scan {
	struct scratch *s;
	const struct bb_vm *v;
	__u64 lo, hi;
	__u32 mode;
	__u32 limit;    /* the record's frames end here */
	__u32 ring0;    /* from here on, a ring of the root-most frames; == limit: no ring */
	__u32 n;        /* frames found (beyond limit when the ring turned) */
	__u32 flags;
	/* Where the scan was when the record was full; it goes on BB_ROOT_SCAN_WORDS past it. An
	 * address, not a count of words from 0: a count is a constant at each iteration to the
	 * verifier, so no two of its 16,384 iterations are alike and it gives up ("sequence of
	 * jumps is too complex", kernel 6.18.44). */
	__u64 full_at;
	bool found;     /* blame: a return address into FUNC */
};

/* Past max_frames, the scan of `words` at addr goes on for the root-most frames within
 * BB_ROOT_SCAN_WORDS; false (and BB_F_SCAN_LIMIT) when that ran out. */
static __always_inline bool may_scan_on(struct scan *c, __u64 addr, __u32 words)
{
	if (c->mode != SCAN_ERLANG_STACK || c->n < c->limit)
		return true;
	if (!c->full_at)
		c->full_at = addr;
	if (addr + (__u64)words * 8 - c->full_at <= BB_ROOT_SCAN_WORDS * 8)
		return true;
	c->flags |= BB_F_SCAN_LIMIT;
	return false;
}

/* Keeps the n-th frame found, the leaf-most up to ring0 and then the root-most in the ring;
 * false when the record is full and keeps no ring (the walk ends there). */
static __always_inline bool keep_frame(struct bb_record *rec, __u64 n, __u64 limit, __u64 ring0, __u64 w)
{
	if (n >= limit && ring0 >= limit)
		return false;
	rec->frames[BB_ROOT_SLOT(n, ring0) & (BB_MAX_FRAMES - 1)] = w;
	return true;
}

static long scan_word(__u32 i, struct scan *c)
{
	__u32 j = i & (BB_STACK_CHUNK_WORDS - 1);
	__u64 addr = c->lo + (__u64)i * 8;
	__u64 w;

	if (!may_scan_on(c, addr, 1))
		return 1;
	if (j == 0) {
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
	if ((w & 3) == 0 && in_jit_code(c->v, w)) {
		if (!keep_frame(&c->s->rec, c->n, c->limit, c->ring0, w)) {
			c->flags |= BB_F_TRUNCATED;
			return 1;
		}
		c->n++;
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
	bool full;  /* stopped with frames left, at fp */
};

static long fp_step(__u32 i, struct fp_walk *w)
{
	struct scan *c = w->c;
	__u64 frame[2];

	/* Full: the word scan goes on from here for the root-most frames, at a few ns a word
	 * where a link costs ~25 (3,000 frames deep: 71 us a sample by links). */
	if (c->n >= c->limit) {
		w->full = true;
		return 1;
	}
	if (w->fp < c->lo || w->fp + 16 > c->hi || (w->fp & 7))
		return 1;
	if (bpf_probe_read_user(frame, sizeof(frame), (void *)w->fp)) {
		c->flags |= BB_F_READ_FAULT;
		return 1;
	}
	if ((frame[1] & 3) == 0 && in_jit_code(c->v, frame[1])) {
		if (!keep_frame(&c->s->rec, c->n, c->limit, c->ring0, frame[1])) {
			c->flags |= BB_F_TRUNCATED;
			return 1;
		}
		c->n++;
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
	if (!may_scan_on(c, addr, len / 8))
		return 1;
	if (bpf_probe_read_user(s->words, len, (void *)addr)) {
		c->flags |= BB_F_READ_FAULT;
		return 1;
	}
	s->nw = len / 8;
	s->j = 0;
	s->n = c->n;
	s->limit = c->limit;
	s->ring0 = c->ring0;
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
		} else if ((w & 3) == 0 && in_jit_code(c->v, w)) {
			if (!keep_frame(&s->rec, s->n, s->limit, s->ring0, w)) {
				s->stop = 1;
				break;
			}
			s->n++;
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

/* The Erlang frames of the process `p` (walkable) into rec->frames from `base` on; the
 * walk's flags. max_frames counts Erlang frames, and in JIT code the running function is one
 * of them. A deeper stack is scanned on toward its bottom (BB_ROOT_SCAN_WORDS more at most) so
 * that its last BB_ROOT_FRAMES slots hold the root-most frames: a deep recursion keeps its
 * callers. A frame-pointer VM's chain is left for the word scan there (may_scan_on). */
static __always_inline __u32 walk_erlang(struct scratch *s, const struct bb_vm *v, const struct proc_view *p,
					 __u32 base, bool jit, __u64 bp, bool fast)
{
	struct scan c = { .s = s, .v = v, .lo = p->E, .hi = p->hend, .mode = SCAN_ERLANG_STACK, .n = base,
			  .limit = base + (jit ? max_frames - 1 : max_frames) };
	__u32 flags = 0;

	if (c.limit > BB_MAX_FRAMES)
		c.limit = BB_MAX_FRAMES;
	c.ring0 = c.limit >= base + 2 * BB_ROOT_FRAMES ? c.limit - BB_ROOT_FRAMES : c.limit;
	if (v->frame_layout == 1 && p->e_from_rsp && bp >= p->E && bp < p->hend) {
		/* Below rbp: the running function's own slots, and the return address of a call
		 * whose frame is not set up yet. Above: the chain. */
		struct fp_walk w = { .c = &c, .fp = bp };

		c.hi = bp;
		scan_words(&c, max_stack_words, fast);
		c.hi = p->hend;
		c.flags &= ~(__u32)(BB_F_SCAN_LIMIT | BB_F_TRUNCATED);
		bpf_loop(max_stack_words, fp_step, &w, 0);
		if (w.full) {
			if (c.ring0 < c.limit && w.fp >= c.lo && w.fp < c.hi) {
				c.lo = w.fp;
				scan_words(&c, max_stack_words, fast);
			} else {
				c.flags |= BB_F_TRUNCATED;
			}
		}
		flags |= BB_F_FP_WALK;
	} else {
		scan_words(&c, max_stack_words, fast);
	}
	if (c.n > c.limit) {
		s->rec.nskipped = c.n - c.limit;
		c.n = c.limit;
		c.flags |= BB_F_TRUNCATED;
	}
	s->rec.nframes = c.n;
	return flags | c.flags;
}
