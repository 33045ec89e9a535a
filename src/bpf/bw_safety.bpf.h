/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Safety net for a stalled agent. The agent owns the refills; if it stops
 * (frozen, SIGSTOPped, starved of CPU), nothing refills, and throttled tasks
 * would wait until the sched_ext watchdog ejects the scheduler. So a BPF
 * timer refills a group whose last refill is BW_SAFETY_PERIODS old, with the
 * agent's own rule (bw_refill_pool, which the short-period refill uses too),
 * and a dispatch releases it: at most one quota per BW_SAFETY_PERIODS
 * periods (a short-period group: every grid point passed, the rule of its
 * own timer), and refilled_at tells the agent, once back, that the period was
 * refilled. bw_request_release is how every unthrottle done by BPF itself
 * hands the group to the next dispatch (here, short periods, a short-period
 * group's slack). The same tick starts short-period timers, the one place
 * that initializes them.
 */
#ifndef __SCX_BW_SAFETY_BPF_H
#define __SCX_BW_SAFETY_BPF_H

/*
 * Safety net for a stalled agent (frozen, SIGSTOPped, starved): a BPF timer
 * looks at every group's last refill; one BW_SAFETY_PERIODS periods old is
 * refilled here with the agent's rule and marked for release, and all CPUs are
 * kicked so that a dispatch (the only place that may move tasks between
 * queues) releases its parked tasks. No runnable task waits for the sched_ext
 * watchdog, and the group still gets no more than one quota per
 * BW_SAFETY_PERIODS periods. The agent, once back, sees refilled_at and does
 * not refill the same period again.
 */
struct safety_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct safety_timer);
} safety_timers SEC(".maps");

/* Groups marked safety_release are waiting for a dispatch to release them. */
volatile u64 bw_safety_pending;

/*
 * The agent's refill rule, runtime = min(max(runtime, 0) + quota, quota +
 * burst), for @periods periods at once. A short-period group's overdraft
 * (below 0, down to its floor) is paid back rather than forgiven.
 */
static void bw_refill_pool(struct bw_group *g, u64 periods)
{
	s64 floor = bw_pool_floor(g);
	s32 attempt;

	bpf_for(attempt, 0, 8) {
		s64 old = READ_ONCE(g->runtime);
		s64 cap = (s64)(g->quota + g->burst);
		s64 base = old > floor ? old : floor;
		s64 quota = (s64)g->quota;
		s64 new;

		/* No overflow: periods * quota only when it stays below cap - base. */
		if (base >= cap || periods > (u64)(cap - base) / quota)
			new = cap;
		else
			new = base + (s64)periods * quota;
		if (__sync_val_compare_and_swap(&g->runtime, old, new) == old)
			break;
	}
}

/* Have a dispatch release the parked tasks of @g (see bw_safety_release). */
static void bw_request_release(struct bw_group *g)
{
	WRITE_ONCE(g->safety_release, 1);
	__sync_fetch_and_add(&bw_safety_pending, 1);
}

static bool bw_safety_refill(struct bw_group *g, u32 slot, u64 now)
{
	u64 at = READ_ONCE(g->refilled_at), period = g->period;

	if (!g->cgid || !period || !at)
		return false;
	/*
	 * An idle group's pool is full and its timer stopped on purpose; it
	 * has nothing parked, unless a task parked in a race with the agent
	 * stopping the timer. Then no CPU would ever pull (the task cannot run
	 * to do it): wake the group and release the task.
	 */
	if (READ_ONCE(g->idle)) {
		if (!scx_bpf_dsq_nr_queued(BW_PARK_DSQ_BASE + slot))
			return false;
		bw_wake(g, slot);
		bw_request_release(g);
		return true;
	}
	if (now < at + BW_SAFETY_PERIODS * period)
		return false;
	/*
	 * A short-period group's refills go by its grid: one quota stamped now
	 * would mark every grid point since the last refill served, and the
	 * late timer would then skip them (a vCPU stalled under TCG holds it
	 * for tens of periods).
	 */
	if (bw_short_period(g)) {
		if (!bw_short_safety_refill(g, slot, now))
			return false;
	} else {
		if (__sync_val_compare_and_swap(&g->refilled_at, at, now) != at)
			return false;
		bw_refill_pool(g, 1);
	}
	__sync_fetch_and_add(&g->nr_safety_refills, 1);
	stat_inc(BW_STAT_SAFETY);
	bw_request_release(g);
	return true;
}

static int bw_safety_tick(void *map, int *key, struct safety_timer *st)
{
	u64 now = bpf_ktime_get_ns();
	bool any = false;
	s32 slot;

	bpf_for(slot, 0, bw_slots()) {
		struct bw_group *g = bw_group(slot);

		if (!g)
			continue;
		if (bw_safety_refill(g, slot, now))
			any = true;
		bw_short_timer_ensure(g, slot, now);
	}
	if (any) {
		s32 cpu;

		bpf_for(cpu, 0, nr_cpu_ids)
			bw_kick_cpu(cpu, 0);
	}
	bpf_timer_start(&st->timer, BW_SAFETY_TICK_NS, 0);
	return 0;
}

static s32 bw_safety_start(void)
{
	u32 key = 0;
	struct safety_timer *st = bpf_map_lookup_elem(&safety_timers, &key);
	s32 ret;

	if (!st)
		return -ENOENT;
	ret = bpf_timer_init(&st->timer, &safety_timers, 1 /* CLOCK_MONOTONIC */);
	if (ret)
		return ret;
	ret = bpf_timer_set_callback(&st->timer, bw_safety_tick);
	if (ret)
		return ret;
	return bpf_timer_start(&st->timer, BW_SAFETY_TICK_NS, 0);
}

/*
 * From ops.dispatch: unthrottle the groups the safety net refilled (throttle
 * clocks settled, parked tasks released), as bw_unthrottle does for the agent.
 */
static void bw_safety_release(void)
{
	struct task_struct *p;
	s32 slot;

	if (!READ_ONCE(bw_safety_pending))
		return;
	WRITE_ONCE(bw_safety_pending, 0);
	bpf_for(slot, 0, bw_slots()) {
		struct bw_group *g = bw_group(slot);

		if (!g || !READ_ONCE(g->safety_release))
			continue;
		if (__sync_val_compare_and_swap(&g->safety_release, 1, 0) != 1)
			continue;
		WRITE_ONCE(g->throttled, 0);
		bw_settle_throttle_clocks(g, slot);
		bpf_for_each(scx_dsq, p, BW_PARK_DSQ_BASE + slot, 0) {
			if (scx_bpf_dsq_move_vtime(BPF_FOR_EACH_ITER, p, task_dsq(p), 0))
				kick_idle_for(p);
		}
	}
}

#endif /* __SCX_BW_SAFETY_BPF_H */
