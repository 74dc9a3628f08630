/* The Erlang process a sample belongs to: is it the one running here, its name, and -e alloc's words. */
#pragma once

/* The fields of struct process a sample needs, read in one go (user memory reads cost more
 * than the copy). E is where the Erlang stack starts: in JIT code rsp, but JIT helpers run on
 * the C stack with E in c_p->stop. */
struct proc_view {
	__u64 id, htop, stop, heap, hend, E, sched_data;
	__u32 state;
	bool e_from_rsp;
};

static __always_inline void read_process(struct scratch *s, const struct bb_vm *v, __u64 c_p, bool jit, __u64 sp,
					 struct proc_view *p, __u32 *flags)
{
	__u32 span = v->proc_span;

	if (span > sizeof(s->proc))
		span = sizeof(s->proc);
	if (bpf_probe_read_user(s->proc, span, (void *)c_p))
		*flags |= BB_F_READ_FAULT;
	p->id = s->proc[(v->layout.proc_id / 8) & (PROC_SPAN_MAX / 8 - 1)];
	p->htop = s->proc[(v->layout.proc_htop / 8) & (PROC_SPAN_MAX / 8 - 1)];
	p->stop = s->proc[(v->layout.proc_stop / 8) & (PROC_SPAN_MAX / 8 - 1)];
	p->heap = s->proc[(v->layout.proc_heap / 8) & (PROC_SPAN_MAX / 8 - 1)];
	p->hend = s->proc[(v->layout.proc_hend / 8) & (PROC_SPAN_MAX / 8 - 1)];
	p->sched_data = s->proc[(v->layout.proc_scheduler_data / 8) & (PROC_SPAN_MAX / 8 - 1)];
	p->state = ((__u32 *)s->proc)[(v->layout.proc_state / 4) & (PROC_SPAN_MAX / 4 - 1)];
	if (jit && sp >= p->htop && sp < p->hend) {
		p->E = sp;
		p->e_from_rsp = true;
		*flags |= BB_F_E_FROM_RSP;
	} else {
		p->E = p->stop;
		p->e_from_rsp = false;
		*flags |= BB_F_E_FROM_STOP;
	}
}

/* The port whose task a normal scheduler runs: esdp->current_port, set by erts_port_task_execute
 * for the task's length (0 if none, or on a dirty scheduler, which runs no ports). */
static __always_inline __u64 current_port(const struct bb_vm *v, const struct bb_sched *sch)
{
	__u32 fault = 0;
	__u64 prt;

	if (sch->type != BB_SCHED_NORMAL)
		return 0;
	prt = read_word(sch->esdp + v->layout.esd_current_port, &fault);
	return fault || (prt & 7) ? 0 : prt;
}

/*
 * The port at `prt` into the record's port fields: false if it does not read as a port
 * (common.id's tag 0111). Its connected process is kept if it reads as a local pid (tag 0011).
 * Reads of their own: a fault here is not the process's.
 */
static __always_inline bool read_port(const struct bb_vm *v, __u64 prt, struct bb_record *rec)
{
	__u32 fault = 0;
	__u64 id, owner, name;

	id = read_word(prt + v->layout.port_id, &fault);
	if (fault || (id & 0xf) != 0x7)
		return false;
	owner = read_word(prt + v->layout.port_connected, &fault);
	name = read_word(prt + v->layout.port_name, &fault);
	rec->port_id = id;
	rec->port_owner = !fault && (owner & 0xf) == 0x3 ? owner : 0;
	if (name && !fault)
		bpf_probe_read_user_str(rec->port_name, sizeof(rec->port_name), (void *)name);
	return true;
}

/* --process names another process than the one of pid term `erl_pid`. */
static __always_inline bool filtered_out(__u64 erl_pid)
{
	return only_pid_mask && (erl_pid & only_pid_mask) != only_pid;
}

/* A normal scheduler's process is RUNNING(_SYS) with scheduler_data naming that scheduler; a
 * dirty scheduler's is DIRTY_RUNNING(_SYS). */
static __always_inline bool process_runs_here(const struct bb_sched *sch, __u32 state, __u64 sched_data)
{
	if (sch->type == BB_SCHED_NORMAL)
		return (state & (BB_PSFLG_RUNNING | BB_PSFLG_RUNNING_SYS)) && sched_data == sch->esdp;
	return state & (BB_PSFLG_DIRTY_RUNNING | BB_PSFLG_DIRTY_RUNNING_SYS);
}

/*
 * Is the process read at this sample the one running here, with a stack to walk? 0 if it is,
 * else the counter (enum bb_counter) of the first check it fails: it was read; its state says
 * it runs on this scheduler (a scheduler's current_process outlives the process's time on it:
 * a dirty scheduler going to sleep after a dirty GC still points at it); common.id is an
 * internal pid (tag 0011); heap <= htop <= E (the stack grows down from hend towards htop);
 * E <= hend and a word address.
 */
static __always_inline __u32 process_check(const struct proc_view *p, __u32 flags, const struct bb_sched *sch)
{
	if (flags & BB_F_READ_FAULT)
		return BB_C_BAD_READ;
	if (sch && !process_runs_here(sch, p->state, p->sched_data))
		return BB_C_BAD_STATE;
	if ((p->id & 0xf) != 0x3)
		return BB_C_BAD_PID;
	if (!(p->heap <= p->htop && p->htop <= p->E))
		return BB_C_BAD_HEAP;
	if (!(p->E <= p->hend && (p->E & 7) == 0))
		return BB_C_BAD_STACK;
	return 0;
}

/*
 * A process whose stack failed the checks because of what it is doing, which its state says:
 * the collector is moving its heap and stack (measured on the demo workload: every such sample
 * was one, 72 of 6,370), or it is tearing itself down. Its pid and name are still its own, and
 * its native frames say what it does: BB_F_IN_GC or BB_F_EXITING, else 0.
 */
