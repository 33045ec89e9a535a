/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Periods below BW_SHORT_PERIOD_NS (10 ms, down to the kernel's 1 ms). The
 * agent, a user-space thread, cannot refill on such a grid in time, so a BPF
 * timer per group does; a CPU that finds the pool dry after a grid point the
 * late timer has not served refills it itself; and the pool may be overdrawn
 * down to bw_pool_floor(), so that a late refill or release costs the group
 * nothing while the wait stays below BW_SHORT_OVERDRAFT_NS. The reasons, with
 * what was measured, are in the comment below.
 */
#ifndef __SCX_BW_SHORT_PERIOD_BPF_H
#define __SCX_BW_SHORT_PERIOD_BPF_H

/*
 * Short periods (below BW_SHORT_PERIOD_NS, down to the kernel's 1 ms). The
 * agent cannot refill such a group in time: a wakeup of a user-space thread
 * costs a good part of a millisecond when the machine is busy (more under
 * emulation), a late timer refills once for all the periods it missed, and a
 * group with a 1 ms period got about half its limit under stress in the TCG
 * VM. So a BPF timer refills it on the period grid, stamps refilled_at (the
 * agent then books the period without refilling, as after a safety refill)
 * and has the timer's CPU dispatch to release the group's parked tasks. The
 * safety tick starts the timer of a short-period group that has none
 * running, a pull from an idle group restarts it; the timer stops itself
 * when the group goes idle, is released or its period becomes 10 ms or more.
 *
 * Second, ticks: sched_ext ends a slice at the next tick after it ran out
 * (4 ms apart at HZ=250), so a task of a group with 1 ms of runtime ran up
 * to 4 ms, and while it overran, refills that found the pool full were
 * lost. When a short-period group cuts a task's slice, a per-CPU timer stops
 * the task when the slice ends.
 *
 * Third, the timer runs in softirq and under load fires late, in the TCG VM
 * more than a period late at about one grid point in eight. A CPU that finds
 * the pool empty after a grid point the timer has not served yet refills it
 * itself (bw_short_catch_up): a task that holds its CPU pulls the next
 * period's runtime when its slice ends instead of parking until the timer.
 *
 * Fourth, what a refill adds must be used before the next one, or the cap at
 * quota + burst throws it away: with a 1 ms period, a released task that
 * waited a millisecond in the queue, or a timer a period late, lost the group
 * a quota. So the pool may be overdrawn, by what the limit gives the group
 * over BW_SHORT_OVERDRAFT_NS (20 ms at 1 ms per 1 ms): CPUs pull past empty
 * down to that floor, the group throttles there, and refills pay the
 * overdraft back before the pool can fill. A late release or a late timer
 * (which refills every grid point it passed) then costs nothing until the
 * wait exceeds that time. The kernel's CFS gets the same slack from its
 * tick: a CPU runs on past its runtime until the next tick (4 ms at HZ=250)
 * and pays the debt from later refills, and that on every CPU, where this
 * bound is per group. What a group can use after idling is the overdraft
 * more than quota + burst; over any window it gets no more than its refills
 * plus that.
 */
struct short_timer {
	struct bpf_timer timer;
	/* Next grid point (CLOCK_MONOTONIC ns). */
	u64 next;
	u32 armed;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BW_MAX_GROUPS);
	__type(key, u32);
	__type(value, struct short_timer);
} short_timers SEC(".maps");

/*
 * The refill of the grid points since the last refill up to the last one at
 * or before @now (the timer is due: @now >= st->next), unless someone did it
 * already: the timer, a pull that found the pool dry after the grid point
 * (bw_short_catch_up), the agent (bw_short_refill) or a safety refill.
 * refilled_at orders them: whoever moves it past the grid point refills,
 * once. Every grid point passed since refilled_at is refilled (the cap bounds
 * what that adds), so a late timer costs the group nothing while its pool is
 * overdrawn. Returns the grid points this call refilled (0: none).
 */
static u64 bw_short_grid_refill(struct bw_group *g, u32 slot, struct short_timer *st, u64 now)
{
	u64 period = READ_ONCE(g->period), next = READ_ONCE(st->next);
	u64 at = READ_ONCE(g->refilled_at), grid, periods;

	if (!period || !at || (s64)(now - next) < 0)
		return 0;
	grid = next + (now - next) / period * period;
	if ((s64)(at - grid) >= 0 || __sync_val_compare_and_swap(&g->refilled_at, at, now) != at)
		return 0;
	/* Grid points in (at, grid]. */
	periods = (grid - at + period - 1) / period;
	bw_refill_pool(g, periods);
	stat_add(BW_STAT_SHORT_REFILL, periods);
	if (READ_ONCE(g->throttled) || scx_bpf_dsq_nr_queued(BW_PARK_DSQ_BASE + slot))
		bw_request_release(g);
	return periods;
}

