/* The sampling path every sampling program takes: from a thread's registers to one emitted bb_record. */
#pragma once

/*
 * What a program asks of walk_and_emit(): the thread's user registers at the instant, where
 * the walks start, and what the program already knows. The alloc fields are -e alloc's
 * (0 for every other program).
 */
struct walk_request {
	void *ctx;                /* the perf event's context, for the kernel's frames; NULL in a probe */
	const struct bb_vm *v;    /* the sampled VM (this_vm()) */
	__u64 ip, sp, bp;
	__u64 jit_c_p;            /* r13: the JIT keeps c_p there in Erlang code and its helpers */
	__u32 flags;              /* BB_F_* known before the walk: BB_F_KERNEL, BB_F_UPROBE, ... */
	bool fast;                /* the *_fast programs: the may_goto scan */
	struct {
		/* erts_heap_alloc(Process *p, Uint need, Uint xtra): a heap fragment of `need`
		 * words for p (need 0: not that probe). */
		__u64 p, need;
		/* A watched word's write (watch_hit()): the words the sample stands for, and the
		 * pid of the process whose heap holds the word. */
		__u64 weight, heap_owner;
	} alloc;
	/* -e offcpu: the weight of a blocked system call, its number and first argument. */
	struct {
		__u64 ns, syscall, arg0;
	} off;
};

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
	rec->x0 = 0;
	rec->bif_export = 0;
	rec->port_id = rec->port_owner = 0;
	__builtin_memset(rec->port_name, 0, sizeof(rec->port_name));
	rec->sched_type = sch ? sch->type : BB_SCHED_NONE;
	rec->sched_no = sch ? sch->no : 0;
}

/*
 * One sample: the kernel's frames (leaf first), then the native ones, then the Erlang ones of
 * the process running here, into one record. Dropped (counted as filtered) when blame's
 * function is not running, when --process names another process, or when an allocation
 * record weighs nothing.
 */
