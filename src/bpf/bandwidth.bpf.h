/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Bandwidth control hot path, in the kernel's vocabulary (kernel/sched/fair.c):
 *
 *   account     charge the runtime a task just used to the local (per-CPU)
 *               runtime of every limited group on its chain;
 *   assign      when local runtime is used up, pull a slice from the group's
 *               global pool (compare-and-swap, never more than is there);
 *   throttle    when the pool cannot cover it: mark the CPU and the group
 *               throttled; the caller preempts or parks;
 *   park        runnable tasks of a throttled group wait in the group's own
 *               DSQ and are never dispatched from there;
 *   unthrottle  the agent refills the pool (it owns the period timer) and
 *               runs bw_unthrottle(), which settles the throttle clocks and
 *               moves parked tasks back to the shared queue.
 *   slack       when a task of the group goes to sleep, its CPU gives the
 *               local runtime above BW_MIN_LOCAL_NS back to the pool; if
 *               the group is throttled and the pool now holds more than
 *               that floor, the agent is told (events ring) and distributes
 *               it (fair.c waits for more than a slice; see bw_give_back).
 *
 * A task's "chain" is the list of limited groups it belongs to: its own cgroup
 * and every ancestor that has a slot. It is resolved from the cgroup hierarchy
 * once and cached in task storage until the task moves or the agent changes
 * the set of limited groups (bw_cfg_gen).
 */
#ifndef __SCX_BANDWIDTH_BPF_H
#define __SCX_BANDWIDTH_BPF_H

#include "intf.h"

static void bw_short_timer_resume(struct bw_group *g, u32 slot, u64 now);
static bool bw_short_catch_up(struct bw_group *g, u32 slot);
static void bw_request_release(struct bw_group *g);
static void bw_short_timer_ensure(struct bw_group *g, u32 slot, u64 now);

#include "bw_common.bpf.h"
#include "bw_chain.bpf.h"
#include "bw_account.bpf.h"
#include "bw_park.bpf.h"
#include "bw_kernel_credit.bpf.h"
#include "bw_slack.bpf.h"
#include "bw_unthrottle.bpf.h"
#include "bw_hotplug.bpf.h"
#include "bw_safety.bpf.h"
#include "bw_short_period.bpf.h"

/*
 * The slice timer of a CPU: @seq counts the tasks that started running there,
 * @armed_seq is the one the timer was set for.
 */
struct slice_timer {
	struct bpf_timer timer;
	u64 seq;
	u64 armed_seq;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BW_MAX_CPUS);
	__type(key, u32);
	__type(value, struct slice_timer);
} slice_timers SEC(".maps");

static int bw_slice_expired(void *map, int *key, struct slice_timer *st)
{
	if (READ_ONCE(st->armed_seq) == READ_ONCE(st->seq)) {
		bw_kick_cpu(*key, SCX_KICK_PREEMPT);
		stat_inc(BW_STAT_SLICE_KICK);
	}
	return 0;
}

static s32 bw_slice_timers_init(void)
{
	s32 cpu;

	bpf_for(cpu, 0, nr_cpu_ids) {
		struct slice_timer *st = bpf_map_lookup_elem(&slice_timers, &cpu);

		if (!st)
			break;
		if (bpf_timer_init(&st->timer, &slice_timers, 1 /* CLOCK_MONOTONIC */) ||
		    bpf_timer_set_callback(&st->timer, bw_slice_expired))
			return -EINVAL;
	}
	return 0;
}

/* A new task runs on this CPU, or the running one stopped: a pending timer is stale. */
static __always_inline void bw_slice_timer_reset(void)
{
	u32 cpu = bpf_get_smp_processor_id();
	struct slice_timer *st = bpf_map_lookup_elem(&slice_timers, &cpu);

	if (st)
		st->seq++;
}

/* Preempt the task running on this CPU in @ns, unless another runs by then. */
static void bw_stop_current_in(u64 ns)
{
	u32 cpu = bpf_get_smp_processor_id();
	struct slice_timer *st = bpf_map_lookup_elem(&slice_timers, &cpu);

	if (!st)
		return;
	st->armed_seq = st->seq;
	bpf_timer_start(&st->timer, ns, BPF_F_TIMER_CPU_PIN);
}

/*
 * The running task's @slice was cut by its groups' runtime: if one of them
 * has a short period, stop the task when the slice ends.
 */
static void bw_slice_timer_arm(struct task_ctx *tctx, u64 slice)
{
	bool is_short = false;
	s32 i;

	bpf_for(i, 0, BW_MAX_CHAIN) {
		struct bw_group *g;

		if (i >= tctx->nr_chain)
			break;
		g = bw_group(chain_slot(tctx, i));
		if (g && bw_short_period(g)) {
			is_short = true;
			break;
		}
	}
	if (is_short)
		bw_stop_current_in(slice);
}

#endif /* __SCX_BANDWIDTH_BPF_H */
