/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Slack (fair.c: return_cfs_rq_runtime, do_sched_cfs_slack_timer). Local
 * runtime a CPU holds is runtime no other CPU can use. When the CPU stops
 * running a group's tasks, it keeps BW_MIN_LOCAL_NS and returns the rest to
 * the pool, so that a group whose tasks sleep on one CPU and wake on another
 * is not throttled with its runtime stranded where nothing of it runs. If the
 * group is throttled, what came back is worth a release: the agent is told
 * and distributes it after its slack delay, which batches the returns of
 * several CPUs into one unthrottle. A short-period group, whose whole quota
 * may be less than that floor, is unthrottled here at once (bw_give_back).
 * bw_give_back is also how a CPU going offline returns its runtime
 * (bw_hotplug.bpf.h).
 */
#ifndef __SCX_BW_SLACK_BPF_H
#define __SCX_BW_SLACK_BPF_H

/*
 * @amount of runtime goes back to the pool of @g (in @slot). If the group is
 * throttled and the pool now holds more than BW_MIN_LOCAL_NS, that is worth a
 * distribution: tell the agent, once until it has acted (slack_pending).
 *
 * fair.c distributes slack only above a slice. Below that it waits for the
 * refill, whose cap at quota + burst throws it away: the group loses quota it
 * was due (a group with a quota of one slice can never have more than a slice
 * in its pool). Anything above the floor a CPU keeps when it gives runtime
 * back is worth a release here; the agent still batches the returns over its
 * slack delay (pools::worth_distributing).
 *
 * A short-period group's runtime is gone at the next grid point, a
 * millisecond or so away, and its whole quota may be less than a slice: it is
 * unthrottled at once (the task giving back, preempted, is enqueued next and
 * must not park) and the next dispatch releases its parked tasks.
 */
static void bw_give_back(struct bw_group *g, u32 slot, s64 amount)
{
	s64 pool = __sync_add_and_fetch(&g->runtime, amount);

	if (!READ_ONCE(g->throttled))
		return;
	if (bw_short_period(g)) {
		if (pool > bw_pool_floor(g)) {
			WRITE_ONCE(g->throttled, 0);
			bw_request_release(g);
		}
		return;
	}
	if (pool <= (s64)BW_MIN_LOCAL_NS)
		return;
	if (__sync_val_compare_and_swap(&g->slack_pending, 0, 1) != 0)
		return;
	/* Ring full: the agent's next refill releases the group. */
	if (!bw_emit(BW_EV_SLACK, slot, g->cgid, 0, 0, 0))
		WRITE_ONCE(g->slack_pending, 0);
}

/*
 * Slack return (fair.c: return_cfs_rq_runtime): this CPU stops running the
 * task's groups, so it keeps BW_MIN_LOCAL_NS of each group's local runtime
 * and gives the rest back to the pool, where other CPUs can use it in this
 * period. When the group is throttled and the pool now holds more than
 * BW_MIN_LOCAL_NS, tell the agent, which distributes it after the slack delay.
 *
 * @preempted: the task stopped still runnable and went back to the shared
 * queue, from which any CPU may take it next. The kernel's runqueues are per
 * CPU, a preempted task stays where its runtime is; ours is not. A
 * short-period group's whole quota is often less than the floor, so what
 * stays here would be stranded until the period ends while its task waits to
 * pull elsewhere: such a group gives all of it back. Other groups keep theirs
 * (a slice or less, of a quota that lasts longer than the wait).
 */
static void bw_return_slack(struct task_ctx *tctx, bool preempted)
{
	s32 i;
	bpf_for(i, 0, BW_MAX_CHAIN) {
		struct bw_group *g;
		struct bw_cpu *c;
		s64 slack;
		u32 slot;

		if (i >= tctx->nr_chain)
			break;
		slot = chain_slot(tctx, i);
		g = bw_group(slot);
		c = bw_cpu_local(slot);
		if (!g || !c)
			continue;
		if (preempted && !bw_short_period(g))
			continue;
		slack = c->runtime - (preempted ? 0 : (s64)BW_MIN_LOCAL_NS);
		if (slack <= 0)
			continue;
		__sync_fetch_and_sub(&c->runtime, slack);
		__sync_fetch_and_add(&g->slack_returned, slack);
		__sync_fetch_and_add(&g->nr_slack_returns, 1);
		stat_add(BW_STAT_SLACK, slack);
		bw_give_back(g, slot, slack);
	}
}

#endif /* __SCX_BW_SLACK_BPF_H */
