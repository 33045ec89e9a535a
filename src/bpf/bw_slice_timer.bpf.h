/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Slice timers: stop a task when its slice ends, not at the next tick.
 * sched_ext ends a slice that ran out only at the next tick (4 ms apart at
 * HZ=250), so a task of a group with 1 ms of runtime ran up to 4 ms. When a
 * short-period group cuts a task's slice, or a task gets a slice on kernel
 * credit, a timer pinned to the CPU preempts it when the slice ends, unless
 * another task runs there by then.
 */
#ifndef __SCX_BW_SLICE_TIMER_BPF_H
#define __SCX_BW_SLICE_TIMER_BPF_H

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

#endif /* __SCX_BW_SLICE_TIMER_BPF_H */
