/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What every step of bandwidth control shares, and what the agent sees: the
 * tunables it sets before load, the groups it limits (bw_groups, which it
 * mmaps to refill the pools; intf.h says who writes what), the per-CPU local
 * runtimes, the task context, the counters and the events ring. It comes
 * first so that each step's file can use any of it and hold nothing but its
 * own part of the algorithm.
 *
 * Two helpers are here because several steps must agree on them: bw_slots()
 * ends every walk over the slots at the highest one the agent ever mapped
 * (a walk of all BW_MAX_GROUPS takes that time from the running task, see
 * bw_nr_slots), and bw_pool_floor() is the one definition of a dry pool that
 * assign, throttle, slack, unthrottle and the BPF refills all use.
 */
#ifndef __SCX_BW_COMMON_BPF_H
#define __SCX_BW_COMMON_BPF_H

/* Slice pulled from a pool at a time (sched_cfs_bandwidth_slice_us). */
const volatile u64 bw_slice_ns = 5ULL * 1000 * 1000;
/* Number of possible CPU ids, for loops over CPUs. */
const volatile u32 nr_cpu_ids = 1;
/* Thread group of the agent: its tasks are never charged nor parked. */
const volatile s32 agent_tgid = -1;
/* Return local runtime to the pool when a CPU stops running a group (slack). */
const volatile bool bw_slack_return = true;
/* Let throttled tasks that hold the kernel up run on (see bw_kernel_credit()). */
const volatile bool bw_kernel_credit_on = true;

/* The limited groups; the agent mmaps this array (see intf.h). */
struct bw_group bw_groups[BW_MAX_GROUPS];
/* Bumped by the agent whenever cgid_slot changes; invalidates task chains. */
volatile u64 bw_cfg_gen = 1;
/*
 * Bumped on every cgroup creation and removal: the agent looks for its
 * configured cgroups' paths only when this moved (or every few seconds).
 */
volatile u64 bw_cgroup_seq;
/*
 * Set by the agent while a [[rule]] sets a full limit, which may apply to a
 * cgroup without cpu.max: cgroup_init then reports unlimited cgroups too.
 */
volatile u8 bw_report_unlimited;
/*
 * Every slot the agent ever mapped is below this; it raises it before it maps
 * a cgroup to a new slot. Loops over the groups stop here: the safety net
 * walks them every BW_SAFETY_TICK_NS in softirq context, and a walk of all
 * BW_MAX_GROUPS slots takes that time from whatever task runs on the CPU
 * (under TCG a 60 ms burn was seen taking 82 ms without being switched out).
 */
volatile u32 bw_nr_slots;
/*
 * CLOCK_MONOTONIC time by which the agent's run loop wakes anyway (its next
 * deadline), written before it sleeps, 0 while it is awake. An event that can
 * wait until then is queued without waking it (BPF_RB_NO_WAKEUP): under
 * emulation a wakeup of the agent costs more than the event's handling, and on
 * hardware it still preempts whatever ran on that CPU. While the agent is
 * awake events do notify: a notification marks the ring readable, and the
 * agent's next ppoll returns at once instead of sleeping past the event.
 */
volatile u64 bw_agent_wake_at;

static __always_inline u32 bw_slots(void)
{
	u32 n = READ_ONCE(bw_nr_slots);

	return n < BW_MAX_GROUPS ? n : BW_MAX_GROUPS;
}

