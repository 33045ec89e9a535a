/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Interface shared by the BPF scheduler and the Rust agent (through bindgen).
 *
 * Ownership of the shared state, which is the whole contract between the two:
 *
 *  - struct bw_group (one per limited cgroup, an array in .bss that the agent
 *    mmaps): the agent writes the limit fields and adds runtime to the pool
 *    (refill); CPUs take runtime out (compare-and-swap) and give slack back,
 *    and bump the statistics counters. BPF refills a pool only when the
 *    agent is stalled (refilled_at BW_SAFETY_PERIODS periods old), and for
 *    groups with a period below BW_SHORT_PERIOD_NS, whose refills a BPF
 *    timer does on the period grid; whoever refills stamps refilled_at, and
 *    the other skips that period.
 *  - struct bw_cpu (per CPU and per group, a per-CPU array): written by BPF
 *    only, by its CPU and by the agent's unthrottle program, which also pays
 *    the CPUs' debts out of a refill (runtime changes are atomic for that)
 *    and reads the throttle clocks; the agent reads the local runtimes through
 *    the map for its statistics.
 *  - cgid_slot (hash map cgroup id -> slot): written by the agent only.
 */
#ifndef __SCX_BANDWIDTH_INTF_H
#define __SCX_BANDWIDTH_INTF_H

#ifndef __VMLINUX_H__
typedef unsigned char u8;
typedef unsigned int u32;
typedef int s32;
typedef unsigned long long u64;
typedef long long s64;
#endif

enum bw_consts {
	/* Limited cgroups the scheduler can hold at once (slots). */
	BW_MAX_GROUPS		= 4096,
	/* Limited ancestors (including itself) a task's cgroup may have. */
	BW_MAX_CHAIN		= 16,
	/* Deepest cgroup level walked when resolving a task's chain. */
	BW_MAX_LEVEL		= 64,
	/* cgroups (with the cpu controller) whose cpu.weight is tracked. */
	BW_MAX_CGROUPS		= 65536,
	/* A task's share of the machine is a fixed-point fraction of this. */
	BW_SHARE_ONE		= 1 << 20,

	/*
	 * Runnable, unthrottled tasks wait in the vtime-ordered queue of an LLC
	 * (last-level cache domain): DSQ BW_LLC_DSQ_BASE + N for LLC N.
	 */
	BW_LLC_DSQ_BASE		= 0,
	/* LLCs the scheduler keeps a queue for (more are folded into the last). */
	BW_MAX_LLCS		= 64,
	/* Parked tasks of slot N wait in DSQ BW_PARK_DSQ_BASE + N. */
	BW_PARK_DSQ_BASE	= 0x10000,

	/* A task's cached chain is valid while its gen equals bw_cfg_gen. */
	BW_GEN_STALE		= 0,

	/*
	 * Local runtime a CPU keeps when it stops running a group's work; the
	 * rest goes back to the pool (fair.c: min_cfs_rq_runtime).
	 */
	BW_MIN_LOCAL_NS		= 1000 * 1000,

	/*
	 * Throttle-wait histogram: bucket (4 * log2(us) + next two bits) of
	 * the time a task waited parked, so each power of two is split in four.
	 */
	BW_WAIT_BUCKETS		= 96,

	/*
	 * Safety net: a group whose last refill is this many periods old gets
	 * refilled and released by BPF itself (the agent is stalled), checked
	 * every BW_SAFETY_TICK_NS by a BPF timer.
	 */
	BW_SAFETY_PERIODS	= 3,
	BW_SAFETY_TICK_NS	= 50 * 1000 * 1000,

	/*
	 * Rescue: a task parked this long (ms) runs anyway, for at most one slice
	 * of BW_RESCUE_SLICE_NS (in practice until the next tick), on credit:
	 * its CPU's local runtime goes negative and the group's next pulls
	 * pay it back. Throttling alone can starve a task for good (one moved
	 * between two throttled groups is never in the one being refilled),
	 * and sched_ext ejects a scheduler whose task waits 30 s.
	 */
	BW_RESCUE_MS		= 5000,
	BW_RESCUE_SLICE_NS	= 1000 * 1000,
	/*
	 * Most a group's CPUs may owe in all for runs on credit by tasks that
	 * hold the kernel up (bw_kernel_credit): two slices; twice that for
	 * RCU readers, whose parking stalls every grace period on the machine,
	 * and for tasks that a refill released after they were refused at the
	 * first bound, so that none waits more than about a period.
	 */
	BW_DEBT_MAX_NS		= 10 * 1000 * 1000,
	BW_DEBT_HELD_MAX_NS	= 2 * BW_DEBT_MAX_NS,

