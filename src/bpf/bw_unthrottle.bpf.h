/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Unthrottle (fair.c: unthrottle_cfs_rq, distribute_cfs_runtime). The agent
 * owns the period timer and refills the pools from user space, where it
 * cannot touch DSQs; after each refill it runs bw_unthrottle, a
 * SEC("syscall") program, for the BPF half: pay what CPUs owe for runs on
 * credit out of the refill first (or a CPU deep in debt would swallow it),
 * close the throttle clocks into throttled_time (cpu.stat), clear the
 * throttle, move the parked tasks back to their LLCs' queues and wake an idle
 * CPU for each. bw_reset_slot is the same release for a slot the agent is
 * (re)assigning, with all of its per-CPU state forgotten.
 */
#ifndef __SCX_BW_UNTHROTTLE_BPF_H
#define __SCX_BW_UNTHROTTLE_BPF_H

/*
 * Stop one CPU's throttle clock of @g, adding the time it ran to
 * throttled_time. The CAS makes the time count once when two paths settle it.
 */
static void bw_stop_clock(struct bw_group *g, struct bw_cpu *c, u64 now)
{
	u64 at = READ_ONCE(c->throttled_at);

	if (at && __sync_val_compare_and_swap(&c->throttled_at, at, 0) == at && now > at)
		__sync_fetch_and_add(&g->throttled_time, now - at);
}

/*
 * Wake one idle CPU for @p, just moved from a park queue to its LLC's queue:
 * the CPU it last ran on if that is idle (the queue is that CPU's LLC's),
 * else any idle CPU it may run on, which takes it from there when its own
 * queue is empty (steal when idle, nearest LLC first). Claiming the idle bit
 * makes each released task wake a CPU of its own; with none idle, the busy
 * CPUs take it at their next dispatch. One kick per task, not one per idle
 * CPU: a release of one task on a 200-CPU machine wakes one CPU, not every
 * idle one (each to find nothing but one). A plain kick, as bw_enqueue's: a
 * CPU whose idle bit is set may not have switched to idle yet, SCX_KICK_IDLE
 * would skip it, and with its bit claimed it would then sleep unseen.
 */
static __always_inline void kick_idle_for(struct task_struct *p)
{
	s32 cpu = scx_bpf_task_cpu(p);

	if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr) || !scx_bpf_test_and_clear_cpu_idle(cpu))
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
	if (cpu < 0)
		return;
	bw_kick_cpu(cpu, 0);
	stat_inc(BW_STAT_KICK);
}

/* Every idle CPU (a slot reset, rare: what it released is not known task by task). */
static __always_inline void kick_idle_cpus(void)
{
	s32 cpu;
	bpf_for(cpu, 0, nr_cpu_ids)
		bw_kick_cpu(cpu, SCX_KICK_IDLE);
	stat_inc(BW_STAT_KICK);
}

/*
 * The group's CPUs stop being throttled: add the time each was throttled to
 * throttled_time (cpu.stat semantics) and stop their clocks.
 */
static void bw_settle_throttle_clocks(struct bw_group *g, u32 slot)
{
	u64 now = bpf_ktime_get_ns();
	s32 cpu;

	bpf_for(cpu, 0, nr_cpu_ids) {
		struct bw_cpu *c = bpf_map_lookup_percpu_elem(&bw_cpus, &slot, cpu);

		if (c)
			bw_stop_clock(g, c, now);
	}
}

/*
 * A refill pays what the group's CPUs owe (runs on credit) out of the pool
 * first, as their next pulls would, but now, whichever CPU runs the group
 * next: otherwise a CPU deep in debt swallowed the refill there, left the
 * pool dry and its group throttled for further periods.
 */
static void bw_pay_debts(u32 slot)
{
	s32 cpu;

	bpf_for(cpu, 0, nr_cpu_ids) {
		struct bw_cpu *c = bpf_map_lookup_percpu_elem(&bw_cpus, &slot, cpu);
		/* Looked up each time: the verifier loses its bounds across the loop. */
		struct bw_group *g = bw_group(slot);
		s64 owed, avail, take;

		if (!c || !g)
			continue;
		owed = -READ_ONCE(c->runtime);
		if (owed <= 0)
			continue;
		avail = READ_ONCE(g->runtime);
		if (avail <= 0)
			break;
		take = avail < owed ? avail : owed;
		if (__sync_val_compare_and_swap(&g->runtime, avail, avail - take) != avail)
			continue;
		__sync_fetch_and_add(&c->runtime, take);
		__sync_fetch_and_add(&g->pulled, take);
	}
}

/* The vtime of the first task in @dsq_id, or one after any other if it is empty. */
static u64 bw_dsq_front_vtime(u64 dsq_id)
{
	struct task_struct *p;
	u64 front = (u64)-1 >> 1;

	bpf_for_each(scx_dsq, p, dsq_id, 0) {
		front = p->scx.dsq_vtime;
		break;
	}
	return front;
}

