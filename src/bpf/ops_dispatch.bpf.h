/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What a CPU runs next (main.bpf.c includes this file): dispatch keeps the
 * previous task or takes the first one its LLC's queue holds that this CPU
 * may run and whose groups can pay (runtime pulled from their pools, or the
 * task parked), and steals from another LLC's queue when its own is empty or
 * far behind; update_idle re-checks the queues as a CPU goes idle.
 */
#ifndef __SCX_OPS_DISPATCH_BPF_H
#define __SCX_OPS_DISPATCH_BPF_H

/*
 * Cap the slice of @p, running here, at its groups' local runtime; when that
 * cut it, the slice timer may stop it on time (short periods).
 */
static __always_inline void cap_running_slice(struct task_struct *p, struct task_ctx *tctx)
{
	p->scx.slice = bw_slice_cap(tctx, p->scx.slice);
	if (p->scx.slice < task_slice_ns)
		bw_slice_timer_arm(tctx, p->scx.slice);
}

/*
 * Tasks the kernel puts on a CPU's local queue without calling enqueue:
 * exiting ones and those with migration disabled (we set neither
 * SCX_OPS_ENQ_EXITING nor SCX_OPS_ENQ_MIGRATION_DISABLED). Stopping one
 * for throttling only bounces it straight back here, in a loop that keeps it
 * from ever finishing what it does (dying; a migrate-disabled section, often
 * inside an RCU read-side section that then stalls the whole machine's RCU).
 * They run on credit: charged, the local runtime goes negative, the group's
 * next pulls pay it back.
 */
static __always_inline bool must_run(const struct task_struct *p)
{
	return (p->flags & PF_EXITING) || p->migration_disabled;
}

/*
 * Whether prev may go on running here: it is still runnable and its groups can
 * pay for it on this CPU (pulling runtime if needed).
 */
static bool prev_can_go_on(struct task_struct *prev)
{
	struct task_ctx *tctx;

	if (!prev || !(prev->scx.flags & SCX_TASK_QUEUED))
		return false;
	tctx = task_ctx(prev);
	if (!tctx)
		return true;
	/*
	 * A stale chain cannot be resolved here (prev is not an argument the
	 * kernel lets us look up the cgroup of in dispatch): let prev go
	 * through enqueue and running, which resolve it. tick keeps the chain
	 * of a task that holds its CPU current.
	 */
	if (tctx->gen != bw_cfg_gen)
		return false;
	/*
	 * The kernel updated prev's runtime just before dispatch: charge it,
	 * so that what its groups have left here is exact (prev's slice may
	 * have been cut short by the slice timer, between two ticks) and its
	 * vtime current for the comparison below.
	 */
	if (!charge(prev, tctx))
		return false;
	return !(tctx->nr_chain && bw_blocked_slot(tctx) >= 0);
}

static void keep_prev(struct task_struct *prev)
{
	struct task_ctx *tctx = task_ctx(prev);

	prev->scx.slice = task_slice_ns;
	if (tctx && tctx->nr_chain)
		cap_running_slice(prev, tctx);
}

enum consumed {
	CONSUMED_NONE,	/* nothing taken, prev not kept */
	CONSUMED_TASK,	/* a task moved to this CPU */
	CONSUMED_PREV,	/* prev goes on */
};

/*
 * Take the first task of @dsq_id this CPU may run, or keep @prev when
 * @can_keep and no task of the queue is ahead of it. Tasks of throttled
 * groups met on the way are parked.
 */
static int consume(s32 cpu, u64 dsq_id, struct task_struct *prev, bool can_keep)
{
	struct task_struct *p;

	bpf_for_each(scx_dsq, p, dsq_id, 0) {
		struct task_ctx *tctx;
		s32 slot;

		if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			continue;
		/*
		 * The queue is in vtime order: if prev is not behind the first
		 * task this CPU could take, prev goes on and nothing migrates.
		 * (prev's vtime is current: tick charges every task.)
		 */
		if (can_keep && prev && !vtime_before(p->scx.dsq_vtime, prev->scx.dsq_vtime)) {
			keep_prev(prev);
			return CONSUMED_PREV;
		}
		tctx = task_ctx(p);
		/*
		 * A stale chain may name a slot that was just given up (its
		 * pool empty): don't park on it; running() resolves the chain
		 * and stops the task if a group it really belongs to is dry.
		 */
		if (tctx && tctx->nr_chain && tctx->gen == bw_cfg_gen) {
			slot = bw_blocked_slot(tctx);
			/*
			 * Park only under the throttled flag: whoever clears
			 * it releases the park queue. bw_throttle() leaves the
			 * flag clear when a refill raced with the failed pull;
			 * such a task runs and pulls from the refilled pool.
			 * One that holds the kernel up runs too (enqueue found it,
			 * or it does now: queued while its group had runtime, it
			 * was parked here unchecked, and an RCU reader so parked
			 * held up every grace period until the refill); running()
			 * gives it a slice on credit.
			 */
			if (slot >= 0 && !bw_starving(tctx) && bw_slot_throttled(slot) &&
			    !tctx->kernel_credit && !bw_kernel_credit(p, tctx)) {
				if (scx_bpf_dsq_move_vtime(BPF_FOR_EACH_ITER, p,
							   BW_PARK_DSQ_BASE + slot, 0)) {
					bw_note_parked(tctx, slot);
					cg_deactivate(tctx);
				}
				continue;
			}
		}
		if (scx_bpf_dsq_move(BPF_FOR_EACH_ITER, p, SCX_DSQ_LOCAL, 0)) {
			stat_inc(BW_STAT_DISPATCH);
			return CONSUMED_TASK;
		}
	}
	return CONSUMED_NONE;
}