static int bw_short_tick(void *map, int *key, struct short_timer *st)
{
	u32 slot = *key;
	struct bw_group *g = bw_group(slot);
	u64 now = bpf_ktime_get_ns(), period, next;

	if (!g || !READ_ONCE(g->cgid) || READ_ONCE(g->idle) || !bw_short_period(g)) {
		WRITE_ONCE(st->armed, 0);
		return 0;
	}
	period = READ_ONCE(g->period);
	/* The period ends throttled (the agent's nr_throttled for this group). */
	if (READ_ONCE(g->throttled))
		__sync_fetch_and_add(&g->nr_short_throttled, 1);
	/* Have this CPU's dispatch release what the refill unthrottled. */
	if (bw_short_grid_refill(g, slot, st, now) && READ_ONCE(g->safety_release))
		bw_kick_cpu(bpf_get_smp_processor_id(), SCX_KICK_PREEMPT);
	/* Missed grid points are skipped: one refill for them, as the kernel does. */
	next = st->next + period;
	if ((s64)(next - now) <= 0) {
		stat_add(BW_STAT_SHORT_MISSED, (now - next) / period + 1);
		next = now + period - (now - next) % period;
	}
	st->next = next;
	bpf_timer_start(&st->timer, next, BPF_F_TIMER_ABS);
	return 0;
}

/*
 * Start the timer of a short-period group one period from @now: from
 * bw_short_timer_ensure, and from bw_wake when a CPU pulls from an idle group
 * (its timer stopped when it went idle), rather than at the next safety tick
 * (up to 50 ms of refills by the agent alone).
 */
static void bw_short_timer_resume(struct bw_group *g, u32 slot, u64 now)
{
	struct short_timer *st;

	if (!bw_short_period(g))
		return;
	st = bpf_map_lookup_elem(&short_timers, &slot);
	if (!st || READ_ONCE(st->armed))
		return;
	st->next = now + READ_ONCE(g->period);
	/* Fails (-EINVAL) if the safety tick never initialized it: it will. */
	if (!bpf_timer_start(&st->timer, st->next, BPF_F_TIMER_ABS))
		WRITE_ONCE(st->armed, 1);
}

/*
 * A CPU found the pool of @g empty. If it is a short-period group whose
 * timer is late (softirq under load fires it well after the grid point, up to
 * a period and more under TCG), the task that wants to run now should not
 * wait for it: refill here. A task that runs on a CPU the whole time then
 * pulls each period's runtime when its last slice ends, without parking.
 */
static bool bw_short_catch_up(struct bw_group *g, u32 slot)
{
	struct short_timer *st;

	if (!bw_short_period(g))
		return false;
	st = bpf_map_lookup_elem(&short_timers, &slot);
	if (!st || !READ_ONCE(st->armed))
		return false;
	if (!bw_short_grid_refill(g, slot, st, bpf_ktime_get_ns()))
		return false;
	stat_inc(BW_STAT_SHORT_CATCH_UP);
	return true;
}

/*
 * The safety tick found @g's last refill BW_SAFETY_PERIODS periods old: its
 * timer is late (its vCPU stalled, its CPU busy in softirq) or dead. Refill
 * every grid point passed, as the late timer would have, rather than one
 * quota stamped now: that stamp would have the timer find all the others
 * served.
 */
static bool bw_short_safety_refill(struct bw_group *g, u32 slot, u64 now)
{
	struct short_timer *st = bpf_map_lookup_elem(&short_timers, &slot);

	return st && bw_short_grid_refill(g, slot, st, now);
}

/*
 * The agent's visit to a short-period group whose timer has not refilled
 * since the agent's last visit, or not for a stride of periods: the timer is
 * late (its CPU busy in softirq or, under emulation, a stalled vCPU) or not
 * started yet. The agent must not refill such a group by its own rule (one
 * quota per visit) and stamp refilled_at: the stamp would swallow every grid
 * point passed since the last refill, and the late timer would then find
 * them refilled. So BPF refills here by the grid rule, as a late timer or a
 * pull would (the CAS on refilled_at makes it once). -ENOENT when there is no
 * grid to go by (not a short-period group, never refilled); the agent then
 * refills by its own rule.
 */
SEC("syscall")
int bw_short_refill(struct bw_short_refill_args *args)
{
	u32 slot = args->slot;
	struct bw_group *g = bw_group(slot);
	struct short_timer *st;
	u64 periods;

	args->periods = 0;
	if (!g || !READ_ONCE(g->cgid) || !bw_short_period(g) || !READ_ONCE(g->refilled_at))
		return -ENOENT;
	st = bpf_map_lookup_elem(&short_timers, &slot);
	if (!st)
		return -ENOENT;
	periods = bw_short_grid_refill(g, slot, st, bpf_ktime_get_ns());
	if (periods)
		stat_inc(BW_STAT_SHORT_CATCH_UP);
	args->periods = periods;
	return 0;
}

/*
 * From the safety tick: start the timer of a short-period group lacking one,
 * initializing it first (the only place that does).
 */
static void bw_short_timer_ensure(struct bw_group *g, u32 slot, u64 now)
{
	struct short_timer *st;

	if (!g->cgid || READ_ONCE(g->idle) || !bw_short_period(g))
		return;
	st = bpf_map_lookup_elem(&short_timers, &slot);
	if (!st || READ_ONCE(st->armed))
		return;
	/* -EBUSY: initialized before, by an earlier start. */
	bpf_timer_init(&st->timer, &short_timers, 1 /* CLOCK_MONOTONIC */);
	if (bpf_timer_set_callback(&st->timer, bw_short_tick))
		return;
	bw_short_timer_resume(g, slot, now);
}

#endif /* __SCX_BW_SHORT_PERIOD_BPF_H */
