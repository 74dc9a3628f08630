/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The one record the BPF walker (bpf/beam_walk.bpf.c) hands to user space
 * (userspace/sampling/walker.cpp), and the configuration user space hands back.
 * Included by both sides: keep it C, kernel types only.
 */
#ifndef BEAM_BPF_H
#define BEAM_BPF_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#include "bb_vm_fields.h"

/* Ceiling of --max-depth. A record reserves room for this many frames; the
 * ring buffer carries only the frames a sample has (see bb_record_size). */
#define BB_MAX_FRAMES 1024
/* The root-most Erlang frames a truncated walk keeps (a power of two), and where the one found
 * `i`-th (0: the first frame of the record) lives when the ring starts at slot `ring0`. */
#define BB_ROOT_FRAMES 32
/* How far past max_frames the walk scans on for them: words of stack (a frame-pointer link
 * counts as two). Deeper, the record keeps its leaf-most frames and BB_F_SCAN_LIMIT: a
 * 100,000-deep recursion scanned to its bottom cost 200 us a sample, 3,000 deep costs 7. */
#define BB_ROOT_SCAN_WORDS 16384
#define BB_ROOT_SLOT(i, ring0) ((i) < (ring0) ? (i) : (ring0) + (((i) - (ring0)) & (BB_ROOT_FRAMES - 1)))
/* The bytes of a port's name a record keeps, its NUL included. */
#define BB_PORT_NAME_MAX 24
/* Executable JIT mappings the walker accepts continuation pointers from. */
#define BB_MAX_CODE_RANGES 16
/* Address ranges of the native function beam-bpf-blame looks for. */
#define BB_MAX_BLAME_RANGES 32
/* Words of the Erlang stack read per bounded read. */
#define BB_STACK_CHUNK_WORDS 256
/* Native unwinding (--native, the default): executable file mappings whose .eh_frame rows the
 * walker has (bb_unwind_module), native frames it walks at most, and the kernel frames
 * (--kernel) a record carries at most. */
#define BB_MAX_UNWIND_MODULES 128
#define BB_MAX_NATIVE_FRAMES 128
#define BB_MAX_KERNEL_FRAMES 64

/* Where the sampled thread was. */
enum bb_where {
	BB_WHERE_OTHER = 0,     /* a VM thread that runs no Erlang process (aux, poller, async) */
	BB_WHERE_JIT = 1,       /* executing JIT code: c_p in r13, E = rsp */
	BB_WHERE_SCHED_C = 2,   /* C code on a scheduler thread: c_p = esdp->current_process */
	/* Not a sample: the VM (un)registered JIT code with the GDB JIT interface. See
	 * struct bb_code_event for what the record's fields then hold. */
	BB_WHERE_CODE_EVENT = 3,
};

enum bb_sched_type {           /* as ErtsSchedType in erl_process.h */
	BB_SCHED_NORMAL = 0,
	BB_SCHED_DIRTY_CPU = 1,
	BB_SCHED_DIRTY_IO = 2,
	BB_SCHED_NONE = 255,
};

