/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A task on a CPU (main.bpf.c includes this file): running caps its slice at
 * its groups' local runtime; tick and stopping charge what it used and
 * preempt when a group runs dry, and tick nudges an idle CPU when tasks wait;
 * a higher class taking the CPU re-enqueues what its local queue held.
 */
#ifndef __SCX_OPS_RUNNING_BPF_H
#define __SCX_OPS_RUNNING_BPF_H

void BPF_STRUCT_OPS(bw_running, struct task_struct *p)
{
	struct task_ctx *tctx = task_ctx_create(p);

	if (vtime_before(vtime_now, p->scx.dsq_vtime))
		vtime_now = p->scx.dsq_vtime;
	bw_slice_timer_reset();
	if (!tctx)
		return;

	tctx->last_charge = p->se.sum_exec_runtime;
	bw_refresh_chain(p, tctx);
	if (tctx->nr_chain) {
		struct bw_group *g = bw_group(chain_slot(tctx, 0));

		if (g && vtime_before(READ_ONCE(g->vtime), p->scx.dsq_vtime))
			WRITE_ONCE(g->vtime, p->scx.dsq_vtime);
	}

	/*
	 * Tasks placed on a local queue directly (wakeup to an idle CPU,
	 * per-CPU kthreads, and those of must_run()) did not go through
	 * dispatch's check.
	 */
	if (tctx->nr_chain && !must_run(p) && bw_blocked_slot(tctx) >= 0) {
		if (bw_starving(tctx)) {
			/* Rescue: one short run on credit; tick stops it (the group is dry). */
			p->scx.slice = BW_RESCUE_SLICE_NS;
			stat_inc(BW_STAT_RESCUE);
		} else if (bw_kernel_credit(p, tctx)) {
			/* Holds the kernel up: a short slice on credit, then a look again. */
			p->scx.slice = BW_RESCUE_SLICE_NS;
			bw_stop_current_in(BW_RESCUE_SLICE_NS);
			bw_note_unparked(tctx);
			cg_activate(p, tctx);
			return;
		} else {
			p->scx.slice = 0;
			bw_kick_cpu(scx_bpf_task_cpu(p), SCX_KICK_PREEMPT);
			stat_inc(BW_STAT_PREEMPT);
			return;
		}
	} else if (tctx->nr_chain) {
		cap_running_slice(p, tctx);
	}
	/* Runs for real: a wait in a park queue ends here. */
	bw_note_unparked(tctx);
	cg_activate(p, tctx);
}

/*
 * Work conservation, checked from every tick of a busy CPU: a task waiting in
 * its LLC's queue while another CPU it may run on idles gets that CPU
 * kicked (an idle CPU of another LLC then steals it). enqueue's kick and update_idle's re-check should leave no such
 * window, but the insert of ops.enqueue lands in the queue only after enqueue
 * returns, so a CPU going idle at that moment can miss the task, and a CPU an
 * enqueue picked can miss the kick: under TCG CPUs were seen idle for 3-20 ms
 * beside a waiting task. At most BW_NUDGE_SCAN CPUs are looked at, from the
 * next one on, and only while something waits.
 */
#define BW_NUDGE_SCAN 64

static void nudge_idle_cpu(s32 this_cpu)
{
	const struct cpumask *online;
	struct task_struct *p, *curr;
	s32 i, cpu, target = -1;

	u64 dsq = llc_dsq(cpu_llc(this_cpu));

	if (!scx_bpf_dsq_nr_queued(dsq))
		return;
	/* An offline CPU runs its idle task too, and ignores kicks. */
	online = scx_bpf_get_online_cpumask();
	bpf_for_each(scx_dsq, p, dsq, 0) {
		bpf_for(i, 1, BW_NUDGE_SCAN + 1) {
			if (i >= nr_cpu_ids)
				break;
			cpu = (this_cpu + i) % nr_cpu_ids;
			if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr) ||
			    !bpf_cpumask_test_cpu(cpu, online))
				continue;
			curr = __COMPAT_scx_bpf_cpu_curr(cpu);
			if (curr && (curr->flags & PF_IDLE)) {
				target = cpu;
				break;
			}
		}
		break;
	}
	scx_bpf_put_cpumask(online);
	if (target >= 0) {
		bw_kick_cpu(target, 0);
		stat_inc(BW_STAT_IDLE_NUDGE);
	}
}