static __always_inline __u32 process_in_transition(const struct proc_view *p, __u32 bad)
{
	if ((bad != BB_C_BAD_HEAP && bad != BB_C_BAD_STACK) || alloc_mode)
		return 0;
	if (p->state & BB_PSFLG_GC)
		return BB_F_IN_GC;
	if (p->state & BB_PSFLG_EXITING)
		return BB_F_EXITING;
	return 0;
}


/* Term tags (erl_term.h): a list cell's pointer ends in 01, a boxed term's in 10; a tuple's
 * header is its arity << 6. */
#define BB_TERM_LIST 1
#define BB_TERM_BOXED 2
#define BB_TUPLE_HEADER(arity) ((__u64)(arity) << 6)
/* Collisions a dictionary slot holds as a list: more than a few is not a dictionary of names. */
#define BB_DICT_BUCKET_MAX 4

/*
 * The value under the atom `key` in a process's dictionary, 0 if not found. The dictionary
 * is a linear hash table (erl_process_dict.c, the same in OTP 25 to 29): an atom hashes to its
 * index (atom_val), its slot is the hash masked by sizeMask, or by half of it past usedSlots;
 * the slot holds a {Key, Value} tuple or a list of them.
 */
static __always_inline __u64 dict_get(const struct bb_vm *v, __u64 dict, __u64 key)
{
	/* sizeMask and usedSlots: sizeMask is the member before usedSlots in every release */
	__u32 head[2], err = 0;
	__u64 hx = key >> 6, ix, t, kv[3], cell[2];

	if (bpf_probe_read_user(head, sizeof(head), (void *)(dict + v->layout.pdict_used_slots - 4)))
		return 0;
	ix = hx & head[0];
	if (ix >= head[1])
		ix = hx & (head[0] >> 1);
	t = read_word(dict + v->layout.pdict_data + 8 * ix, &err);
	for (int i = 0; i < BB_DICT_BUCKET_MAX && !err; i++) {
		__u64 e = t;

		if ((t & 3) == BB_TERM_LIST) {
			if (bpf_probe_read_user(cell, sizeof(cell), (void *)(t - BB_TERM_LIST)))
				return 0;
			e = cell[0];
			t = cell[1];
		} else {
			t = 0;
		}
		if ((e & 3) == BB_TERM_BOXED && !bpf_probe_read_user(kv, sizeof(kv), (void *)(e - BB_TERM_BOXED)) &&
		    kv[0] == BB_TUPLE_HEADER(2) && kv[1] == key)
			return kv[2];
		if ((t & 3) != BB_TERM_LIST)
			break;
	}
	return 0;
}

/*
 * What names a proc_lib or Elixir Task process, read at the sample: its '$initial_call' and
 * its first '$callers'. A task of Task.async_stream lives a few milliseconds; the reader sees
 * its record up to 100 ms later, when its dictionary is gone. Each is left 0 when it does not
 * read as one.
 */
static __always_inline void read_task_names(struct scratch *s, const struct bb_vm *v, struct bb_record *rec)
{
	__u64 dict = s->proc[(v->layout.proc_dictionary / 8) & (PROC_SPAN_MAX / 8 - 1)], t, mfa[4], cell[2];

	if (!dict || (dict & 7))
		return;
	t = dict_get(v, dict, v->dict_key_initial_call);
	if ((t & 3) == BB_TERM_BOXED && !bpf_probe_read_user(mfa, sizeof(mfa), (void *)(t - BB_TERM_BOXED)) &&
	    mfa[0] == BB_TUPLE_HEADER(3)) {
		rec->dict_initial[0] = mfa[1];
		rec->dict_initial[1] = mfa[2];
		rec->dict_initial[2] = mfa[3];
	}
	if (!v->dict_key_callers)
		return;
	t = dict_get(v, dict, v->dict_key_callers);
	if ((t & 3) == BB_TERM_LIST && !bpf_probe_read_user(cell, sizeof(cell), (void *)(t - BB_TERM_LIST)))
		rec->dict_caller = cell[0];
}

/* The process's registered name and initial call, for reports that name processes. A failed
 * read only leaves the name out: it says nothing about the stack. */
static __always_inline void name_process(struct scratch *s, const struct bb_vm *v, struct bb_record *rec)
{
	__u64 reg = s->proc[(v->layout.proc_reg / 8) & (PROC_SPAN_MAX / 8 - 1)];
	__u32 ignored = 0;

	if (reg)
		rec->reg_name = read_word(reg + v->layout.regproc_name, &ignored);
	rec->initial[0] = s->proc[(v->layout.proc_initial / 8) & (PROC_SPAN_MAX / 8 - 1)];
	rec->initial[1] = s->proc[(v->layout.proc_initial / 8 + 1) & (PROC_SPAN_MAX / 8 - 1)];
	rec->initial[2] = s->proc[(v->layout.proc_initial / 8 + 2) & (PROC_SPAN_MAX / 8 - 1)];
	if (!reg && v->dict_key_initial_call)
		read_task_names(s, v, rec);
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
static __always_inline bool alloc_weight(struct scratch *s, const struct bb_vm *v, struct bb_record *rec, __u64 c_p,
					 __u64 id, __u64 heap, __u64 htop, __u64 need)
{
	struct alloc_seen now = { .pid = id }, *prev;
	__u64 young, mbuf, grown;

	now.high_water = s->proc[(v->layout.proc_high_water / 8) & (PROC_SPAN_MAX / 8 - 1)];
	mbuf = s->proc[(v->layout.proc_mbuf_sz / 8) & (PROC_SPAN_MAX / 8 - 1)];
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