/* What was and was not trusted in a record. */
enum bb_flags {
	BB_F_KERNEL = 1u << 0,        /* sample hit kernel mode; ip/regs are the thread's user regs */
	BB_F_PROC = 1u << 1,          /* c_p passed heap <= htop <= E <= hend and the pid tag check */
	BB_F_BAD_PROC = 1u << 2,      /* a candidate c_p failed those checks: no Erlang frames */
	BB_F_E_FROM_RSP = 1u << 3,    /* E was rsp (JIT code on the Erlang stack): exact */
	BB_F_E_FROM_STOP = 1u << 4,   /* E was c_p->stop: exact in GC and most BIFs, else maybe stale */
	BB_F_TRUNCATED = 1u << 5,     /* more frames than max_frames: see bb_record.nskipped */
	BB_F_SCAN_LIMIT = 1u << 6,    /* the word budget ran out before hend */
	BB_F_READ_FAULT = 1u << 7,    /* a read of the target's memory failed mid-walk */
	BB_F_FP_WALK = 1u << 8,       /* frames came from the frame-pointer chain */
	BB_F_BLAME_LEAF = 1u << 9,    /* blame: the IP was inside FUNC */
	BB_F_BLAME_CALLER = 1u << 10, /* blame: a return address into FUNC was on the native stack */
	BB_F_UPROBE = 1u << 11,       /* from the entry probe of beam-bpf-blame --count */
	BB_F_NOT_RUNNING = 1u << 12,  /* the scheduler pointed at a process that does not run there
				       * (a stale current_process): the sample is the scheduler's */
	BB_F_HEAP_FRAG = 1u << 13,    /* -e alloc: from erts_heap_alloc (a heap fragment), not a GC entry */
	/* How the native walk ended, when it did not end in JIT code or at the thread's root: */
	BB_F_NATIVE_NO_ROW = 1u << 14,    /* an address no unwind row covers (unknown code, a gap) */
	BB_F_NATIVE_BAD = 1u << 15,       /* a rule it cannot follow, or a frame that does not go up */
	BB_F_NATIVE_TRUNCATED = 1u << 16, /* more native frames than max_native_frames */
	BB_F_BLAME_SCAN = 1u << 17,       /* blame decided by the stack-word scan: the unwind stopped short */
	/* Attributed to its process (BB_F_PROC) although its stack failed the checks, because its
	 * state says why: no Erlang frames (the report shows [gc] or [exiting] in their place). */
	BB_F_IN_GC = 1u << 18,        /* being garbage collected: the collector is moving its stack */
	BB_F_EXITING = 1u << 19,      /* exiting: its heap and stack are being torn down */
	BB_F_WATCH = 1u << 20,        /* -e alloc: a watchpoint's sample (bpf/alloc_watch.bpf.h), weighed by alloc_words */
	BB_F_ALLOC_TOTAL = 1u << 21,  /* -e alloc: a GC entry's exact words, no stack (watchpoints attribute them) */
	BB_F_OFFCPU = 1u << 22,       /* -e offcpu: a system call's time blocked (bpf/offcpu.bpf.h), weighed by BB_OFFCPU_NS */
	BB_F_PORT = 1u << 23,         /* a scheduler running a port task, no process: see bb_record.port_id */
};

struct bb_record {
	__u64 time_ns;   /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 ip;        /* leaf user-space instruction pointer */
	__u64 c_p;       /* Process * being run, 0 if none */
	__u64 erl_pid;   /* c_p->common.id: an internal pid term, 0 if none */
	__u32 tid;
	__u32 flags;     /* enum bb_flags */
	__u16 cpu;
	__u8 where;      /* enum bb_where */
	__u8 sched_type; /* enum bb_sched_type */
	__u16 sched_no;  /* 1-based scheduler number within its type, 0 if not a scheduler */
	__u16 nframes;   /* valid entries of frames[]: nkernel + nnative + the Erlang frames */
	__u16 nkernel;   /* --kernel: kernel return addresses, leaf first, at frames[0..nkernel) */
	__u16 nnative;   /* native frames at frames[nkernel..nkernel+nnative), leaf first: the
			  * sampled ip, then return addresses; the last one may be the return
			  * address into JIT code where the walk met the Erlang side */
	__u32 tgid;      /* the VM's OS pid (the kernel's, not a container's): one walker samples many */
	/* Erlang frames dropped from the middle of a stack deeper than max_frames (BB_F_TRUNCATED):
	 * the walk keeps the leaf-most frames and, in the last BB_ROOT_FRAMES slots, a ring of the
	 * root-most ones (BB_ROOT_SLOT), so a deep recursion keeps its callers. 0 otherwise. */
	__u32 nskipped;
	__u32 reserved;
	/* Who the process is, read at the sample (it may be gone before user space looks):
	 * its registered name (an atom term, 0 if none) and its initial call (module and
	 * function atoms, arity), both 0 unless BB_F_PROC. */
	__u64 reg_name;
	__u64 initial[3];
	/* ... and from its dictionary, where the VM's initial call is proc_lib's: the '$initial_call'
	 * proc_lib and Elixir's Task put there (module and function atoms, arity as a small), and
	 * the first of Elixir's '$callers' (a pid term): what names a task that lives a few
	 * milliseconds, gone before user space reads the record. 0 if not found. */
	__u64 dict_initial[3];
	__u64 dict_caller;
	/* beam-bpf-sample -e alloc: the words the running code allocated, on the young heap since
	 * the process's last GC entry (a GC entry's record), or in the heap fragment asked for
	 * (BB_F_HEAP_FRAG); and, in a GC entry's record, the words of other heap fragments
	 * since (received messages, NIF environments), which no stack is charged with. 0 in
	 * other records. */
	__u64 alloc_words;
	__u64 frag_words;
	/* A watchpoint's record (BB_F_WATCH): the pid term of the process whose heap the word is
	 * in (the writer may be another, copying a message there). User space scales each heap's
	 * samples to the exact words its GC entries reported (profile/alloc_strata.hpp). */
	__u64 heap_owner;
	/* An off-CPU record of a scheduler that runs a process (BB_F_OFFCPU): its X register 0 at
	 * the block, the first argument of the BIF it is in (an ETS function's table). 0 otherwise. */
	__u64 x0;
	/* ... and the scheduler's second TMP_MEM word, where the JIT's call_light_bif_shared keeps
	 * the Export entry of the BIF it calls (which BIF, on a stripped build too). */
	__u64 bif_export;
	/* A scheduler running a port task (BB_F_PORT, never with BB_F_PROC): the port's id (a port
	 * term, tag 0111), its connected process (a pid term, 0 if it reads as none) and the name
	 * it was opened with ("tcp_inet", a spawned command), NUL-terminated, cut to fit. All 0
	 * otherwise. */
	__u64 port_id;
	__u64 port_owner;
	char port_name[BB_PORT_NAME_MAX];
	/* Kernel frames, native frames, then the Erlang stack's continuation pointers (return
	 * addresses into JIT code), each part leaf-most first. The bottom continuation pointer,
	 * if reached, is the VM's normal-exit stub. */
	__u64 frames[BB_MAX_FRAMES];
};

