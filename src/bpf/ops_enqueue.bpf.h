/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Where a task goes when it becomes runnable (main.bpf.c includes this file):
 * select_cpu picks an idle CPU near where it last ran, or the waker's for a
 * synchronous wakeup; enqueue parks it if its group is throttled, else puts
 * it on a CPU's local queue or its LLC's queue and wakes an idle CPU for it.
 */
#ifndef __SCX_OPS_ENQUEUE_BPF_H
#define __SCX_OPS_ENQUEUE_BPF_H

/*
 * A synchronous wakeup (a pipe or socket handoff, a futex wake-and-wait): the
 * waker is about to sleep, and the default pick chose the waker's own CPU,
 * whose local queue is empty. Queue the wakee there directly: through the
 * LLC's queue, enqueue would wake an idle CPU to take it, an IPI and a
 * migration per message (pipe ping-pong ran at 0.35-0.51 of the kernel's
 * scheduler that way). Only while nobody waits in this LLC's queue, so that
 * the wakee never passes a waiting task and the CPU still reaches dispatch.
 */
static __always_inline bool sync_to_waker(s32 cpu, u64 wake_flags)
{
	return (wake_flags & SCX_WAKE_SYNC) && cpu == bpf_get_smp_processor_id() &&
	       !scx_bpf_dsq_nr_queued(SCX_DSQ_LOCAL) &&
	       !scx_bpf_dsq_nr_queued(llc_dsq(cpu_llc(cpu)));
}

/*
 * An idle CPU @p may run on, claimed, nearest to the CPU it last ran on
 * first (the kernel's own order: that CPU, a fully idle SMT core, the same
 * LLC, the same node, anywhere); -1 if none is idle.
 */
static __always_inline s32 pick_idle_near(struct task_struct *p)
{
	s32 cpu;

	if (!__COMPAT_HAS_scx_bpf_select_cpu_and)
		return scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
	cpu = scx_bpf_select_cpu_and(p, scx_bpf_task_cpu(p), 0, p->cpus_ptr, 0);
	return cpu >= 0 ? cpu : -1;
}

s32 BPF_STRUCT_OPS(bw_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct task_ctx *tctx = task_ctx(p);
	bool is_idle = false;
	s32 cpu;

	cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	if (!tctx || (!is_idle && !sync_to_waker(cpu, wake_flags)))
		return cpu;
	/*
	 * Straight to the idle CPU (or the waker's), unless the task belongs to
	 * a throttled group or its chain is stale (enqueue resolves it and
	 * decides).
	 */
	if (tctx->gen != bw_cfg_gen || bw_throttled_slot(tctx) >= 0)
		return cpu;
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, task_slice_ns, 0);
	stat_inc(BW_STAT_DIRECT);
	return cpu;
}

/*
 * The "now" a waking or new task is placed against: the queue's (vtime_now), or,
 * for a task of a limited group while other tasks of its innermost limited
 * group are runnable or parked, that group's own (bw_group.vtime), when it
 * is behind. A limited group's tasks use less than their share and fall
 * behind vtime_now, the more the longer they are throttled; placed at
 * vtime_now, a task waking beside them waited until they caught up, which
 * they do only at their quota's pace: under CPU hotplug a hog's main thread
 * woke in a throttled group and waited the 5 s after which a parked task is
 * rescued (CFS places it against its group's own min_vruntime). A group with
 * nothing else runnable gets no such credit: its first waking task is
 * placed as any other.
 */
static __always_inline u64 wake_now(struct task_ctx *tctx)
{
	struct bw_group *g;
	struct cg_ctx *c;
	u64 gv;
	u32 slot;
	s64 others;

	if (!tctx || !tctx->nr_chain || tctx->gen != bw_cfg_gen)
		return vtime_now;
	slot = chain_slot(tctx, 0);
	g = bw_group(slot);
	if (!g)
		return vtime_now;
	gv = READ_ONCE(g->vtime);
	if (!gv || !vtime_before(gv, vtime_now))
		return vtime_now;
	/* Runnable siblings in its cgroup (itself counted since runnable), or parked ones. */
	c = cg_at(tctx->cg_idx, tctx->cg_gen);
	others = c ? READ_ONCE(c->nr_active) - (tctx->act_gen ? 1 : 0) : 0;
	if (others <= 0 && !scx_bpf_dsq_nr_queued(BW_PARK_DSQ_BASE + slot))
		return vtime_now;
	return gv;
}