static __always_inline int walk_and_emit(const struct walk_request *req)
{
	const struct bb_vm *v = req->v;
	__u64 ip = req->ip, sp = req->sp, bp = req->bp;
	__u32 flags = req->flags;
	__u32 base = 0;
	__u32 zero = 0, tid = (__u32)bpf_get_current_pid_tgid();
	struct scratch *s = bpf_map_lookup_elem(&scratch_map, &zero);
	struct bb_sched *sch = bpf_map_lookup_elem(&sched_threads, &tid);
	struct bb_record *rec;
	struct native_walk *nw;
	struct proc_view p = {};
	__u64 c_p = 0, prt = 0;
	bool jit, port = false;

	if (!s)
		return 0;
	count(BB_C_SEEN);
	rec = &s->rec;
	nw = &s->native;
	nw->flags = 0;
	nw->clean = 0;
	init_record(rec, ip, tid, sch);
	if (req->off.ns) {
		rec->BB_OFFCPU_NS = req->off.ns;
		rec->BB_OFFCPU_SYSCALL = req->off.syscall;
		rec->BB_OFFCPU_ARG0 = req->off.arg0;
		flags |= BB_F_OFFCPU;
	}

	jit = in_jit_code(v, ip);
	if (jit) {
		rec->where = BB_WHERE_JIT;
		c_p = req->jit_c_p;   /* r13 */
	} else if (sch) {
		rec->where = BB_WHERE_SCHED_C;
		c_p = read_word(sch->esdp + v->layout.esd_current_process, &flags);
		prt = current_port(v, sch);
	} else {
		rec->where = BB_WHERE_OTHER;
	}
	if (c_p)
		read_process(s, v, c_p, jit, sp, &p, &flags);
	/* A port task's sample is the port's, unless a process runs here: one that calls a port
	 * (port_command/2) runs its driver with current_port set. A stale current_process
	 * (between a process's time slices) is not one. */
	if (prt && !(c_p && !(flags & BB_F_READ_FAULT) && process_runs_here(sch, p.state, p.sched_data)))
		port = read_port(v, prt, rec);
	if (port) {
		c_p = 0;
		flags = (flags & ~BB_F_READ_FAULT) | BB_F_PORT;  /* a stale process's read is not this sample's */
		count(BB_C_PORT);
	}
	/* --process: decided before any walk, from the process's own pid, or for a port task its
	 * connected process's. */
	if (only_pid_mask && (port ? !rec->port_owner || filtered_out(rec->port_owner) : !c_p || filtered_out(p.id))) {
		count(BB_C_FILTERED);
		return 0;
	}

	if (kernel_stacks && req->ctx && (flags & BB_F_KERNEL)) {
		long got = bpf_get_stack(req->ctx, rec->frames, BB_MAX_KERNEL_FRAMES * 8, 0);

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
		__u32 m = blame_match(s, v, ip, sp, jit, sch, c_p, req->fast, nw, base);

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
			if (only_pid_mask)
				goto filtered;
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
			if (alloc_mode && !req->alloc.weight &&
			    ((req->alloc.need && (req->alloc.p != c_p || (p.state & BB_PSFLG_GC))) ||
			     !alloc_weight(s, v, rec, c_p, p.id, p.heap, p.htop, req->alloc.need))) {
				count(BB_C_FILTERED);
				return 0;
			}
			rec->alloc_words += req->alloc.weight;
			if (!req->off.ns)  /* BB_OFFCPU_ARG0 shares its place */
				rec->heap_owner = req->alloc.heap_owner;
			flags |= BB_F_PROC;
			rec->c_p = c_p;
			rec->erl_pid = p.id;
			name_process(s, v, rec);
			/* Sampled by watchpoints, a GC entry gives the exact words only: no stack. */
			if (watch_mode && !req->alloc.need && !req->alloc.weight) {
				watch_gc_entry(c_p);
				if (!(rec->alloc_words + rec->frag_words)) {
					count(BB_C_FILTERED);
					return 0;
				}
				rec->flags = flags | BB_F_ALLOC_TOTAL;
				return emit(rec);
			}
			/* Blocked in a BIF: its first argument (BIFs take theirs in X registers). */
			if (req->off.ns && sch) {
				__u64 regs = read_word(sch->esdp + v->layout.esd_registers, &flags);

				if (regs) {
					rec->x0 = read_word(regs + v->layout.regs_x_regs, &flags);
					rec->bif_export = read_word(regs + v->layout.regs_tmp_mem + 8, &flags);
				}
			}
			flags |= walk_erlang(s, v, &p, base, jit, bp, req->fast);
		} else {
			if (only_pid_mask)
				goto filtered;
			flags |= BB_F_BAD_PROC;
		}
	}
	/* --process keeps only samples attributed to its process (not a stale current_process):
	 * those of the two branches above that set BB_F_PROC (c_p was checked before the walk).
	 * Tested there, not here as (flags & BB_F_PROC): a test of the flags after walk_erlang()
	 * makes the verifier track every bit the walk adds, and -e alloc's programs took 4x the
	 * instructions and 2.2 s instead of 0.45 s to load. */
	/* An allocation profile weighs stacks by words: a record of nothing adds nothing. */
	if (alloc_mode && !(rec->alloc_words + rec->frag_words)) {
		count(BB_C_FILTERED);
		return 0;
	}
	rec->flags = flags | nw->flags;
	return emit(rec);
filtered:
	count(BB_C_FILTERED);
	return 0;
}

/* walk_and_emit(), timed for --stats' handler-time histogram. */
static __always_inline int sample(const struct walk_request *req)
{
	__u64 start = measure_walk ? bpf_ktime_get_ns() : 0;
	int ret = walk_and_emit(req);

	if (measure_walk)
		note_walk_time(start);
	return ret;
}