/* -e offcpu's records (BB_F_OFFCPU, bpf/offcpu.bpf.h): the stack where a VM thread blocked in a
 * system call, walked as the call returns (nothing of the thread's user state moved meanwhile). */
#define BB_OFFCPU_NS alloc_words      /* the ns it stands for: blocked in the call, or the threshold */
#define BB_OFFCPU_SYSCALL frag_words  /* the call's x86-64 number */
#define BB_OFFCPU_ARG0 heap_owner     /* its first argument: a futex's address, a descriptor */

/* -e offcpu: a VM thread's blocked time, per thread (key: tid). */
struct bb_offcpu_thread {
	__u64 since;   /* when it blocked (switched out, not runnable); 0 while it runs or waits for a CPU */
	__u64 off_ns;  /* ns blocked since its last system call returned */
};

#define bb_record_size(n) (__builtin_offsetof(struct bb_record, frames) + sizeof(__u64) * (n))

/* A BB_WHERE_CODE_EVENT record: the VM called __jit_debug_register_code() (under its JIT
 * descriptor's mutex) to announce one jit_code_entry. time_ns is then the exact instant the
 * code became (or stopped being) runnable, which samples are symbolized against. */
enum bb_code_action {
	BB_CODE_REGISTER = 1,    /* JIT_REGISTER_FN */
	BB_CODE_UNREGISTER = 2,  /* JIT_UNREGISTER_FN (OTP 27 and later unregister purged code) */
};
#define BB_CODE_EVENT_ACTION c_p         /* enum bb_code_action */
#define BB_CODE_EVENT_ENTRY ip           /* struct jit_code_entry * */
/* frames[0] symfile_addr, frames[1] symfile_size, frames[2..4] the symfile's first 24 bytes */
#define BB_CODE_EVENT_NFRAMES 5

/* The VM build's struct offsets (bb_vm_fields.h), handed to the walker as one struct. */
struct bb_vm_layout {
#define BB_LAYOUT_FIELD(field, type, member) __u32 field;
	BB_VM_FIELDS(BB_LAYOUT_FIELD)
#undef BB_LAYOUT_FIELD
};

/* Process state flags (Process.state, ERTS_PSFLG_* in erl_process.h): the same bits in OTP 25
 * to 29, read in each release's source; check them when adding a release to
 * userspace/target/release.cpp. A process runs on a normal scheduler while RUNNING or
 * RUNNING_SYS is set, on a dirty one while DIRTY_RUNNING or DIRTY_RUNNING_SYS is. */
