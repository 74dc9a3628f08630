/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The VM's C struct layout that beam-bpf reads, as one list. From it come the layout the BPF
 * walker gets (struct bb_vm_layout in beam_bpf.h), the user-space VmOffsets, the offsets table
 * format and the DWARF reader (userspace/target/offsets.cpp): add a field here and all of them
 * have it.
 *
 * X(field, type, member): `type` is the C type as DWARF names it ("struct process" for a struct
 * tag, else a typedef name); `member` is a dotted member path, or "" for the type's size;
 * "p|q" takes the first path the build has. The message queue length is sig_qs.mq_len from
 * OTP 27 on, before it sig_qs.len (messages of the inner and middle queues). An atom's text is
 * at `name` up to 27, and from 28 in the binary term `u.bin`, the same word of a union. A
 * process's monitors (common.u.alive.monitors) are a red-black tree of ErtsMonLnkNode keyed by
 * the monitor's reference, at key_offset from the node (erl_monitor_link.h, OTP 25 to 29). A
 * scheduler's busy state: thr_progress_data.active (set and cleared with every change of
 * scheduler_wall_time's busy state, before any spinning) and its sched_wall_time counters
 * (always kept for dirty schedulers, for normal ones only while the flag is on).
 * A scheduler's run queue (its own for a normal one, the shared dirty CPU or I/O one for a dirty
 * one) holds its lock, mtx, an erts_mtx_t around a pthread mutex whose futex word is the mutex's
 * first: the address a thread blocked on it waits at (erl_process.h, OTP 25 to 29).
 * A process's off-heap binaries (what process_info(P, binary) lists) are on singly linked lists
 * of erl_off_heap_header, `next` the same word in each kind of node: its off_heap, each heap
 * fragment's, and wrt_bins (binaries being appended to).
 * ETS tables: each normal scheduler keeps the tables created on it on a circular list through
 * DbTableCommon's all (esdp->ets_tables, in a union from OTP 26). A table's item and byte counts
 * are an ErtsFlxCtr: two words in the table, or for a table with decentralized counters a
 * pointer to an array of one cache-line element per counter group (erl_flxctr.h, OTP 25 to 29).
 * A table id is a magic reference: the numbers in its magic binary.
 * A normal scheduler running a port task (erts_port_task_execute) has the port in
 * esdp->current_port, NULL between tasks (erl_port_task.c, OTP 25 to 29); a port's connected
 * process is an erts_atomic_t word, its name the char * its open_port/2 gave ("tcp_inet").
 * Kept C: the BPF program and a C test fixture include it too.
 */
#ifndef BB_VM_FIELDS_H
#define BB_VM_FIELDS_H