/* cgroup id -> slot in bw_groups, for limited cgroups only. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, BW_MAX_GROUPS);
	__type(key, u64);
	__type(value, u32);
} cgid_slot SEC(".maps");

/* Local runtime and throttle clock of every group, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BW_MAX_GROUPS);
	__type(key, u32);
	__type(value, struct bw_cpu);
} bw_cpus SEC(".maps");

/* Global counters (enum bw_stat_idx), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, BW_NR_STATS);
	__type(key, u32);
	__type(value, u64);
} bw_stats SEC(".maps");

/*
 * 1 on a CPU from ops.cpu_offline until ops.cpu_online. A kick queues irq_work
 * on the CPU that asks for it; queued on a CPU that is going down (its last
 * trip through idle still calls ops.update_idle), the work never runs, and
 * the kernel waits for it forever when the scheduler is unloaded. Such a CPU
 * does not kick: the other CPUs find the work on their own.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} cpu_going_down SEC(".maps");

/*
 * 1 on a CPU while an RT or deadline task of another program than our agent,
 * not a kernel thread, holds it (set by bw_sched_switch when it takes the
 * CPU): what it preempted may wait a long time there (see bw_enqueue).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u32);
} cpu_taken_by_rt SEC(".maps");

/* Whether this CPU is going offline (it must not queue work on itself). */
static __always_inline bool bw_this_cpu_going_down(void)
{
	u32 zero = 0, *down = bpf_map_lookup_elem(&cpu_going_down, &zero);

	return down && *down;
}

static __always_inline void bw_kick_cpu(s32 cpu, u64 flags)
{
	if (bw_this_cpu_going_down())
		return;
	scx_bpf_kick_cpu(cpu, flags);
}

static void bw_set_going_down(s32 cpu, u32 down)
{
	u32 zero = 0, *d = bpf_map_lookup_percpu_elem(&cpu_going_down, &zero, cpu);

	if (d)
		WRITE_ONCE(*d, down);
}

struct task_ctx {
	/* The chain below is valid while gen == bw_cfg_gen. */
	u64 gen;
	/* p->se.sum_exec_runtime when this task was last charged. */
	u64 last_charge;
	/* When the task parked (0 = not parked) and in which slot. */
	u64 parked_at;
	u32 parked_slot;
	u32 nr_chain;
	/* Slots of the limited groups, innermost first (slots < BW_MAX_GROUPS). */
	u16 chain[BW_MAX_CHAIN];
	/*
	 * Vtime charged but not yet added: the part of a charge the lead cap
	 * clipped (main.bpf.c, charge), added with the next charge.
	 */
	u32 vtime_owed;
	/*
	 * The weight state slot of the task's cgroup (cpu controller) and its
	 * generation (0: none), resolved with the chain (weight.bpf.h, cg_bind).
	 */
	u32 cg_idx;
	u32 cg_gen;
	/*
	 * cpu.weight (weight.bpf.h): the slot whose active weight counts this
	 * task and its generation (0 = not counted: sleeping or parked), and
	 * the weight it counted with, so that exactly that is taken out again.
	 */
	u32 act_idx;
	u32 act_gen;
	u32 act_weight;
	/* Queued by enqueue on credit, holding the kernel up (bw_kernel_credit). */
	u8 kernel_credit;
	/*
	 * Last refused credit although it held the kernel up (its groups' debt
	 * was at the bound): a refill releases it ahead of the others.
	 */
	u8 held_kernel;
	/*
	 * Inside fork's cgroup_threadgroup_rwsem section: set when the kernel
	 * asks us to init the child (sched_cgroup_fork, within the section),
	 * cleared when the child first wakes (after it); see bw_kernel_credit.
	 */
	u8 in_fork;
	/*
	 * Released by a refill as held_kernel: runs on credit to the larger
	 * debt bound while it still holds the kernel up.
	 */
	u8 kernel_pass;
	/*
	 * 96 bytes. Keep it at most 120, which with the kernel's 72-byte
	 * storage header fills a 192-byte allocation; at 128 one CI run
	 * failed to allocate one (task_ctx_create). Whether the larger size
	 * class mattered is not known.
	 */
};
_Static_assert(sizeof(struct task_ctx) <= 120, "task_ctx outgrew its allocation");
_Static_assert(BW_MAX_GROUPS <= 65536, "chain slots are u16");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctxs SEC(".maps");

static __always_inline void stat_inc(u32 idx)
{
	u64 *cnt = bpf_map_lookup_elem(&bw_stats, &idx);

	if (cnt)
		(*cnt)++;
}

static __always_inline void stat_add(u32 idx, u64 n)
{
	u64 *cnt = bpf_map_lookup_elem(&bw_stats, &idx);

	if (cnt)
		*cnt += n;
}

