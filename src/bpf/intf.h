/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Interface shared by the BPF scheduler and the Rust agent (through bindgen).
 *
 * Ownership of the shared state, which is the whole contract between the two:
 *
 *  - struct bw_group (one per limited cgroup, an array in .bss that the agent
 *    mmaps): the agent writes the limit fields and adds runtime to the pool;
 *    BPF only ever takes runtime out of the pool (compare-and-swap) and bumps
 *    the statistics counters.
 *  - struct bw_cpu (per CPU and per group, a per-CPU array): private to BPF,
 *    except that the agent's unthrottle program reads the throttle clocks.
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

	/* The one vtime-ordered queue every runnable, unthrottled task waits in. */
	BW_SHARED_DSQ		= 0,
	/* Parked tasks of slot N wait in DSQ BW_PARK_DSQ_BASE + N. */
	BW_PARK_DSQ_BASE	= 0x10000,

	/* A task's cached chain is valid while its gen equals bw_cfg_gen. */
	BW_GEN_STALE		= 0,
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
	 * Never negative: a CPU takes at most what is there.
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
	u32 pad;

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

/* Argument of the bw_reset_slot syscall program. */
struct bw_reset_args {
	u32 slot;
	u32 pad;
};

/* Global counters, per CPU, summed by the agent. */
enum bw_stat_idx {
	BW_STAT_ENQUEUE,
	BW_STAT_DIRECT,		/* dispatched straight to an idle CPU */
	BW_STAT_DISPATCH,	/* moved from the shared queue to a CPU */
	BW_STAT_PARK,		/* tasks parked because their group was throttled */
	BW_STAT_RELEASE,	/* parked tasks released by an unthrottle */
	BW_STAT_PULL,		/* slices pulled from a pool */
	BW_STAT_THROTTLE,	/* CPU-level throttle events */
	BW_STAT_PREEMPT,	/* running tasks cut short by throttling */
	BW_NR_STATS,
};

#endif /* __SCX_BANDWIDTH_INTF_H */