/* A perf event's sample (cpu-clock, cycles): on_sample. */
static __always_inline int perf_sample(struct bpf_perf_event_data *ctx, bool fast)
{
	const struct bb_vm *v = this_vm();
	struct pt_regs *regs;

	if (!v)
		return 0;
	/* User and kernel addresses are disjoint halves on x86-64 (and the context only allows
	 * whole-word loads, so cs's low bits are not at hand). */
	if (ctx->regs.ip < (1ULL << 47)) {
		struct walk_request req = { .ctx = ctx, .v = v, .ip = ctx->regs.ip, .sp = ctx->regs.sp,
					    .bp = ctx->regs.bp, .jit_c_p = ctx->regs.r13, .fast = fast };

		return sample(&req);
	}

	/* The sample interrupted a system call or fault: walk from the registers the thread
	 * will return to user space with. */
	regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	struct walk_request req = { .ctx = ctx, .v = v, .ip = BPF_CORE_READ(regs, ip), .sp = BPF_CORE_READ(regs, sp),
				    .bp = BPF_CORE_READ(regs, bp), .jit_c_p = BPF_CORE_READ(regs, r13),
				    .flags = BB_F_KERNEL, .fast = fast };

	return sample(&req);
}

/* beam-bpf-blame --count and -e alloc's GC entries: one record per call of the probed native
 * function (on_call, and on_gc_session's entry). */
static __always_inline int call_sample(struct pt_regs *ctx, bool fast, bool note_watch)
{
	const struct bb_vm *v = this_vm();

	if (!v)
		return 0;
	if (watch_mode && note_watch)  /* before sample() ends the process's own watch, if it has it */
		watch_note_gc_entry();
	struct walk_request req = { .v = v, .ip = PT_REGS_IP(ctx), .sp = PT_REGS_SP(ctx), .bp = PT_REGS_FP(ctx),
				    .jit_c_p = ctx->r13, .flags = BB_F_UPROBE, .fast = fast };

	return sample(&req);
}

/* -e alloc: erts_heap_alloc(Process *p, Uint need, Uint xtra), a heap fragment of `need` words
 * (on_heap_alloc). */
static __always_inline int heap_alloc_sample(struct pt_regs *ctx, bool fast)
{
	__u64 need = PT_REGS_PARM2(ctx);
	const struct bb_vm *v = need ? this_vm() : NULL;

	if (!v)
		return 0;
	struct walk_request req = { .v = v, .ip = PT_REGS_IP(ctx), .sp = PT_REGS_SP(ctx), .bp = PT_REGS_FP(ctx),
				    .jit_c_p = ctx->r13, .flags = BB_F_UPROBE | BB_F_HEAP_FRAG, .fast = fast,
				    .alloc = { .p = PT_REGS_PARM1(ctx), .need = need } };

	return sample(&req);
}

/* -e alloc: a write to the watched word, sampled if watch_hit() accepts it (on_watch). */
static __always_inline int watch_sample(struct bpf_perf_event_data *ctx, bool fast)
{
	const struct bb_vm *v = this_vm();
	__u64 weight, heap_owner;

	if (!v || !watch_hit(ctx, v, &weight, &heap_owner))
		return 0;
	struct walk_request req = { .ctx = ctx, .v = v, .ip = ctx->regs.ip, .sp = ctx->regs.sp, .bp = ctx->regs.bp,
				    .jit_c_p = ctx->regs.r13, .flags = BB_F_WATCH, .fast = fast,
				    .alloc = { .weight = weight, .heap_owner = heap_owner } };

	return sample(&req);
}

/* -e offcpu: a VM thread's system call returns; walked if its blocked time is kept
 * (offcpu.bpf.h), from the registers it will return to user space with. */
static __always_inline int offcpu_sample(struct pt_regs *regs, bool fast)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bb_offcpu_thread *t = bpf_map_lookup_elem(&offcpu_threads, &tid);
	const struct bb_vm *v;
	__u64 w;

	if (!t || !t->off_ns)
		return 0;
	w = offcpu_weight(t->off_ns);
	t->off_ns = 0;
	if (!w || !(v = this_vm()))
		return 0;
	struct walk_request req = { .v = v, .ip = BPF_CORE_READ(regs, ip), .sp = BPF_CORE_READ(regs, sp),
				    .bp = BPF_CORE_READ(regs, bp), .jit_c_p = BPF_CORE_READ(regs, r13), .fast = fast,
				    .off = { .ns = w, .syscall = BPF_CORE_READ(regs, orig_ax), .arg0 = BPF_CORE_READ(regs, di) } };

	return sample(&req);
}