void BPF_STRUCT_OPS(bw_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = task_ctx_create(p);
	u64 vtime = p->scx.dsq_vtime;
	s32 slot, cpu;

	stat_inc(BW_STAT_ENQUEUE);

	if (tctx)
		bw_refresh_chain(p, tctx);
	/*
	 * A task waking up gets at most one slice of credit (against wake_now).
	 * Only then: a task that was running keeps its place, even far behind
	 * vtime_now (the largest vtime started, which a task with a small share
	 * reaches in big steps); moving it up would take from large shares and
	 * give to small ones.
	 */
	if (!p->se.sum_exec_runtime) {
		/*
		 * A new task, not run yet: bw_enable put it at vtime_now. In a
		 * limited group behind that, it starts at the group's own vtime
		 * (wake_now), as CFS places a new task against its group's
		 * cfs_rq: a thread created beside throttled siblings otherwise
		 * waited until they caught up, at their quota's pace.
		 */
		u64 now = wake_now(tctx);

		if (vtime_before(now, vtime))
			vtime = now;
	} else if (enq_flags & SCX_ENQ_WAKEUP) {
		u64 now = wake_now(tctx);

		if (vtime_before(vtime, now - task_slice_ns))
			vtime = now - task_slice_ns;
	}

	if (tctx) {
		slot = bw_throttled_slot(tctx);
		/*
		 * A starving task goes to its LLC's queue; dispatch rescues it.
		 * So does one that holds the kernel up, on credit.
		 */
		tctx->kernel_credit = 0;
		if (slot >= 0 && !bw_starving(tctx)) {
			tctx->kernel_credit = bw_kernel_credit(p, tctx);
			if (!tctx->kernel_credit) {
				bw_park(p, tctx, slot, task_slice_ns, vtime, enq_flags);
				cg_deactivate(tctx);
				return;
			}
		}
	}

	/*
	 * Sent back by cpu_release or bw_sched_switch (an RT or stop task took
	 * its CPU): to an idle CPU if there is one. Else it keeps its turn, as
	 * under CFS (through the LLC's queue at its own vtime it would queue
	 * behind every task with a lower vtime: a limited hog among five
	 * unlimited ones, 30 ms of CPU a period against a fair share of 33, got
	 * 0.974 of its limit in a CI run that way, 0.997-1.006 in 18 before):
	 * - behind our agent or a kernel thread, which give the CPU back within
	 *   a few ms, at the head of its own CPU's local queue with the slice it
	 *   had left, where the kernel leaves a task so preempted (at the front
	 *   of the LLC's queue instead, burst_latency's p99 rose by about 1 ms:
	 *   the agent preempts its burns many times a run);
	 * - behind another program's RT task, which may hold the CPU for long,
	 *   at the front of its LLC's queue, where the next CPU of the LLC to
	 *   dispatch takes it: rt_neighbour's busy thread, left behind a 50 ms
	 *   RT burn while the other CPU was busy for a moment, waited out the
	 *   whole burn 2 times in a CI run (allowed 1).
	 */
	if (enq_flags & SCX_ENQ_REENQ) {
		u32 zero = 0, *taken = bpf_map_lookup_elem(&cpu_taken_by_rt, &zero);
		struct task_struct *front;
		u64 dsq;

		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (cpu >= 0) {
			scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL_ON | cpu, 0, enq_flags);
			bw_kick_cpu(cpu, 0);
			stat_inc(BW_STAT_KICK);
		} else if (taken && *taken && p->nr_cpus_allowed > 1) {
			dsq = task_dsq(p);
			front = dsq_front(dsq);
			if (front && !vtime_before(vtime, front->scx.dsq_vtime))
				vtime = front->scx.dsq_vtime - 1;
			scx_bpf_dsq_insert_vtime(p, dsq, 0, vtime, enq_flags);
		} else {
			scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, 0, enq_flags | SCX_ENQ_HEAD);
		}
		return;
	}

	/*
	 * The CPU's last runnable task ran out of slice (SCX_OPS_ENQ_LAST): this
	 * CPU already looked for other work, keep it running here. Per-CPU
	 * kthreads can only run where they are: don't make them wait either.
	 */
	if ((enq_flags & SCX_ENQ_LAST) ||
	    ((p->flags & PF_KTHREAD) && p->nr_cpus_allowed == 1)) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, task_slice_ns, enq_flags);
		return;
	}

	/*
	 * Work-conserving: wake an idle CPU the task may run on, nearest first,
	 * and queue the task in that CPU's LLC's queue, where it looks first.
	 * The barrier pairs with bw_update_idle(), but the window is not closed:
	 * the insert lands in the queue only after enqueue returns, so a CPU
	 * going idle right now can find the queue empty, and under TCG a picked
	 * and kicked CPU was traced sleeping 3-20 ms beside the task
	 * (docs/design.md, "Work conservation"). A plain kick, not
	 * SCX_KICK_IDLE: the CPU was picked idle, and the IDLE variant may skip
	 * one between its dispatch and going idle. (Inserted straight into the
	 * idle CPU's local queue instead, `hotplug` failed 3 of 3 runs: a task
	 * waited 39 s, the watchdog's limit, while CPU 1 went off and online.)
	 */
	__sync_fetch_and_add(&idle_seq, 1);
	cpu = pick_idle_near(p);
	scx_bpf_dsq_insert_vtime(p, cpu >= 0 ? llc_dsq(cpu_llc(cpu)) : task_dsq(p),
				 task_slice_ns, vtime, enq_flags);
	if (cpu >= 0) {
		bw_kick_cpu(cpu, 0);
		stat_inc(BW_STAT_KICK);
	}
}

#endif /* __SCX_OPS_ENQUEUE_BPF_H */
