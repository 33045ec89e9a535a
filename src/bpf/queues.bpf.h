/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The queues of the scheduling core: one vtime-ordered DSQ per last-level
 * cache (LLC), and the machine's topology that maps CPUs to them (main.bpf.c
 * includes this file before bandwidth.bpf.h, whose releases use task_dsq()).
 *
 * A task waits in the queue of the LLC of the CPU it last ran on: a CPU
 * takes work from its own LLC's queue first, so tasks stay where their cache
 * is warm and CPUs of different LLCs do not contend for one queue's lock (on
 * 128 CPUs a scheduler with one shared queue ran a pipe benchmark at 1/50 of
 * the kernel's, sched-ext/scx issue 998). Two rules keep the machine
 * work-conserving and fair across queues:
 *
 *  - steal when idle: a CPU whose own queue has nothing it may run takes the
 *    first task it may run from the other LLCs' queues, nearest first (same
 *    NUMA node, then by node distance);
 *  - steal when behind: at each dispatch a CPU looks at the front of one other
 *    queue (picked at random, so every queue is looked at by every CPU in
 *    turn, at O(1) cost per dispatch) and takes that task when it is more
 *    than a few of its own slices behind what the CPU would run otherwise
 *    (steal_lag(): BW_STEAL_LAG_SLICES, times BW_STEAL_NODE_FACTOR across
 *    NUMA nodes). vtime advances machine-wide in the same units (CPU time
 *    over the task's share of the machine), so an LLC with more load per CPU
 *    falls behind and its tasks migrate until the loads even out; the
 *    cpu.weight and nice shares hold across queues, and no task waits
 *    behind a queue that never drains.
 *
 * The agent (src/scheduler/topology.rs) writes the topology before attaching
 * and again after a CPU comes online; a CPU it does not know counts in LLC 0.
 */
#ifndef __SCX_QUEUES_BPF_H
#define __SCX_QUEUES_BPF_H

#include "intf.h"

/* The masks below rely on these being powers of two. */
_Static_assert(!(BW_MAX_LLCS & (BW_MAX_LLCS - 1)), "BW_MAX_LLCS must be a power of two");
_Static_assert(!(BW_MAX_CPUS & (BW_MAX_CPUS - 1)), "BW_MAX_CPUS must be a power of two");

/* LLC of each CPU. */
u32 bw_cpu_llc[BW_MAX_CPUS];
/* NUMA node of each LLC. */
u32 bw_llc_node[BW_MAX_LLCS];
/* For each LLC, the other LLCs nearest first (same node, then node distance). */
u8 bw_llc_order[BW_MAX_LLCS][BW_MAX_LLCS];
/* LLCs in use, 1..BW_MAX_LLCS (0 until the agent writes it: one). */
volatile u32 bw_nr_llcs;
/* Bumped by every CPU going offline or coming online: the agent re-reads the topology. */
volatile u64 bw_hotplug_seq;

/*
 * How far behind a task at the front of another LLC's queue must be for a
 * CPU to take it (steal when behind), in slices of that task's own CPU time.
 * Its vtime advances by its CPU time over its share of the machine, so in
 * vtime a slice is task_slice_ns / share: with 16 equal tasks one slice is
 * 16 slices of vtime. (A fixed 20 ms of vtime, less than one slice of such a
 * task, made the fronts of two equally loaded LLCs cross it on their phase
 * alone: 31 % of all dispatches at 8 vCPUs were cross-node steals, 363
 * migrations/s against the kernel's 1.) Smaller, tasks of equally loaded LLCs
 * migrate on noise; larger, a lagging task gets its share later (it is still
 * its share: vtime keeps the account). Across NUMA nodes a migration costs
 * the task its memory's locality, so the lag must be larger.
 */
#define BW_STEAL_LAG_SLICES	2
#define BW_STEAL_NODE_FACTOR	4

static __always_inline u32 nr_llcs(void)
{
	u32 n = READ_ONCE(bw_nr_llcs);

	return n && n <= BW_MAX_LLCS ? n : 1;
}

static __always_inline u32 cpu_llc(s32 cpu)
{
	u32 llc, i = cpu;

	if (i >= BW_MAX_CPUS)
		return 0;
	/* Keeps the mask, which the compiler would drop after the test above:
	 * the verifier needs it where the bound is lost in a spill. */
	barrier_var(i);
	llc = READ_ONCE(bw_cpu_llc[i & (BW_MAX_CPUS - 1)]);
	return llc < BW_MAX_LLCS ? llc : 0;
}

static __always_inline u64 llc_dsq(u32 llc)
{
	return BW_LLC_DSQ_BASE + llc;
}

/* The i-th nearest other LLC of @llc. */
static __always_inline u32 llc_nearest(u32 llc, u32 i)
{
	u32 other;

	/*
	 * Both are below BW_MAX_LLCS; masks, not checks, because the compiler
	 * may fold a check the verifier needs into an earlier one.
	 */
	llc &= BW_MAX_LLCS - 1;
	i &= BW_MAX_LLCS - 1;
	barrier_var(llc);
	barrier_var(i);
	other = bw_llc_order[llc][i];
	return other < BW_MAX_LLCS ? other : 0;
}

static __always_inline bool llc_same_node(u32 a, u32 b)
{
	if (a >= BW_MAX_LLCS || b >= BW_MAX_LLCS)
		return true;
	return bw_llc_node[a & (BW_MAX_LLCS - 1)] == bw_llc_node[b & (BW_MAX_LLCS - 1)];
}

/*
 * The queue @p waits in: that of the LLC of the CPU it last ran on (or was
 * just placed on by select_cpu), or of any CPU it may run on if not that one.
 */
static __always_inline u64 task_dsq(struct task_struct *p)
{
	s32 cpu = scx_bpf_task_cpu(p);

	if (!bpf_cpumask_test_cpu(cpu, p->cpus_ptr))
		cpu = bpf_cpumask_any_distribute(p->cpus_ptr);
	return llc_dsq(cpu_llc(cpu));
}

/* The first task of @dsq_id, NULL if it is empty. */
static __always_inline struct task_struct *dsq_front(u64 dsq_id)
{
	return __COMPAT_scx_bpf_dsq_peek(dsq_id);
}

#endif /* __SCX_QUEUES_BPF_H */