#define BB_PSFLG_RUNNING (1u << 15)
#define BB_PSFLG_RUNNING_SYS (1u << 21)
#define BB_PSFLG_DIRTY_RUNNING (1u << 29)
#define BB_PSFLG_DIRTY_RUNNING_SYS (1u << 30)
/* The process is being garbage collected (ERTS_PSFLG_GC). */
#define BB_PSFLG_GC (1u << 17)
/* The process is exiting (ERTS_PSFLG_EXITING). */
#define BB_PSFLG_EXITING (1u << 11)

/* Value of the tid -> scheduler map that user space fills from thread names. */
struct bb_sched {
	__u64 esdp;         /* ErtsSchedulerData * of this thread */
	__u64 runtime_top;  /* highest C-stack address of runtime calls (blame's scan stops there), 0 = unknown */
	__u8 type;          /* enum bb_sched_type */
	__u8 pad;
	__u16 no;
	__u32 pad2;
};

struct bb_range {
	__u64 start, end;   /* [start, end) */
};

/*
 * .eh_frame compiled into rows (userspace/native/unwind_table.cpp), one per address range with
 * the same rules, as the OpenTelemetry profiler's "stack deltas": how to find the caller's frame
 * from here. On x86-64 the return address is always at CFA - 8 (rows where it is not become
 * BB_CFA_BAD).
 */
enum bb_cfa_rule {
	BB_CFA_NONE = 0,  /* no FDE covers this range: the walk stops (BB_F_NATIVE_NO_ROW) */
	BB_CFA_RSP = 1,   /* CFA = rsp + 8 * cfa_words */
	BB_CFA_RBP = 2,   /* CFA = rbp + 8 * cfa_words */
	BB_CFA_END = 3,   /* the return address is undefined: the thread's outermost frame */
	BB_CFA_BAD = 4,   /* an expression or register the walker does not follow (BB_F_NATIVE_BAD) */
	BB_CFA_RSP_DEREF = 5, /* CFA = *(rsp + 8 * (__s16)cfa_words) + 8: code that realigns its
			       * stack keeps the entry rsp in a slot, above rsp or in the red zone below
			       * it (OpenSSL's perlasm: .cfi_cfa_expression %rsp+N,deref,+8, in its AVX2
			       * SHA and other routines) */
};

struct bb_unwind_row {
	__u32 pc;          /* link-time address where the row starts; it ends where the next starts */
	__u8 cfa_rule;     /* enum bb_cfa_rule */
	__s8 rbp_slot;     /* the caller's rbp is saved at CFA + 8 * rbp_slot; 0: rbp unchanged */
	__u16 cfa_words;   /* whole words: x86-64 frames are (a stack offset not so is BB_CFA_BAD) */
};

/* Rows are found in two steps: a bucket of BB_UNWIND_BUCKET bytes of code gives the first row
 * that covers it, then a binary search among the few rows up to the next bucket's. One random
 * access into a 1 MiB table instead of 16 (a third of the time per frame here). */
#define BB_UNWIND_BUCKET_SHIFT 8
#define BB_UNWIND_BUCKET (1u << BB_UNWIND_BUCKET_SHIFT)

/* One executable mapping whose rows are rows[first_row .. first_row + nrows), and whose
 * buckets are buckets[first_bucket .. first_bucket + nbuckets), each a row index relative to
 * first_row: the last row starting at or below the bucket's first address (pc_lo + i * BUCKET). */
struct bb_unwind_module {
	__u64 start, end;  /* [start, end) in the target */
	__u64 bias;        /* runtime address - link-time address */
	__u32 first_row, nrows;
	__u32 first_bucket, nbuckets;
	__u32 pc_lo;       /* link-time address of the first row */
	__u32 pad;
};

/*
 * One VM a walker samples: what differs between VMs of other releases and builds, looked up by
 * the sampled thread's tgid (bpf/maps.bpf.h, vm_slots) at each sample, so one loaded walker
 * serves every VM of a host (beam-bpf-agent). User space rewrites a slot whole while the VM runs
 * (more JIT code, a NIF library's unwind rows): entries are appended, never moved, and an entry
 * counted before it is written reads as zeros, which cover no address.
 */
