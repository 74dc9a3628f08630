/* The native (C) stack walk, from the unwind rows user space compiled from .eh_frame. */
#pragma once

/*
 * Native frames, unwound with the rows of .eh_frame: for each frame, the row of its address
 * gives the CFA (the caller's rsp) from rsp or rbp; the return address is at CFA - 8 and the
 * caller's rbp, if this frame saved it, at CFA + 8 * rbp_slot. The walk ends at a return
 * address into JIT code (where a scheduler entered C from Erlang: the Erlang stack follows), at
 * the thread's root, or where the rows give out (flagged).
 */
struct native_walk_ctx {
	struct scratch *s;
	const struct bb_vm *v;
};

/*
 * The row that covers `pc` (the last one starting at or below it) in the files of the VM in
 * `slot`, as its 8 bytes; 0 (a BB_CFA_NONE row) if none. A global function: the verifier checks it once, not at each call.
 */
__noinline __u64 find_row(__u64 pc, __u32 slot)
{
	__u32 nr, first = 0, n = 0, lo = 0, hi = 0, key, *bk;
	__u64 rel = 0, row, bucket;
	struct bb_vm *v = bpf_map_lookup_elem(&vms, &slot);
	bool found = false;

	if (!v)
		return 0;
	nr = v->nr_unwind_modules;
	for (__u32 i = 0; i < BB_MAX_UNWIND_MODULES; i++) {
		const struct bb_unwind_module *m = &v->unwind_modules[i];

		if (i >= nr)
			break;
		if (pc >= m->start && pc < m->end) {
			rel = pc - m->bias;
			if (rel < m->pc_lo || rel > 0xffffffffULL)
				return 0;
			first = m->first_row;
			n = m->nrows;
			bucket = (rel - m->pc_lo) >> BB_UNWIND_BUCKET_SHIFT;
			/* Past the last bucket: the last row (a file's rows end with a NONE row). */
			if (bucket >= m->nbuckets)
				bucket = m->nbuckets - 1;
			key = m->first_bucket + (__u32)bucket;
			hi = bucket + 1 < m->nbuckets ? key + 1 : 0;
			found = m->nbuckets > 0;
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
	if (i > 0 && in_jit_code(ctx->v, ip)) {
		w->clean = 1;
		return 1;
	}
	/* A return address may be just past its function (a call to a noreturn one): look up the
	 * call instruction. */
	bits = find_row(i > 0 ? ip - 1 : ip, ctx->s->slot);
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
	if (row.cfa_rule == BB_CFA_RSP_DEREF) {
		if (bpf_probe_read_user(&cfa, 8, (void *)(w->sp + 8 * (__s64)(__s16)row.cfa_words))) {
			w->flags |= BB_F_READ_FAULT;
			return 1;
		}
		cfa += 8;
	} else {
		cfa = (row.cfa_rule == BB_CFA_RSP ? w->sp : w->bp) + 8 * (__u64)row.cfa_words;
	}
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
