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
 * The ops that follow a task's life and start and stop the scheduler are
 * here, with vtime and charging; the others are in files included where they
 * stand (one compilation unit): ops_enqueue.bpf.h (where a waking task goes),
 * ops_dispatch.bpf.h (what a CPU runs next, stealing), ops_running.bpf.h
 * (slices, tick, stopping), ops_cgroup.bpf.h (cgroups created, removed, moved
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
 * wait is bounded, and shares down to slice / lead (0.5 %) are exact. What a
 * cap clips is owed and added to the next charge (charge), so a long charge
 * (a vCPU stall under emulation) does not give a small share more.
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
	vtime = p->scx.dsq_vtime + delta * BW_SHARE_ONE / share + tctx->vtime_owed;
	tctx->vtime_owed = 0;
	if (vtime_before(vtime_now + VTIME_MAX_LEAD_NS, vtime)) {
		u64 cap = vtime_now + VTIME_MAX_LEAD_NS;

		if (vtime_before(cap, p->scx.dsq_vtime))
			cap = p->scx.dsq_vtime;
		/*
		 * Owe what the cap clipped, up to one more lead: a long charge
		 * (a slice plus a stall of the vCPU, at nice 19 25 ms x 69 =
		 * 1.7 s) is then paid with the next charges and the share
		 * stays exact. The wait stays bounded: no charge puts vtime
		 * more than the lead ahead.
		 */
		tctx->vtime_owed = vtime - cap < VTIME_MAX_LEAD_NS ?
			vtime - cap : VTIME_MAX_LEAD_NS;
		vtime = cap;
	}
	p->scx.dsq_vtime = vtime;
	if (!tctx->nr_chain)
		return true;
	return bw_account(tctx, delta);
}

#include "ops_enqueue.bpf.h"
#include "ops_dispatch.bpf.h"
#include "ops_running.bpf.h"

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