static __always_inline void count_steal(u32 llc, u32 from)
{
	stat_inc(llc_same_node(llc, from) ? BW_STAT_STEAL : BW_STAT_STEAL_NODE);
}

/*
 * How far (in vtime) @p, at the front of another LLC's queue, must be behind
 * for this CPU to take it: BW_STEAL_LAG_SLICES of its slices, times
 * BW_STEAL_NODE_FACTOR from another node (queues.bpf.h). At most half the
 * vtime lead cap, so that a task with a tiny share can still be taken.
 */
static u64 steal_lag(struct task_struct *p, bool other_node)
{
	struct task_ctx *tctx = task_ctx(p);
	u64 share = 0, lag;

	if (tctx)
		share = cg_share(tctx);
	if (!share)
		share = BW_SHARE_ONE / BW_WEIGHT_NICE_0 * task_weight(p);
	lag = BW_STEAL_LAG_SLICES * task_slice_ns * BW_SHARE_ONE / (share ?: 1);
	if (other_node)
		lag *= BW_STEAL_NODE_FACTOR;
	return lag < VTIME_MAX_LEAD_NS / 2 ? lag : VTIME_MAX_LEAD_NS / 2;
}

/*
 * Steal when behind (queues.bpf.h): the front of one other LLC's queue, if
 * it is more than steal_lag() behind both this LLC's front and prev (when
 * prev may go on).
 */
static bool steal_behind(s32 cpu, u32 llc, struct task_struct *prev, bool can_keep)
{
	struct task_struct *theirs, *front;
	u32 nr = nr_llcs(), from;
	u64 ours;
	bool other_node;

	if (nr < 2)
		return false;
	from = llc_nearest(llc, bpf_get_prandom_u32() % (nr - 1));
	theirs = dsq_front(llc_dsq(from));
	if (!theirs)
		return false;
	front = dsq_front(llc_dsq(llc));
	if (can_keep && prev && (!front || vtime_before(prev->scx.dsq_vtime, front->scx.dsq_vtime)))
		ours = prev->scx.dsq_vtime;
	else if (front)
		ours = front->scx.dsq_vtime;
	else
		return false;
	/* The least lag first: only a task behind by that pays for its share. */
	if (!vtime_before(theirs->scx.dsq_vtime + BW_STEAL_LAG_SLICES * task_slice_ns, ours))
		return false;
	other_node = !llc_same_node(llc, from);
	if (!vtime_before(theirs->scx.dsq_vtime + steal_lag(theirs, other_node), ours))
		return false;
	if (consume(cpu, llc_dsq(from), NULL, false) != CONSUMED_TASK)
		return false;
	count_steal(llc, from);
	return true;
}

void BPF_STRUCT_OPS(bw_dispatch, s32 cpu, struct task_struct *prev)
{
	u32 llc = cpu_llc(cpu), nr = nr_llcs(), i;
	bool can_keep;

	bw_safety_release();
	can_keep = prev_can_go_on(prev);

	if (steal_behind(cpu, llc, prev, can_keep))
		return;
	if (consume(cpu, llc_dsq(llc), prev, can_keep) != CONSUMED_NONE)
		return;
	/*
	 * Nothing here: prev goes on if its groups can pay for it, else steal
	 * when idle, nearest LLC first.
	 */
	if (can_keep && prev) {
		keep_prev(prev);
		return;
	}
	bpf_for(i, 0, nr - 1) {
		u32 from = llc_nearest(llc, i);

		if (consume(cpu, llc_dsq(from), NULL, false) == CONSUMED_TASK) {
			count_steal(llc, from);
			return;
		}
	}
	/*
	 * Nothing to run. A throttled prev is left alone; the kernel then
	 * passes it to enqueue (SCX_OPS_ENQ_LAST), which parks it.
	 */
}

/* Whether one of the first @max tasks of @dsq_id may run on @cpu. */
static bool queue_has_work_for(s32 cpu, u64 dsq_id, u32 max)
{
	struct task_struct *p;
	u32 n = 0;

	if (!scx_bpf_dsq_nr_queued(dsq_id))
		return false;
	bpf_for_each(scx_dsq, p, dsq_id, 0) {
		if (bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
			return true;
		if (++n >= max)
			break;
	}
	return false;
}

/*
 * A CPU going idle re-checks its LLC's queue, then the others'. This narrows
 * the race between an enqueue that saw no idle CPU and this CPU having just
 * found the queues empty (without it the task would wait for another CPU's
 * slice to end); it cannot see a task whose insert has not landed yet (see
 * bw_enqueue). Kick only for a task allowed here, or an idle CPU would spin
 * on a queue of tasks pinned elsewhere; the first 16 tasks of its own queue
 * and 4 of each other are looked at.
 */
void BPF_STRUCT_OPS(bw_update_idle, s32 cpu, bool idle)
{
	u32 llc = cpu_llc(cpu), nr = nr_llcs(), i;
	bool work;

	if (!idle)
		return;
	/* Full barrier: our idle bit is visible before we look at the queues. */
	__sync_fetch_and_add(&idle_seq, 1);
	work = queue_has_work_for(cpu, llc_dsq(llc), 16);
	bpf_for(i, 0, nr - 1) {
		if (work)
			break;
		work = queue_has_work_for(cpu, llc_dsq(llc_nearest(llc, i)), 4);
	}
	if (work) {
		bw_kick_cpu(cpu, 0);
		stat_inc(BW_STAT_KICK);
	}
}

#endif /* __SCX_OPS_DISPATCH_BPF_H */
