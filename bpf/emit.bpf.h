/* Emitting a record into the ring buffer. */
#pragma once

static __always_inline int emit(struct bb_record *rec)
{
	__u32 n = rec->nframes;
	__u64 flags = BPF_RB_NO_WAKEUP;

	if (n > BB_MAX_FRAMES)
		n = BB_MAX_FRAMES;
	/* Waking the reader on every record costs a wake-up per sample (it collapsed the rate
	 * 100-fold here); the reader drains on a timer and is woken only past wakeup_bytes. */
	if (bpf_ringbuf_query(&records, BPF_RB_AVAIL_DATA) > wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	if (bpf_ringbuf_output(&records, rec, bb_record_size(n), flags)) {
		count(BB_C_DROPPED);
		return 0;
	}
	count(BB_C_EMITTED);
	return 0;
}
