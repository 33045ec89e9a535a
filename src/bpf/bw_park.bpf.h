/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Park: where a throttled group's runnable tasks wait. fair.c throttles a
 * group by taking its cfs_rq off the parent's runqueue, so its tasks are
 * simply not picked; sched_ext has no per-group runqueue, so a task of a
 * throttled group goes to the group's own DSQ (BW_PARK_DSQ_BASE + slot),
 * from which no CPU dispatches. Only a release moves it back to the shared
 * queue: bw_unthrottle after the agent's refill, bw_safety_release (from a
 * dispatch) after BPF itself refilled or unthrottled the group, and
 * bw_reset_slot.
 *
 * A parked task's wait is timed from park to its next run (a wait that ends
 * in sleep does not count), for the group's throttle-wait histogram; a task
 * parked BW_RESCUE_MS is starving, and the callers let it run on credit
 * rather than let throttling starve it for good (see intf.h).
 */
#ifndef __SCX_BW_PARK_BPF_H
#define __SCX_BW_PARK_BPF_H

/* Count a task parked on @slot and start its wait clock. */
static __always_inline void bw_note_parked(struct task_ctx *tctx, s32 slot)
{
	struct bw_group *g = bw_group(slot);

	stat_inc(BW_STAT_PARK);
	if (g)
		__sync_fetch_and_add(&g->nr_parked, 1);
	if (tctx && !tctx->parked_at) {
		tctx->parked_at = bpf_ktime_get_ns();
		tctx->parked_slot = slot;
	}
}

static __always_inline void bw_park(struct task_struct *p, struct task_ctx *tctx, s32 slot,
				    u64 slice, u64 vtime, u64 enq_flags)
{
	scx_bpf_dsq_insert_vtime(p, BW_PARK_DSQ_BASE + slot, slice, vtime, enq_flags);
	bw_note_parked(tctx, slot);
}

/* @tctx's task has waited parked BW_RESCUE_MS: it must run now (see intf.h). */
static __always_inline bool bw_starving(struct task_ctx *tctx)
{
	return tctx->parked_at &&
	       bpf_ktime_get_ns() - tctx->parked_at > BW_RESCUE_MS * 1000000ULL;
}

/* Histogram bucket of a wait (see BW_WAIT_BUCKETS): four per power of two µs. */
static __always_inline u32 wait_bucket(u64 ns)
{
	u64 us = ns / 1000;
	u32 log = 0, b;

	if (us < 4)
		return us;
	if (us >= 1ULL << 32) { us >>= 32; log += 32; }
	if (us >= 1ULL << 16) { us >>= 16; log += 16; }
	if (us >= 1ULL << 8) { us >>= 8; log += 8; }
	if (us >= 1ULL << 4) { us >>= 4; log += 4; }
	if (us >= 1ULL << 2) { us >>= 2; log += 2; }
	if (us >= 1ULL << 1) { us >>= 1; log += 1; }
	/* us is now 1; the two bits below the top one pick the quarter. */
	b = 4 * log + (u32)((ns / 1000 >> (log - 2)) & 3);
	return b < BW_WAIT_BUCKETS ? b : BW_WAIT_BUCKETS - 1;
}

/*
 * A task that had parked runs again: record how long it waited in its
 * group's throttle-wait histogram.
 */
static __always_inline void bw_note_unparked(struct task_ctx *tctx)
{
	struct bw_group *g;
	u64 wait;

	tctx->held_kernel = 0;
	if (!tctx->parked_at)
		return;
	wait = bpf_ktime_get_ns() - tctx->parked_at;
	tctx->parked_at = 0;
	g = bw_group(tctx->parked_slot);
	if (!g)
		return;
	__sync_fetch_and_add(&g->wait_hist[wait_bucket(wait) % BW_WAIT_BUCKETS], 1);
	__sync_fetch_and_add(&g->wait_sum_ns, wait);
	if (wait > READ_ONCE(g->wait_max_ns))
		WRITE_ONCE(g->wait_max_ns, wait);
}

#endif /* __SCX_BW_PARK_BPF_H */
