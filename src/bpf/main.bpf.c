/* SPDX-License-Identifier: GPL-2.0 */
/*
 * scx_bandwidth: scheduling core.
 *
 * Every task of the machine is scheduled here. The policy is deliberately
 * simple so that the bandwidth logic (bandwidth.bpf.h) is the interesting
 * part:
 *
 *  - wakeups go straight to an idle CPU when there is one, nearest to where
 *    the task last ran first (select_cpu, and enqueue for the tasks that come
 *    without a wakeup), a synchronous one to the waker's CPU while nobody
 *    waits;
 *  - otherwise tasks wait in the queue of their LLC, ordered by virtual time,
 *    which advances by the time a task ran divided by its share of the
 *    machine: cpu.weight between cgroups, nice levels within one
 *    (weight.bpf.h); a task waking up gets at most one slice of credit;
 *  - a CPU that needs work takes the first task it may run from its LLC's
 *    queue, from the other LLCs' when that is empty or far behind
 *    (queues.bpf.h): work-conserving and fair machine-wide.
 *
 * Bandwidth control hooks in at four points: enqueue parks tasks of a
 * throttled group; dispatch pulls runtime for the CPU before handing it a task
 * and parks the task instead when its group cannot pay; running caps the
 * task's time slice at the runtime its groups have on this CPU; tick and
 * stopping charge the runtime used and preempt when a group runs dry.
 *
 * The ops that schedule tasks, follow their life and start and stop the
 * scheduler are here; the others are in files included where they stand (one
 * compilation unit): ops_cgroup.bpf.h (cgroups created, removed, moved
 * between, reweighted, limited in cgroupfs), ops_hotplug.bpf.h (CPUs going
 * offline and online) and ops_dump.bpf.h (the debug dump).
 */
#include <scx/common.bpf.h>
#include "queues.bpf.h"
#include "bandwidth.bpf.h"
#include "weight.bpf.h"

char _license[] SEC("license") = "GPL";

/* Time slice of a task when its groups do not cap it. */
const volatile u64 task_slice_ns = 5ULL * 1000 * 1000;

/* Largest vtime of any task that started running: the queue's "now". */
static u64 vtime_now;

/*
 * How far a task's vtime may run ahead of vtime_now. A task with a tiny share
 * (cpu.weight 1 beside 10000, nice 19 beside nice 0) would otherwise advance
 * by slice / share per slice: 5 ms at a share of 1e-6 is 5,000 s, a wait no
 * task may have (the sched_ext watchdog ejects the scheduler after 30 s). The
 * others pass a capped task after using at most this much vtime, about
 * this much CPU time in all (their shares add up to at most one): the longest
 * wait is bounded, and shares down to slice / lead (0.5 %) are exact.
 */
#define VTIME_MAX_LEAD_NS (1000ULL * 1000 * 1000)
/* Target of the atomic that orders idle transitions against enqueues. */
static u64 idle_seq;

UEI_DEFINE(uei);

static __always_inline bool vtime_before(u64 a, u64 b)
{
	return (s64)(a - b) < 0;
}

/*
 * Charge the CPU time used since the last charge: to the task's vtime, divided
 * by its share of the machine, and to its limited groups. Returns false when a group
 * throttled. The time is the kernel's own sum_exec_runtime, freshly updated
 * before ops.tick and ops.stopping: exactly what cgroup cpu.stat usage_usec
 * counts, so what we enforce is what users measure.
 */
static bool charge(struct task_struct *p, struct task_ctx *tctx)
{
	u64 now = p->se.sum_exec_runtime;
	u64 delta = now - tctx->last_charge;
	u64 share, vtime;

	tctx->last_charge = now;
	if (!delta || (s64)delta < 0)
		return true;
	/*
	 * A task of a cgroup with no weight state (BW_STAT_UNWEIGHTED) is
	 * charged as if it were alone on the machine with its nice weight.
	 */
	share = cg_share(tctx) ?: BW_SHARE_ONE / BW_WEIGHT_NICE_0 * task_weight(p);
	vtime = p->scx.dsq_vtime + delta * BW_SHARE_ONE / share;
	if (vtime_before(vtime_now + VTIME_MAX_LEAD_NS, vtime)) {
		vtime = vtime_now + VTIME_MAX_LEAD_NS;
		if (vtime_before(vtime, p->scx.dsq_vtime))
			vtime = p->scx.dsq_vtime;
	}
	p->scx.dsq_vtime = vtime;
	if (!tctx->nr_chain)
		return true;
	return bw_account(tctx, delta);
}

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