	/*
	 * Short periods: a group whose period is below this is refilled by a
	 * BPF timer on the period grid (the agent books its periods), and a
	 * task whose slice such a group cuts below the full slice is stopped by
	 * a per-CPU BPF timer when it ends, not at the next tick. See
	 * bw_short_period.bpf.h, "Short periods".
	 */
	BW_SHORT_PERIOD_NS	= 10 * 1000 * 1000,
	/*
	 * How far a short-period group's pool may be overdrawn: by what its
	 * limit gives it over this time (quota / period of it). CPUs pull past
	 * empty down to minus that, and later refills pay it back. See
	 * bw_short_period.bpf.h, "Short periods", fourth.
	 */
	BW_SHORT_OVERDRAFT_NS	= 20 * 1000 * 1000,
	/* CPUs that get a slice timer (more are enforced at tick granularity). */
	BW_MAX_CPUS		= 1024,
};

/*
 * A limited cgroup. Times in nanoseconds.
 */
struct bw_group {
	/* cgroup id (cgroup2 inode number) this slot enforces; 0 = slot unused. */
	u64 cgid;
	/*
	 * Global pool of runtime for the current period. The agent adds quota at
	 * each refill (capped at quota + burst); CPUs pull slices out of it.
	 * Never negative (a CPU takes at most what is there), except a
	 * short-period group's, which may be overdrawn (BW_SHORT_OVERDRAFT_NS).
	 */
	s64 runtime;
	/* Limit as configured, for ops.dump and the statistics. */
	u64 quota;
	u64 period;
	u64 burst;
	/*
	 * Set by the first CPU that finds the pool empty, cleared by the
	 * agent's refill. While set, newly runnable tasks of the group park.
	 */
	u32 throttled;
	/*
	 * Set by the CPU that returned slack into a throttled pool and told the
	 * agent (events ring, BW_EV_SLACK); cleared by the agent when it handled it.
	 */
	u32 slack_pending;
	/* Set by the safety net: a dispatch must release this group's parked tasks. */
	u32 safety_release;
	/*
	 * Set by the agent when it stopped the group's period timer (the group
	 * used nothing for a whole period and its pool is full, as the kernel's
	 * period timer deactivates); the first CPU that pulls from the pool
	 * clears it and sends BW_EV_WAKE.
	 */
	u32 idle;
	/*
	 * CLOCK_MONOTONIC ns of the last refill, by the agent or the safety net;
	 * 0 until the agent first filled the pool.
	 */
	u64 refilled_at;
	/* Refills the safety net did because the agent was late. */
	u64 nr_safety_refills;
	/* Short periods: grid points at which the BPF timer found the group throttled. */
	u64 nr_short_throttled;
	/*
	 * Largest vtime of a task of the group that started running (0: none
	 * yet): the group's own "now", where its tasks waking beside runnable
	 * siblings are placed (bw_enqueue, wake_now).
	 */
	u64 vtime;

	/* --- statistics, written by BPF, read by the agent --- */
	/* CPU time charged to the group (all CPUs, includes descendants). */
	u64 usage;
	/* Runtime moved from the pool to CPUs. */
	u64 pulled;
	/* Sum over CPUs of the time each CPU spent throttled (cpu.stat semantics). */
	u64 throttled_time;
	/* Times a CPU found the pool empty and throttled the group. */
	u64 nr_throttle_events;
	/*
	 * Tasks parked so far. The agent runs the unthrottle program when this
	 * moved since its last look even if the group is not flagged throttled,
	 * so a task that parked while a refill raced with it waits one period
	 * at most.
	 */
	u64 nr_parked;
	/* Runtime CPUs gave back to the pool (slack return), and how often. */
	u64 slack_returned;
	u64 nr_slack_returns;
	/* How long parked tasks waited until they ran again (see BW_WAIT_BUCKETS). */
	u64 wait_hist[BW_WAIT_BUCKETS];
	u64 wait_max_ns;
	/* Sum of those waits (the metrics' histogram sum). */
	u64 wait_sum_ns;
};

/*
 * Per-CPU state of one limited group: what the kernel keeps in a cfs_rq.
 */
struct bw_cpu {
	/* Local runtime left on this CPU; may go negative by one charge. */
	s64 runtime;
	/* When this CPU throttled the group, 0 when not throttled. */
	u64 throttled_at;
};