/* Events for the agent (struct bw_event): slack, cgroupfs limits, exits. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

/*
 * Queue an event for the agent; false (and counted) when the ring is full.
 * @flags: 0 wakes the agent, BPF_RB_NO_WAKEUP leaves the event for its next
 * wakeup (see bw_agent_wake_at).
 */
static bool bw_emit_flags(u32 kind, u32 slot, u64 cgid, u64 period_us, u64 quota_us, u64 burst_us, u64 flags)
{
	struct bw_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);

	if (!ev) {
		stat_inc(BW_STAT_EVENT_LOST);
		return false;
	}
	ev->kind = kind;
	ev->slot = slot;
	ev->cgid = cgid;
	ev->period_us = period_us;
	ev->quota_us = quota_us;
	ev->burst_us = burst_us;
	bpf_ringbuf_submit(ev, flags);
	return true;
}

/* Queue an event that the agent must see at once. */
static bool bw_emit(u32 kind, u32 slot, u64 cgid, u64 period_us, u64 quota_us, u64 burst_us)
{
	return bw_emit_flags(kind, slot, cgid, period_us, quota_us, burst_us, 0);
}

static __always_inline struct task_ctx *task_ctx(const struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctxs, (struct task_struct *)p, 0, 0);
}

/* Whether ops.init_task creates task contexts (off only to test the fallback). */
const volatile bool bw_init_task_ctx = true;

/*
 * @p's context, created if it has none. ops.init_task creates it, but the
 * allocation can fail there: enabling the scheduler allocates one for every
 * task of the machine in a row, and one CI run had "ops.init_task() failed
 * (-12) for init[1]", which ejected the scheduler before it attached. A task
 * left without one is given it here, by enqueue or running, before it is
 * scheduled or charged; zeroed, its chain is stale (BW_GEN_STALE) and resolves
 * on use. A task that never gets one is scheduled without limits: counted.
 */
static __always_inline struct task_ctx *task_ctx_create(struct task_struct *p)
{
	struct task_ctx *tctx = task_ctx(p);

	if (tctx)
		return tctx;
	tctx = bpf_task_storage_get(&task_ctxs, p, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	stat_inc(tctx ? BW_STAT_CTX_LATE : BW_STAT_CTX_MISSING);
	return tctx;
}

static __always_inline struct bw_group *bw_group(u32 slot)
{
	if (slot >= BW_MAX_GROUPS)
		return NULL;
	return &bw_groups[slot];
}

/* A period below BW_SHORT_PERIOD_NS: refilled by a BPF timer (see short_timer). */
static __always_inline bool bw_short_period(const struct bw_group *g)
{
	u64 period = READ_ONCE(g->period);

	return period && period < BW_SHORT_PERIOD_NS;
}

/*
 * The lowest a pool may go: 0, or for a short-period group minus its
 * overdraft, what its limit gives it over BW_SHORT_OVERDRAFT_NS (see
 * bw_short_period.bpf.h, "Short periods", fourth). A pool at or below it is
 * dry.
 */
static __always_inline s64 bw_pool_floor(const struct bw_group *g)
{
	u64 period = READ_ONCE(g->period), quota = READ_ONCE(g->quota), cpus;

	if (!period || period >= BW_SHORT_PERIOD_NS)
		return 0;
	/* Whole CPUs and the rest, so that nothing overflows. */
	cpus = quota / period;
	if (cpus > 1 << 20)
		cpus = 1 << 20;
	return -(s64)(cpus * BW_SHORT_OVERDRAFT_NS + quota % period * BW_SHORT_OVERDRAFT_NS / period);
}

static __always_inline struct bw_cpu *bw_cpu_local(u32 slot)
{
	return bpf_map_lookup_elem(&bw_cpus, &slot);
}

static __always_inline u32 chain_slot(const struct task_ctx *tctx, u32 i)
{
	return tctx->chain[i & (BW_MAX_CHAIN - 1)];
}

#endif /* __SCX_BW_COMMON_BPF_H */