/*
 * Unthrottle, run by the agent right after it refilled a pool: pay the CPUs'
 * debts out of it, settle each CPU's throttle clock into throttled_time, clear
 * the throttle and move the parked tasks back to their queues, those that
 * hold the kernel up first, waking an idle CPU for each. A pool that is
 * still empty stays throttled.
 */
SEC("syscall")
int bw_unthrottle(struct bw_unthrottle_args *args)
{
	u32 slot = args->slot;
	struct bw_group *g = bw_group(slot);
	struct task_struct *p;
	u64 front, park_front;
	bool dry;

	if (!g)
		return -EINVAL;
	args->nr_released = 0;
	bw_pay_debts(slot);
	g = bw_group(slot);
	if (!g)
		return -EINVAL;
	/*
	 * The pool may be drained again already (the debts took it all, or a
	 * CPU running a task of the group pulled the refill at once): the group
	 * stays throttled and its parked tasks wait, except those parked
	 * BW_RESCUE_MS, which go to their LLC's queue, where dispatch rescues
	 * them, and those that hold the kernel up (below). Without that they
	 * would wait as long as the group's running tasks win every refill.
	 */
	dry = READ_ONCE(g->runtime) <= bw_pool_floor(g);
	if (!dry) {
		/* Clear first: from here on new wakeups go to the LLC queues. */
		WRITE_ONCE(g->throttled, 0);
		bw_settle_throttle_clocks(g, slot);
	}

	/* Syscall programs iterate DSQs under RCU. */
	bpf_rcu_read_lock();
	/*
	 * Tasks parked holding the kernel up (bw_kernel_credit refused them at
	 * the debt bound) go first, ahead of every queued task, and also when
	 * the pool is dry, with a pass to the larger debt bound
	 * (BW_DEBT_HELD_MAX_NS): the debts just paid leave them room to run on
	 * credit, and until they finish, cgroup moves, RCU grace periods and
	 * their siblings' forks wait on them.
	 */
	park_front = bw_dsq_front_vtime(BW_PARK_DSQ_BASE + slot);
	bpf_for_each(scx_dsq, p, BW_PARK_DSQ_BASE + slot, 0) {
		struct task_ctx *tctx = task_ctx(p);
		u64 dsq;

		if (!tctx || !tctx->held_kernel)
			continue;
		tctx->kernel_pass = 1;
		dsq = task_dsq(p);
		front = bw_dsq_front_vtime(dsq);
		if ((s64)(park_front - front) < 0)
			front = park_front;
		if ((s64)(p->scx.dsq_vtime - front) >= 0)
			scx_bpf_dsq_move_set_vtime(BPF_FOR_EACH_ITER, front - 1);
		if (scx_bpf_dsq_move_vtime(BPF_FOR_EACH_ITER, p, dsq, 0)) {
			args->nr_released++;
			stat_inc(BW_STAT_HELD_FIRST);
			kick_idle_for(p);
		}
	}
	bpf_for_each(scx_dsq, p, BW_PARK_DSQ_BASE + slot, 0) {
		if (dry) {
			struct task_ctx *tctx = task_ctx(p);

			if (!tctx || !bw_starving(tctx))
				continue;
		}
		/* Counted in memory: a register counter defeats the verifier's
		 * loop convergence. */
		if (scx_bpf_dsq_move_vtime(BPF_FOR_EACH_ITER, p, task_dsq(p), 0)) {
			args->nr_released++;
			kick_idle_for(p);
		}
	}
	bpf_rcu_read_unlock();
	if (!dry)
		stat_add(BW_STAT_RELEASE, args->nr_released);
	return 0;
}

/*
 * Reset a slot the agent is (re)assigning: forget local runtime and throttle
 * state on every CPU and release anything still parked there.
 */
SEC("syscall")
int bw_reset_slot(struct bw_reset_args *args)
{
	u32 slot = args->slot;
	struct bw_group *g = bw_group(slot);
	struct task_struct *p;

	if (!g)
		return -EINVAL;
	WRITE_ONCE(g->throttled, 0);
	WRITE_ONCE(g->slack_pending, 0);
	WRITE_ONCE(g->safety_release, 0);
	WRITE_ONCE(g->idle, 0);
	WRITE_ONCE(g->vtime, 0);
	s32 cpu;
	bpf_for(cpu, 0, nr_cpu_ids) {
		struct bw_cpu *c = bpf_map_lookup_percpu_elem(&bw_cpus, &slot, cpu);

		if (c) {
			c->runtime = 0;
			c->throttled_at = 0;
		}
	}
	bpf_rcu_read_lock();
	bpf_for_each(scx_dsq, p, BW_PARK_DSQ_BASE + slot, 0)
		scx_bpf_dsq_move_vtime(BPF_FOR_EACH_ITER, p, task_dsq(p), 0);
	bpf_rcu_read_unlock();
	kick_idle_cpus();
	return 0;
}

#endif /* __SCX_BW_UNTHROTTLE_BPF_H */