/* Argument of the bw_unthrottle syscall program. */
struct bw_unthrottle_args {
	u32 slot;
	u32 pad;
	/* Out: number of parked tasks released. */
	u64 nr_released;
};

/* Argument of the bw_short_refill syscall program. */
struct bw_short_refill_args {
	u32 slot;
	u32 pad;
	/* Out: grid points refilled (0: none was due, or another path did it). */
	u64 periods;
};

/* Argument of the bw_reset_slot syscall program. */
struct bw_reset_args {
	u32 slot;
	u32 pad;
};

enum bw_event_kind {
	/* Slack returned into the throttled pool of slot. */
	BW_EV_SLACK		= 1,
	/* cpu.max / cpu.max.burst of cgid (at attach, creation, or a write). */
	BW_EV_LIMIT		= 2,
	/* cgid, which has a slot, is being destroyed. */
	BW_EV_EXIT		= 3,
	/* A CPU pulled from the pool of slot, whose period timer was stopped (idle). */
	BW_EV_WAKE		= 4,
};

/*
 * Record of the events ring buffer (BPF -> agent). Limits are in µs as
 * written to cgroupfs; an unlimited quota ("max") is (u64)-1.
 */
struct bw_event {
	u32 kind;
	u32 slot;
	u64 cgid;
	u64 period_us;
	u64 quota_us;
	u64 burst_us;
};

/* Global counters, per CPU, summed by the agent. */
enum bw_stat_idx {
	BW_STAT_ENQUEUE,
	BW_STAT_DIRECT,		/* dispatched straight to an idle CPU (or a sync waker's) */
	BW_STAT_DISPATCH,	/* moved from an LLC queue to a CPU (any of the three below) */
	BW_STAT_STEAL,		/* ... taken from another LLC's queue of the same NUMA node */
	BW_STAT_STEAL_NODE,	/* ... taken from an LLC queue of another NUMA node */
	BW_STAT_PARK,		/* tasks parked because their group was throttled */
	BW_STAT_RELEASE,	/* parked tasks released by an unthrottle */
	BW_STAT_PULL,		/* slices pulled from a pool */
	BW_STAT_THROTTLE,	/* CPU-level throttle events */
	BW_STAT_PREEMPT,	/* running tasks cut short by throttling */
	BW_STAT_KICK,		/* idle CPUs kicked to run released or queued tasks */
	BW_STAT_SLACK,		/* ns of local runtime returned to pools */
	BW_STAT_EVENT_LOST,	/* events the ring had no room for */
	BW_STAT_SAFETY,		/* refills done by the BPF safety net */
	BW_STAT_HOTPLUG,	/* CPUs that went offline or came online */
	BW_STAT_HOTPLUG_NS,	/* ns of local runtime such CPUs gave back to pools */
	BW_STAT_DEEP,		/* chains cut at BW_MAX_CHAIN limited groups */
	BW_STAT_RESCUE,		/* parked tasks run on credit after BW_RESCUE_MS */
	BW_STAT_UNWEIGHTED,	/* cgroups created with no room left to track cpu.weight */
	BW_STAT_SHORT_REFILL,	/* grid points of short-period groups refilled by BPF (a late refill counts all it covers) */
	BW_STAT_SLICE_KICK,	/* tasks stopped by the slice timer before the tick */
	BW_STAT_SHORT_MISSED,	/* grid points a short-period timer passed unfired (late by a period) */
	BW_STAT_SHORT_CATCH_UP,	/* short-period refills done by a pull or the agent, the timer not yet run */
	BW_STAT_KERNEL_CREDIT,	/* throttled tasks let run on credit: in fork/exec/exit, RCU section, page fault */
	BW_STAT_KERNEL_DEBT,	/* ... parked there anyway: their groups' debt at the bound */
	BW_STAT_HELD_FIRST,	/* ... released ahead of the queue at the next refill */
	BW_STAT_IDLE_NUDGE,	/* idle CPUs a tick found beside a waiting task, kicked */
	BW_STAT_REENQ,		/* CPUs taken by a higher class (RT, stop): queued tasks re-enqueued */
	BW_STAT_CTX_LATE,	/* task contexts init_task could not allocate, created at first use */
	BW_STAT_CTX_MISSING,	/* ... not even then: the task ran without limits that time */
	BW_NR_STATS,
};

#endif /* __SCX_BANDWIDTH_INTF_H */
