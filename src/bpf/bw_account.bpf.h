/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Account, assign, throttle (fair.c: account_cfs_rq_runtime,
 * assign_cfs_rq_runtime, throttle_cfs_rq): the path every charge takes.
 *
 * As in fair.c, a CPU does not run a group on its pool directly: it pulls a
 * slice (bw_slice_ns) into its local runtime, charges against that, and goes
 * back to the pool only when the slice is used up. The pool is shared by all
 * CPUs, so a pull is a compare-and-swap that never takes more than is there;
 * a CPU that cannot pull throttles the group. Throttling here only marks the
 * CPU and the group: what becomes of the task (preempted, parked, or run on
 * credit) depends on the op that asked, and main.bpf.c decides it with
 * bw_park.bpf.h and bw_kernel_credit.bpf.h.
 *
 * Two things ride on the pull path and live here for that reason: a pull from
 * an idle group's pool wakes the group (bw_wake; the agent stopped its period
 * timer, and a pull is the first sign the group runs again), and the slice
 * cap, which gives a task no longer a slice than its groups hold here, so
 * that it stops when that runtime is used up (at the next tick, or at the
 * slice timer for a short period).
 */
#ifndef __SCX_BW_ACCOUNT_BPF_H
#define __SCX_BW_ACCOUNT_BPF_H

/*
 * A CPU pulled from the pool of an idle group: its period timer is stopped.
 * Restart the safety net's clock (the last refill may be long ago), a short
 * period's BPF timer, and ask the agent to restart its timer. If the ring is
 * full, the agent's next cgroup poll sees idle cleared and restarts it then.
 *
 * The agent starts the period at refilled_at, the time stamped here, not when
 * it reads the event: the event need not wake it if it wakes anyway well
 * before the period ends (within half of it), which spares a wakeup for every
 * idle group that runs again (1,000 groups of sleepers: 100 a second).
 */
static void bw_wake(struct bw_group *g, u32 slot)
{
	u64 now, wake_at, flags = 0;

	if (__sync_val_compare_and_swap(&g->idle, 1, 0) != 1)
		return;
	now = bpf_ktime_get_ns();
	WRITE_ONCE(g->refilled_at, now);
	bw_short_timer_resume(g, slot, now);
	wake_at = READ_ONCE(bw_agent_wake_at);
	if (wake_at && (s64)(wake_at - now) < (s64)(READ_ONCE(g->period) / 2))
		flags = BPF_RB_NO_WAKEUP;
	bw_emit_flags(BW_EV_WAKE, slot, g->cgid, 0, 0, 0, flags);
}

/*
 * Assign: top the CPU's local runtime up to one slice from the pool (down to
 * its floor). Returns true when local runtime is positive afterwards.
 */
static bool bw_assign(struct bw_group *g, struct bw_cpu *c, u32 slot)
{
	s64 floor = bw_pool_floor(g);
	s32 attempt;

	bpf_for(attempt, 0, 8) {
		s64 avail = READ_ONCE(g->runtime);
		s64 want = (s64)bw_slice_ns - c->runtime;
		s64 take;

		if (avail <= floor && !bw_short_catch_up(g, slot))
			return false;
		avail = READ_ONCE(g->runtime);
		if (avail <= floor)
			return false;
		take = avail - floor < want ? avail - floor : want;
		if (__sync_val_compare_and_swap(&g->runtime, avail, avail - take) != avail)
			continue;
		/* Atomic: the agent's refill may pay this CPU's debt (bw_pay_debts). */
		__sync_fetch_and_add(&c->runtime, take);
		__sync_fetch_and_add(&g->pulled, take);
		stat_inc(BW_STAT_PULL);
		if (READ_ONCE(g->idle))
			bw_wake(g, slot);
		return c->runtime > 0;
	}
	return false;
}

/*
 * Throttle @g on this CPU: its local runtime is gone and the pool is empty.
 */