void BPF_STRUCT_OPS(bw_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = task_ctx_create(p);
	u64 vtime = p->scx.dsq_vtime;
	s32 slot, cpu;

	stat_inc(BW_STAT_ENQUEUE);

	/*
	 * A task waking up gets at most one slice of credit. Only then: a task
	 * that was running keeps its place, even far behind vtime_now (the
	 * largest vtime started, which a task with a small share reaches in
	 * big steps); moving it up would take from large shares and give to
	 * small ones.
	 */
	if ((enq_flags & SCX_ENQ_WAKEUP) && vtime_before(vtime, vtime_now - task_slice_ns))
		vtime = vtime_now - task_slice_ns;

	if (tctx) {
		bw_refresh_chain(p, tctx);
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
	 * Sent back by cpu_release (an RT or stop task took its CPU): to an idle
	 * CPU if there is one, else back to the head of its own CPU's queue with
	 * the slice it had left, where the kernel leaves a task so preempted. It
	 * keeps its turn, as under CFS: through the LLC's queue it would queue
	 * behind every task with a lower vtime: a limited hog among five
	 * unlimited ones, 30 ms of CPU a period against a fair share of 33, got
	 * 0.974 of its limit in a CI run that way (0.997-1.006 in 18 before).
	 */
	if (enq_flags & SCX_ENQ_REENQ) {
		cpu = scx_bpf_pick_idle_cpu(p->cpus_ptr, 0);
		if (cpu >= 0) {
			scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL_ON | cpu, 0, enq_flags);
			bw_kick_cpu(cpu, 0);
			stat_inc(BW_STAT_KICK);
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
 * Steal when behind (queues.bpf.h): the front of one other LLC's queue, if
 * its vtime is more than BW_STEAL_LAG_NS behind both this LLC's front and
 * prev (when prev may go on).
 */
static bool steal_behind(s32 cpu, u32 llc, struct task_struct *prev, bool can_keep)
{
	u32 nr = nr_llcs(), from;
	u64 theirs, ours;
	bool have;

	if (nr < 2)
		return false;
	from = llc_nearest(llc, bpf_get_prandom_u32() % (nr - 1));
	if (!dsq_front_vtime(llc_dsq(from), &theirs))
		return false;
	have = dsq_front_vtime(llc_dsq(llc), &ours);
	if (can_keep && prev && (!have || vtime_before(prev->scx.dsq_vtime, ours))) {
		ours = prev->scx.dsq_vtime;
		have = true;
	}
	if (!have || !vtime_before(theirs + BW_STEAL_LAG_NS, ours))
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
	/*
	 * RT, deadline and stop tasks have prio < MAX_RT_PRIO; fair, ours and
	 * idle not. Not on a CPU going offline (its stop task takes it): the
	 * re-enqueue may queue work there that never runs, as a kick does
	 * (cpu_going_down), and the kernel moves its tasks anyway.
	 */
	if (next->prio < MAX_RT_PRIO && prev->prio >= MAX_RT_PRIO &&
	    !bw_this_cpu_going_down() && !scx_bpf_reenqueue_local_from_anywhere())
		stat_inc(BW_STAT_REENQ);
	return 0;
}

void BPF_STRUCT_OPS(bw_cpu_release, s32 cpu, struct scx_cpu_release_args *args)
{
	scx_bpf_reenqueue_local();
	stat_inc(BW_STAT_REENQ);
}

/* Runnable and quiescent bracket the time a task counts in its cgroup's weight. */
void BPF_STRUCT_OPS(bw_runnable, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *tctx = task_ctx(p);

	bw_fork_section_leave(p);
	if (!tctx)
		return;
	bw_refresh_chain(p, tctx);
	cg_activate(p, tctx);
}

void BPF_STRUCT_OPS(bw_quiescent, struct task_struct *p, u64 deq_flags)
{
	struct task_ctx *tctx = task_ctx(p);

	if (!tctx)
		return;
	cg_deactivate(tctx);
	/*
	 * Going to sleep ends a wait in a park queue without running: no wait.
	 * Not so a dequeue to change the task (a cgroup move, a nice change):
	 * it is queued again at once and its wait goes on.
	 */
	if (deq_flags & SCX_DEQ_SLEEP)
		tctx->parked_at = 0;
}

void BPF_STRUCT_OPS(bw_set_weight, struct task_struct *p, u32 weight)
{
	struct task_ctx *tctx = task_ctx(p);

	if (tctx)
		cg_reweight_task(p, tctx);
}

void BPF_STRUCT_OPS(bw_enable, struct task_struct *p)
{
	p->scx.dsq_vtime = vtime_now;
}

/* Leaving sched_ext: whatever the task counted for goes. */
void BPF_STRUCT_OPS(bw_disable, struct task_struct *p)
{
	struct task_ctx *tctx = task_ctx(p);

	if (tctx)
		cg_deactivate(tctx);
}

s32 BPF_STRUCT_OPS(bw_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	struct task_ctx *tctx;

	/* Failing here would eject the scheduler: enqueue creates it then. */
	if (!bw_init_task_ctx)
		return 0;
	tctx = bpf_task_storage_get(&task_ctxs, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (tctx)
		tctx->gen = BW_GEN_STALE;
	return 0;
}

#include "ops_cgroup.bpf.h"

#include "ops_hotplug.bpf.h"

s32 BPF_STRUCT_OPS_SLEEPABLE(bw_init)
{
	s32 ret;

	u32 llc;
	bpf_for(llc, 0, BW_MAX_LLCS) {
		ret = scx_bpf_create_dsq(llc_dsq(llc), -1);
		if (ret)
			return ret;
	}
	s32 slot;
	bpf_for(slot, 0, BW_MAX_GROUPS) {
		ret = scx_bpf_create_dsq(BW_PARK_DSQ_BASE + slot, -1);
		if (ret)
			return ret;
	}
	ret = bw_slice_timers_init();
	if (ret)
		return ret;
	return bw_safety_start();
}

void BPF_STRUCT_OPS(bw_exit, struct scx_exit_info *ei)
{
	UEI_RECORD(uei, ei);
}

#include "ops_dump.bpf.h"

SCX_OPS_DEFINE(bandwidth_ops,
	       .select_cpu		= (void *)bw_select_cpu,
	       .enqueue			= (void *)bw_enqueue,
	       .dispatch		= (void *)bw_dispatch,
	       .update_idle		= (void *)bw_update_idle,
	       .running			= (void *)bw_running,
	       .tick			= (void *)bw_tick,
	       .cpu_release		= (void *)bw_cpu_release,
	       .stopping		= (void *)bw_stopping,
	       .runnable		= (void *)bw_runnable,
	       .quiescent		= (void *)bw_quiescent,
	       .set_weight		= (void *)bw_set_weight,
	       .enable			= (void *)bw_enable,
	       .disable			= (void *)bw_disable,
	       .init_task		= (void *)bw_init_task,
	       .cgroup_init		= (void *)bw_cgroup_init,
	       .cgroup_exit		= (void *)bw_cgroup_exit,
	       .cgroup_move		= (void *)bw_cgroup_move,
	       .cgroup_set_weight	= (void *)bw_cgroup_set_weight,
	       .cgroup_set_bandwidth	= (void *)bw_cgroup_set_bandwidth,
	       .cpu_online		= (void *)bw_cpu_online,
	       .cpu_offline		= (void *)bw_cpu_offline,
	       .init			= (void *)bw_init,
	       .exit			= (void *)bw_exit,
	       .dump			= (void *)bw_dump,
	       .dump_task		= (void *)bw_dump_task,
	       .flags			= SCX_OPS_ENQ_LAST | SCX_OPS_KEEP_BUILTIN_IDLE,
	       .name			= "scx_bandwidth");
