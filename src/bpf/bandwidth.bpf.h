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
 *               moves parked tasks back to their LLCs' queues.
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
 *
 * Each step has its own file, included below, each after what it uses:
 *
 *   bw_common.bpf.h         state the steps share: tunables, groups, maps,
 *                           task context, counters, events
 *   bw_chain.bpf.h          the chain (above)
 *   bw_account.bpf.h        account, assign, throttle
 *   bw_park.bpf.h           park, and the wait that ends when a task runs
 *   bw_kernel_credit.bpf.h  a throttled task inside the kernel runs on credit
 *   bw_slack.bpf.h          slack
 *   bw_unthrottle.bpf.h     unthrottle, and reset of a slot
 *   bw_hotplug.bpf.h        a CPU going away gives its local runtime back
 *   bw_safety.bpf.h         refill and release when the agent is stalled
 *   bw_short_period.bpf.h   periods below 10 ms, refilled by BPF timers
 *   bw_slice_timer.bpf.h    a slice ends on time, not at the next tick
 *
 * The refill itself is the agent's (src/pools.rs, run from its period
 * timer); BPF refills only in bw_safety.bpf.h and bw_short_period.bpf.h.
 */
#ifndef __SCX_BANDWIDTH_BPF_H
#define __SCX_BANDWIDTH_BPF_H

#include "intf.h"

/*
 * Defined in a later file than a caller: a pull restarts an idle group's
 * short-period timer and catches up a late one (bw_account.bpf.h), slack asks
 * a dispatch for a release (bw_slack.bpf.h), the safety tick starts
 * short-period timers and refills a short-period group by its grid
 * (bw_safety.bpf.h).
 */
static void bw_short_timer_resume(struct bw_group *g, u32 slot, u64 now);
static bool bw_short_catch_up(struct bw_group *g, u32 slot);
static void bw_request_release(struct bw_group *g);
static void bw_short_timer_ensure(struct bw_group *g, u32 slot, u64 now);
static bool bw_short_safety_refill(struct bw_group *g, u32 slot, u64 now);

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
#include "bw_slice_timer.bpf.h"

#endif /* __SCX_BANDWIDTH_BPF_H */