#define BB_VM_FIELDS(X)                                                          \
	X(proc_id, "struct process", "common.id")                                \
	X(proc_htop, "struct process", "htop")                                   \
	X(proc_stop, "struct process", "stop")                                   \
	X(proc_heap, "struct process", "heap")                                   \
	X(proc_hend, "struct process", "hend")                                   \
	X(proc_i, "struct process", "i")                                         \
	X(proc_current, "struct process", "current")                             \
	X(proc_state, "struct process", "state")                                 \
	X(proc_scheduler_data, "struct process", "scheduler_data")               \
	X(proc_size, "struct process", "")                                       \
	X(proc_reg, "struct process", "common.u.alive.reg")                      \
	X(proc_initial, "struct process", "u.initial")                           \
	X(proc_dictionary, "struct process", "dictionary")                       \
	X(proc_heap_sz, "struct process", "heap_sz")                             \
	X(proc_old_heap, "struct process", "old_heap")                           \
	X(proc_old_hend, "struct process", "old_hend")                           \
	X(proc_mbuf_sz, "struct process", "mbuf_sz")                             \
	X(proc_reds, "struct process", "reds")                                   \
	X(proc_msgq_len, "struct process", "sig_qs.mq_len|sig_qs.len")           \
	X(proc_old_htop, "struct process", "old_htop")                           \
	X(proc_high_water, "struct process", "high_water")                       \
	X(proc_mbuf, "struct process", "mbuf")                                   \
	X(proc_msg_frag, "struct process", "msg_frag")                           \
	X(proc_sig_first, "struct process", "sig_qs.first")                      \
	X(proc_sig_cont, "struct process", "sig_qs.cont")                        \
	X(proc_sig_inq_first, "struct process", "sig_inq.first")                 \
	X(proc_abandoned_heap, "struct process", "abandoned_heap")               \
	X(proc_psd, "struct process", "psd")                                     \
	X(proc_monitors, "struct process", "common.u.alive.monitors")            \
	X(proc_off_heap, "struct process", "off_heap.first")                     \
	X(proc_wrt_bins, "struct process", "wrt_bins")                           \
	X(hfrag_off_heap, "ErlHeapFragment", "off_heap.first")                   \
	X(ohh_next, "struct erl_off_heap_header", "next")                        \
	X(bin_refc, "Binary", "intern.refc")                                     \
	X(bin_orig_size, "Binary", "orig_size")                                  \
	X(psd_size, "ErtsPSD", "")                                               \
	X(msg_size, "ErtsMessage", "")                                           \
	X(pdict_array_size, "ProcDict", "arraySize")                             \
	X(hfrag_next, "ErlHeapFragment", "next")                                 \
	X(hfrag_used_size, "ErlHeapFragment", "used_size")                       \
	X(hfrag_mem, "ErlHeapFragment", "mem")                                   \
	X(msg_next, "ErtsMessage", "next")                                       \
	X(msg_data, "ErtsMessage", "data")                                       \
	X(msg_m, "ErtsMessage", "m")                                             \
	X(msg_hfrag, "ErtsMessage", "hfrag")                                     \
	X(regproc_name, "RegProc", "name")                                       \
	X(mln_right, "ErtsMonLnkNode", "node.tree.right")                        \
	X(mln_left, "ErtsMonLnkNode", "node.tree.left")                          \
	X(mln_item, "ErtsMonLnkNode", "other.item")                              \
	X(mln_key_offset, "ErtsMonLnkNode", "key_offset")                        \
	X(atom_len, "Atom", "len")                                               \
	X(atom_name, "Atom", "name|u.bin")                                       \
	X(itab_entries, "IndexTable", "entries")                                 \
	X(itab_seg_table, "IndexTable", "seg_table")                             \
	X(pdict_used_slots, "ProcDict", "usedSlots")                             \
	X(pdict_data, "ProcDict", "data")                                        \
	X(esd_registers, "ErtsSchedulerData", "registers")                       \
	X(esd_no, "ErtsSchedulerData", "no")                                     \
	X(esd_type, "ErtsSchedulerData", "type")                                 \
	X(esd_current_process, "ErtsSchedulerData", "current_process")           \
	X(esd_active, "ErtsSchedulerData", "thr_progress_data.active")          \
	X(esd_swt_mod, "ErtsSchedulerData", "sched_wall_time.u.mod")            \
	X(esd_swt_enabled, "ErtsSchedulerData", "sched_wall_time.enabled")      \
	X(esd_swt_start, "ErtsSchedulerData", "sched_wall_time.start")          \
	X(esd_swt_total, "ErtsSchedulerData", "sched_wall_time.working.total")  \
	X(esd_swt_working, "ErtsSchedulerData", "sched_wall_time.working.start") \
	X(aligned_esd_size, "ErtsAlignedSchedulerData", "")                      \
	X(esd_run_queue, "ErtsSchedulerData", "run_queue")                       \
	X(runq_mtx, "ErtsRunQueue", "mtx")                                       \
	X(esd_ets_clist, "ErtsSchedulerData", "u.ets_tables.clist|ets_tables.clist") \
	X(dbt_all_next, "DbTableCommon", "all.next")                             \
	X(dbt_owner, "DbTableCommon", "owner")                                   \
	X(dbt_name, "DbTableCommon", "the_name")                                 \
	X(dbt_btid, "DbTableCommon", "btid")                                     \
	X(dbt_status, "DbTableCommon", "status")                                 \
	X(dbt_decentralized, "DbTableCommon", "counters.is_decentralized")       \
	X(dbt_counters, "DbTableCommon", "counters.u")                           \
	X(flxctr_array, "ErtsFlxCtrDecentralizedCtrArray", "array")              \
	X(flxctr_snapshot, "ErtsFlxCtrDecentralizedCtrArray", "snapshot_status") \
	X(flxctr_elem_size, "ErtsFlxCtrDecentralizedCtrArrayElem", "")           \
	X(mbin_refn, "ErtsMagicBinary", "refn")                                  \
	X(regs_runtime_stack, "ErtsSchedulerRegisters", "aux_regs.d.runtime_stack") \
	X(regs_x_regs, "ErtsSchedulerRegisters", "x_reg_array.d")               \
	X(regs_tmp_mem, "ErtsSchedulerRegisters", "aux_regs.d.TMP_MEM")         \
	X(export_mfa, "Export", "info.mfa")                                      \
	X(ptab_tab, "ErtsPTab", "r.o.tab")                                       \
	X(ptab_max, "ErtsPTab", "r.o.max")                                       \
	X(ptab_pix_mask, "ErtsPTab", "r.o.pix_mask")                             \
	X(ptab_pix_cl_mask, "ErtsPTab", "r.o.pix_cl_mask")                       \
	X(ptab_pix_cl_shift, "ErtsPTab", "r.o.pix_cl_shift")                     \
	X(ptab_pix_cli_mask, "ErtsPTab", "r.o.pix_cli_mask")                     \
	X(ptab_pix_cli_shift, "ErtsPTab", "r.o.pix_cli_shift")                   \
	X(esd_current_port, "ErtsSchedulerData", "current_port")                 \
	X(port_id, "struct _erl_drv_port", "common.id")                          \
	X(port_connected, "struct _erl_drv_port", "connected")                   \
	X(port_name, "struct _erl_drv_port", "name")

#define BB_VM_FIELD_PLUS_ONE(field, type, member) +1
enum { BB_VM_FIELD_COUNT = 0 BB_VM_FIELDS(BB_VM_FIELD_PLUS_ONE) };

#endif /* BB_VM_FIELDS_H */