struct bb_vm {
	__u32 tgid;            /* the VM's OS pid; 0: a free slot */
	__u32 proc_span;       /* bytes of struct process the walk reads, from its start */
	__u32 frame_layout;    /* the JIT's: 0 return address only, 1 FP + RA */
	__u32 nr_code_ranges;
	__u64 jit_descriptor;  /* &__jit_debug_descriptor in the VM */
	struct bb_vm_layout layout;  /* the build's struct offsets, checked against the live VM */
	__u32 nr_unwind_modules;
	__u32 pad;
	/* The atoms '$initial_call' and '$callers' in this VM (their terms), as user space learns
	 * them from the first dictionaries it reads; 0 until then (no dictionary read at the sample). */
	__u64 dict_key_initial_call;
	__u64 dict_key_callers;
	struct bb_range code_ranges[BB_MAX_CODE_RANGES];  /* its executable JIT mappings */
	struct bb_unwind_module unwind_modules[BB_MAX_UNWIND_MODULES];  /* its files' unwind rows */
};

/*
 * Per-CPU counters, BB_C_NR for each VM slot (key slot * BB_C_NR + counter), summed by user space.
 * The one list of them, X(ID, group, key, help): BB_C_ID, what the BPF side counts with, and user
 * space's table of them (userspace/sampling/counters.hpp): --stats writes each as `key`, at its
 * top level (group top), in the object named `group`, or not at all (none); `help` says what it
 * counts.
 */
#define BB_COUNTERS(X) \
	X(SEEN, top, seen, "samples of the target's threads") \
	X(EMITTED, top, emitted, "records written to the ring buffer") \
	X(DROPPED, top, dropped, "records lost: ring buffer full") \
	X(FILTERED, top, filtered, \
	  "blame: samples where FUNC was not running; alloc: GC entries with nothing allocated, " \
	  "or not of a process that verified") \
	X(WALK_NS, top, bpf_walk_ns_total, "with measure_walk: ns spent in the handler for the target") \
	X(CODE_EVENTS, top, code_events, "code (un)registrations written to the ring buffer") \
	X(CODE_EVENTS_LOST, top, code_events_lost, \
	  "code (un)registrations lost (unreadable descriptor, or ring buffer full)") \
	X(NATIVE_NS, top, bpf_native_walk_ns_total, \
	  "with measure_walk: ns of the handler's spent unwinding native frames") \
	X(PORT, top, port_tasks, "samples of a scheduler running a port task, charged to the port (BB_F_PORT)") \
	/* Samples whose process did not pass the checks (bpf/process.bpf.h), by the first failed: */ \
	X(BAD_READ, unreadable_by_cause, read_fault, "the Process could not be read") \
	X(BAD_STATE, unreadable_by_cause, state, "its state says it does not run there (BB_F_NOT_RUNNING)") \
	X(BAD_PID, unreadable_by_cause, pid_tag, "no internal pid in common.id") \
	X(BAD_HEAP, unreadable_by_cause, heap_order, "not heap <= htop <= E") \
	X(BAD_STACK, unreadable_by_cause, stack_pointer, "E past hend, or not a word address") \
	/* ... and of the last three, those attributed all the same (--stats counts their records): */ \
	X(IN_GC, none, in_gc, "caught in a garbage collection (BB_F_IN_GC)") \
	X(EXITING, none, exiting, "caught exiting (BB_F_EXITING)") \
	/* -e alloc's watchpoints (bpf/alloc_watch.bpf.h): */ \
	X(WATCH_HITS, alloc_watch, traps, "traps in the target") \
	X(WATCH_IGNORED, alloc_watch, traps_ignored, \
	  "traps of no live watch, or not an allocation (the collector, old terms)") \
	X(WATCH_WAIT_NS, alloc_watch, wait_ns, "time the flipping scheduler waited for the arm") \
	X(WATCH_BUSY, alloc_watch, busy, \
	  "GC returns of the target that found a watch on (or on at their entry): not candidates")

enum bb_counter {
#define BB_COUNTER_ID(id, group, key, help) BB_C_##id,
	BB_COUNTERS(BB_COUNTER_ID)
#undef BB_COUNTER_ID
	BB_C_NR,
};

/* With measure_walk: handler time per sample of the target, log2(ns) buckets. */
#define BB_WALK_HIST_BUCKETS 24

#endif /* BEAM_BPF_H */