void BPF_STRUCT_OPS(bw_tick, struct task_struct *p)
{
	struct task_ctx *tctx = task_ctx(p);
	bool paid;

	nudge_idle_cpu(scx_bpf_task_cpu(p));
	if (!tctx)
		return;
	/* A running task may have moved or its groups changed since it started. */
	bw_refresh_chain(p, tctx);
	/* Every task is charged: its vtime stays current for dispatch. */
	paid = charge(p, tctx);
	if (!tctx->nr_chain)
		return;
	if (!paid && !must_run(p)) {
		p->scx.slice = 0;
		stat_inc(BW_STAT_PREEMPT);
		return;
	}
	cap_running_slice(p, tctx);
}

void BPF_STRUCT_OPS(bw_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *tctx = task_ctx(p);

	bw_slice_timer_reset();
	if (!tctx)
		return;
	charge(p, tctx);
	/*
	 * This CPU has nothing of the task's groups to run now: going to
	 * sleep, their local runtime above the floor goes back to the pools;
	 * preempted (back to a queue), that of short-period groups.
	 */
	if (bw_slack_return && tctx->nr_chain)
		bw_return_slack(tctx, runnable);
}

/*
 * A higher scheduling class takes this CPU (an RT task, such as our agent's
 * period timer, or a stop task): the kernel leaves the task it preempted at
 * the head of this CPU's local queue, where no other CPU can take it. Send it
 * (and anything else queued here) back through enqueue, which moves it to an
 * idle CPU if there is one. Seen under TCG: a task waiting 3 ms behind a stop
 * task while the other CPU idled.
 *
 * Kernels whose re-enqueue works from anywhere (6.19 on) see it in the
 * sched_switch tracepoint, the mechanism that replaces ops.cpu_release
 * (deprecated: the kernel warns at every attach); the agent then attaches
 * bw_sched_switch and leaves cpu_release out. Older ones call cpu_release.
 */
#ifndef MAX_RT_PRIO
#define MAX_RT_PRIO 100
#endif

SEC("?tp_btf/sched_switch")
int BPF_PROG(bw_sched_switch, bool preempt, struct task_struct *prev,
	     struct task_struct *next, unsigned int prev_state)
{
	u32 zero = 0, *taken;
	bool foreign;

	/*
	 * RT, deadline and stop tasks have prio < MAX_RT_PRIO; fair, ours and
	 * idle not. Not on a CPU going offline (its stop task takes it): the
	 * re-enqueue may queue work there that never runs, as a kick does
	 * (cpu_going_down), and the kernel moves its tasks anyway.
	 */
	if (next->prio >= MAX_RT_PRIO || bw_this_cpu_going_down())
		return 0;
	taken = bpf_map_lookup_elem(&cpu_taken_by_rt, &zero);
	if (!taken)
		return 0;
	/* Our agent and kernel threads give the CPU back within a few ms. */
	foreign = next->tgid != agent_tgid && !(next->flags & PF_KTHREAD);
	/*
	 * From an RT task to another: what waits in the local queue was sent
	 * back already, and stays, unless the CPU passes from our agent or a
	 * kernel thread to another program's RT task, which may hold it for
	 * long (rt_neighbour: the agent preempted the busy thread, the RT burn
	 * followed it, and the thread waited the 50 ms out while the other
	 * CPU idled).
	 */
	if (prev->prio < MAX_RT_PRIO && (*taken || !foreign))
		return 0;
	*taken = foreign;
	if (!scx_bpf_reenqueue_local_from_anywhere())
		stat_inc(BW_STAT_REENQ);
	return 0;
}

void BPF_STRUCT_OPS(bw_cpu_release, s32 cpu, struct scx_cpu_release_args *args)
{
	scx_bpf_reenqueue_local();
	stat_inc(BW_STAT_REENQ);
}

#endif /* __SCX_OPS_RUNNING_BPF_H */