static void bw_throttle(struct bw_group *g, struct bw_cpu *c)
{
	if (!c->throttled_at) {
		c->throttled_at = bpf_ktime_get_ns();
		__sync_fetch_and_add(&g->nr_throttle_events, 1);
		stat_inc(BW_STAT_THROTTLE);
	}
	if (!READ_ONCE(g->throttled)) {
		WRITE_ONCE(g->throttled, 1);
		/*
		 * The agent may have refilled between our failed pull and the
		 * flag: it then saw no throttle to undo. Undo it ourselves.
		 */
		if (READ_ONCE(g->runtime) > bw_pool_floor(g))
			WRITE_ONCE(g->throttled, 0);
	}
}

/*
 * Account: charge @delta ns to every limited group on the chain and pull
 * slices where local runtime ran out. Returns false when some group is now
 * throttled on this CPU, i.e. the task must stop.
 */
static bool bw_account(struct task_ctx *tctx, u64 delta)
{
	bool ok = true;

	s32 i;
	bpf_for(i, 0, BW_MAX_CHAIN) {
		struct bw_group *g;
		struct bw_cpu *c;
		u32 slot;

		if (i >= tctx->nr_chain)
			break;
		slot = chain_slot(tctx, i);
		g = bw_group(slot);
		c = bw_cpu_local(slot);
		if (!g || !c)
			continue;

		__sync_fetch_and_add(&g->usage, delta);
		__sync_fetch_and_sub(&c->runtime, delta);
		if (READ_ONCE(c->runtime) > 0)
			continue;
		if (!bw_assign(g, c, slot)) {
			bw_throttle(g, c);
			ok = false;
		}
	}
	return ok;
}

/*
 * Before running a task on this CPU: make sure every group on its chain has
 * local runtime here, pulling slices as needed. Returns the slot that is
 * throttled, or -1 when the task may run.
 */
static s32 bw_blocked_slot(struct task_ctx *tctx)
{
	s32 i;
	bpf_for(i, 0, BW_MAX_CHAIN) {
		struct bw_group *g;
		struct bw_cpu *c;
		u32 slot;

		if (i >= tctx->nr_chain)
			break;
		slot = chain_slot(tctx, i);
		g = bw_group(slot);
		c = bw_cpu_local(slot);
		if (!g || !c)
			continue;
		if (c->runtime > 0 || bw_assign(g, c, slot))
			continue;
		bw_throttle(g, c);
		return slot;
	}
	return -1;
}

static __always_inline bool bw_slot_throttled(s32 slot)
{
	struct bw_group *g = bw_group(slot);

	return g && READ_ONCE(g->throttled);
}

/*
 * Where a newly runnable task must park: the first group on its chain whose
 * pool is exhausted, or -1.
 */
static __always_inline s32 bw_throttled_slot(struct task_ctx *tctx)
{
	s32 i;
	bpf_for(i, 0, BW_MAX_CHAIN) {
		struct bw_group *g;
		u32 slot;

		if (i >= tctx->nr_chain)
			break;
		slot = chain_slot(tctx, i);
		g = bw_group(slot);
		if (g && READ_ONCE(g->throttled))
			return slot;
	}
	return -1;
}

/*
 * The smallest local runtime left on this CPU over the chain: a task never
 * gets a time slice longer than its groups can pay for. sched_ext acts on a
 * slice that ran out at the next tick, or, for a group with a short period,
 * when the slice timer fires (bw_slice_timer_arm).
 */
static __always_inline u64 bw_slice_cap(struct task_ctx *tctx, u64 slice)
{
	s32 i;
	bpf_for(i, 0, BW_MAX_CHAIN) {
		struct bw_cpu *c;

		if (i >= tctx->nr_chain)
			break;
		c = bw_cpu_local(chain_slot(tctx, i));
		if (c && c->runtime > 0 && (u64)c->runtime < slice)
			slice = c->runtime;
	}
	return slice;
}

#endif /* __SCX_BW_ACCOUNT_BPF_H */
